//! Installed servers and how tests use them: find one or skip (unless
//! `OPSCOPE_REQUIRE_BACKENDS=1`), free loopback ports, temporary directories, an HTTP
//! client, bounded polling, and a server process that is killed on drop.

use std::fs::File;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use tempfile::TempDir;

/// Longest wait for a server to start, and for what it reports to change.
pub const PATIENCE: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Whether tests that need an installed server must fail instead of skipping.
pub fn backends_required() -> bool {
    std::env::var("OPSCOPE_REQUIRE_BACKENDS").is_ok_and(|v| v == "1")
}

/// The first of `candidates` found on `PATH`, or `None` (with the reason printed) when
/// the running test is to be skipped. Panics when none is installed and
/// `OPSCOPE_REQUIRE_BACKENDS=1`; `package` is what installs it.
pub fn installed_or_skip(candidates: &[&str], package: &str) -> Option<PathBuf> {
    let found = candidates.iter().find_map(|name| on_path(name));
    if found.is_none() {
        skip_or_fail(&format!(
            "none of {candidates:?} is on PATH (apt-get install {package})"
        ));
    }
    found
}

/// Says that the running test skips for `reason`, or panics with it when
/// `OPSCOPE_REQUIRE_BACKENDS=1`.
pub fn skip_or_fail(reason: &str) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("test");
    assert!(
        !backends_required(),
        "{test}: OPSCOPE_REQUIRE_BACKENDS=1 but {reason}"
    );
    // Straight to stderr, past the test harness's capture, so that a skip is seen.
    let _ = writeln!(std::io::stderr(), "skipping {test}: {reason}");
}

/// Where `testkit/backends/build` puts the servers it builds from their Go modules:
/// `$OPSCOPE_BACKENDS_CACHE`, else `$HOME/.cache/opscope-backends`.
pub fn backends_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("OPSCOPE_BACKENDS_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/opscope-backends")
}

/// A server `testkit/backends/build` built (`<cache>/bin/<binary>`), or `None` (with
/// the reason printed) when the running test is to be skipped. Panics when it is not
/// built and `OPSCOPE_REQUIRE_BACKENDS=1`; `name` is the build script's name for it.
pub fn built_or_skip(binary: &str, name: &str) -> Option<PathBuf> {
    let path = backends_cache().join("bin").join(binary);
    if path.is_file() {
        return Some(path);
    }
    skip_or_fail(&format!(
        "{} is not built (testkit/backends/build {name})",
        path.display()
    ));
    None
}

fn on_path(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}

/// A loopback port that was free a moment ago, for a server another process binds. It
/// is picked below the kernel's ephemeral range (32768 and up), where the outgoing
/// connections of the tests running alongside cannot take it before the server does.
pub fn free_port() -> u16 {
    let random = RandomState::new();
    (0u64..)
        .map(|attempt| 10_000 + (random.hash_one(attempt) % 20_000) as u16)
        .find(|port| TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free loopback port between 10000 and 30000")
}

/// A directory of its own under the system's temporary directory, removed on drop.
pub fn temp_dir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{prefix}-"))
        .tempdir()
        .expect("a temporary directory")
}

/// A plain HTTP client with a 5 s timeout.
pub fn http_client() -> reqwest::Client {
    // reqwest is built without a default crypto provider; installing one twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a plain HTTP client")
}

/// Runs `probe` every 100 ms until `done` holds for its answer (`Ok`) or [`PATIENCE`]
/// has passed (`Err`), and returns the last answer.
pub async fn poll_until<T, Answer>(
    mut probe: impl FnMut() -> Answer,
    done: impl Fn(&T) -> bool,
) -> Result<T, T>
where
    Answer: Future<Output = T>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = probe().await;
        if done(&answer) {
            return Ok(answer);
        }
        if Instant::now() >= deadline {
            return Err(answer);
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

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
