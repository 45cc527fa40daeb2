//! An operator process run the way a node runs its pod: its stdout and stderr written
//! line by line into `<root>/<namespace>_<pod>_<uid>/<container>/0.log` in the CRI
//! format the container runtime writes (`<RFC3339Nano> <stream> F <line>`), where
//! opscope's `filelog` receiver reads them. Killed on drop.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::SystemTime;

use opscope_model::hash::fnv1a;

use crate::pod_cgroup::PodCgroup;

/// Longest line kept whole, as the kubelet's default (16 KiB) splits longer ones.
const MAX_LINE: usize = 16 * 1024;

/// Who the process runs as in the cluster the test pretends it is in.
#[derive(Debug, Clone)]
pub struct PodIdentity {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub container: String,
}

impl PodIdentity {
    /// A pod of a Deployment `deployment` in `namespace`, named as a ReplicaSet names
    /// its pods, `replica` telling replicas apart.
    pub fn of_deployment(namespace: &str, deployment: &str, replica: usize) -> Self {
        // Unique per pod, as the API server's are: the kubelet's folders and the kernel
        // probe find a pod by it; stable for a pod's name (FNV-1a of it).
        let pod_key = format!("{namespace}/{deployment}/{replica}");
        let uid = format!(
            "{:08x}-e2e0-4000-8000-{:012x}",
            std::process::id(),
            fnv1a(pod_key.as_bytes()) & 0xffff_ffff_ffff
        );
        Self {
            namespace: namespace.to_string(),
            pod: format!("{deployment}-5d4f8b7c9-{}", pod_suffix(replica)),
            uid,
            container: "manager".to_string(),
        }
    }

    /// The kubelet's log file of this pod's container under `root` (its `/var/log/pods`).
    pub fn log_path(&self, root: &Path) -> PathBuf {
        root.join(format!("{}_{}_{}", self.namespace, self.pod, self.uid))
            .join(&self.container)
            .join("0.log")
    }
}

/// Five characters of a ReplicaSet pod's random suffix, told apart by `replica`.
fn pod_suffix(replica: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = replica + 1;
    (0..5)
        .map(|_| {
            let c = ALPHABET[n % ALPHABET.len()];
            n /= ALPHABET.len();
            char::from(c)
        })
        .collect()
}

/// A running operator process whose output becomes a CRI log file.
pub struct OperatorPod {
    pub identity: PodIdentity,
    child: Child,
    log_path: PathBuf,
    /// The container cgroup it was moved into, removed after the process is killed.
    cgroup: Option<PodCgroup>,
}

impl OperatorPod {
    /// Spawns `command` as the pod `identity`, its log under `log_root`. The file is
    /// appended to, as a restarted container's would be by a new file: a second start
    /// of the same identity continues it.
    pub fn start(mut command: Command, identity: PodIdentity, log_root: &Path) -> Self {
        let log_path = identity.log_path(log_root);
        if let Some(parent) = log_path.parent() {
            fs::create_dir_all(parent).expect("the pod's log directory");
        }
        let file = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("the pod's log file");
        let file = Arc::new(Mutex::new(file));
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("{} does not start: {error}", identity.pod));
        if let Some(stdout) = child.stdout.take() {
            copy_as_cri(stdout, "stdout", Arc::clone(&file));
        }
        if let Some(stderr) = child.stderr.take() {
            copy_as_cri(stderr, "stderr", file);
        }
        Self {
            identity,
            child,
            log_path,
            cgroup: None,
        }
    }

    /// Moves the process, all its threads, into `cgroup`, as a container runtime
    /// starts it there; the cgroup is removed with the pod.
    pub fn place_in(&mut self, cgroup: PodCgroup) -> std::io::Result<()> {
        cgroup.add(self.child.id())?;
        self.cgroup = Some(cgroup);
        Ok(())
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The process's own lines so far (the CRI prefix taken off), the last `count`.
    pub fn log_tail(&self, count: usize) -> String {
        // Lossy: a line may be half written while it is read.
        let log = fs::read(&self.log_path).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        let lines: Vec<&str> = log
            .lines()
            .map(|line| line.splitn(4, ' ').nth(3).unwrap_or(line))
            .collect();
        lines[lines.len().saturating_sub(count)..].join("\n")
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Kills the process (a pod deleted, a node lost).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OperatorPod {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Copies `output`'s lines into `file` as CRI lines of `stream`, on a thread of its
/// own until the process closes it. A line longer than the runtime's limit becomes
/// partial (`P`) pieces ended by a full (`F`) one.
fn copy_as_cri(output: impl Read + Send + 'static, stream: &'static str, file: Arc<Mutex<File>>) {
    thread::spawn(move || {
        let mut reader = BufReader::new(output);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            let pieces: Vec<&[u8]> = if line.is_empty() {
                vec![&line[..]]
            } else {
                line.chunks(MAX_LINE).collect()
            };
            let mut record = Vec::with_capacity(line.len() + 64 * pieces.len());
            for (index, piece) in pieces.iter().enumerate() {
                let tag = if index + 1 == pieces.len() { "F" } else { "P" };
                let time = humantime::format_rfc3339_nanos(SystemTime::now());
                let _ = write!(record, "{time} {stream} {tag} ");
                record.extend_from_slice(piece);
                record.push(b'\n');
            }
            let Ok(mut file) = file.lock() else { return };
            if file.write_all(&record).is_err() {
                return;
            }
        }
    });
}
