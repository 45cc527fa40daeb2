//! A server process a test starts: its output in a log file, ready when an HTTP probe
//! answers 2xx, killed on drop with its directory removed.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use tempfile::TempDir;

use super::{PATIENCE, POLL_INTERVAL, http_client};

/// A server started for a test, logging to `<dir>/<name>.log`; killed on drop, and its
/// directory removed.
pub struct ServerProcess {
    name: &'static str,
    child: Child,
    base_url: String,
    dir: TempDir,
}

impl ServerProcess {
    /// Spawns `command` with its output to the log and waits until
    /// `GET <base_url>/-/ready` answers 2xx; panics with the log's tail when the server
    /// exits first or is not ready within [`PATIENCE`].
    pub async fn start(
        name: &'static str,
        command: Command,
        base_url: String,
        dir: TempDir,
    ) -> Self {
        Self::start_ready_at(name, command, base_url, "/-/ready", dir).await
    }

    /// As [`Self::start`], ready when `GET <ready_url>` answers 2xx (a path below
    /// `base_url`, or a URL of its own for a server that reports health elsewhere).
    pub async fn start_ready_at(
        name: &'static str,
        mut command: Command,
        base_url: String,
        ready_url: &str,
        dir: TempDir,
    ) -> Self {
        let log = File::create(dir.path().join(format!("{name}.log"))).expect("a log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a second log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("{name} does not start: {error}"));
        let mut server = Self {
            name,
            child,
            base_url,
            dir,
        };
        let ready_url = if ready_url.starts_with("http") {
            ready_url.to_string()
        } else {
            server.url(ready_url)
        };
        server.wait_ready(&ready_url).await;
        server
    }

    /// `path` (with its leading `/`) on the server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last 30 lines the server logged.
    pub fn log_tail(&self) -> String {
        let log_path = self.dir().join(format!("{}.log", self.name));
        let log = std::fs::read_to_string(log_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- {} log (tail) ---\n{tail}", self.name)
    }

    async fn wait_ready(&mut self, ready_url: &str) {
        let client = http_client();
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}):\n{}", self.name, self.log_tail());
            }
            let ready = client.get(ready_url).send().await;
            if ready.is_ok_and(|answer| answer.status().is_success()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready within {PATIENCE:?}:\n{}",
                self.name,
                self.log_tail()
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
