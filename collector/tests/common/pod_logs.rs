//! Operator pod logs as the container runtime writes them, for a filelog receiver
//! (opscope's or the Collector's) to tail.

use std::path::Path;

use opscope_model::timestamp::{format_rfc3339, now_unix_nanos};

/// Writes `lines` as `<root>/<namespace>_<pod>_<uid>/<container>/0.log`, each a full
/// (`F`) stdout line in CRI format, stamped now, a microsecond apart.
pub fn write_pod_log(root: &Path, pod_directory: &str, container: &str, lines: &str) {
    let directory = root.join(pod_directory).join(container);
    std::fs::create_dir_all(&directory).expect("the pod's log directory");
    let now = now_unix_nanos();
    let cri: String = lines
        .lines()
        .enumerate()
        .map(|(n, line)| {
            let stamp = format_rfc3339(now + n as u64 * 1_000);
            format!("{stamp} stdout F {line}\n")
        })
        .collect();
    std::fs::write(directory.join("0.log"), cri).expect("the CRI log");
}
