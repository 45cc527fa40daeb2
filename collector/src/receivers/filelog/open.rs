//! Opening a path to read without ever blocking, whatever it names: only regular files
//! are opened, and a path that is something else (a FIFO, a device, a socket) is
//! refused with a reason that is logged and counted once per path.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use opscope_storage::regular_file::{self, Access};

use crate::self_telemetry::ReceiverMetrics;

/// Paths remembered as refused, at most (their warnings are not repeated).
const MAX_REMEMBERED: usize = 10_000;

/// Opens `path` for reading if it is a regular file, never blocking (see
/// [`opscope_storage::regular_file`]).
pub fn open_regular(path: &Path) -> io::Result<File> {
    regular_file::open_regular(path, Access::Read)
}

/// Why a path was not tailed, as counted (`reason` label).
pub fn skip_reason(err: &io::Error) -> &'static str {
    if regular_file::is_not_regular(err) {
        "not_regular_file"
    } else {
        "unreadable"
    }
}

/// The paths a receiver could not open, each warned about and counted once.
pub struct SkippedFiles {
    receiver: String,
    metrics: ReceiverMetrics,
    seen: HashSet<PathBuf>,
}

impl SkippedFiles {
    pub fn new(receiver: &str, metrics: ReceiverMetrics) -> Self {
        Self {
            receiver: receiver.to_string(),
            metrics,
            seen: HashSet::new(),
        }
    }

    /// Notes that `path` could not be opened; a path that vanished is not worth a word
    /// (files come and go between listing and opening).
    pub fn report(&mut self, path: &Path, err: &io::Error) {
        if err.kind() == io::ErrorKind::NotFound
            || self.seen.len() >= MAX_REMEMBERED
            || !self.seen.insert(path.to_path_buf())
        {
            return;
        }
        let reason = skip_reason(err);
        self.metrics.skipped_file(reason);
        tracing::warn!(receiver = %self.receiver, path = %path.display(), %err, reason, "cannot open; not tailed");
    }
}

#[cfg(test)]
impl SkippedFiles {
    /// Reports counted in a registry of their own.
    pub fn for_tests() -> Self {
        let telemetry = crate::self_telemetry::SelfTelemetry::new();
        let metrics = telemetry.receiver(opscope_model::TelemetryKind::Logs, "filelog", "filelog");
        Self::new("filelog", metrics)
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, Instant};

    use super::*;

    fn mkfifo(path: &Path) {
        let name = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: `name` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
    }

    #[test]
    fn a_fifo_is_refused_at_once_and_a_regular_file_opened() {
        let directory = tempfile::tempdir().expect("a temp dir");
        let fifo = directory.path().join("0.log.1");
        mkfifo(&fifo);
        let started = Instant::now();
        let err = open_regular(&fifo).expect_err("a FIFO is refused");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(skip_reason(&err), "not_regular_file");
        assert!(err.to_string().contains("a FIFO"), "{err}");

        let regular = directory.path().join("0.log");
        std::fs::write(&regular, "x\n").expect("write");
        assert!(open_regular(&regular).is_ok());
        let err = open_regular(directory.path()).expect_err("a directory is refused");
        assert_eq!(skip_reason(&err), "not_regular_file");
        let err = open_regular(&directory.path().join("gone")).expect_err("missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn the_character_device_behind_a_symlink_is_refused() {
        let directory = tempfile::tempdir().expect("a temp dir");
        let link = directory.path().join("0.log");
        std::os::unix::fs::symlink("/dev/null", &link).expect("symlink");
        let err = open_regular(&link).expect_err("refused");
        assert!(err.to_string().contains("character device"), "{err}");
    }
}
