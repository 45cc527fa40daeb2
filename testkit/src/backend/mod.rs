//! Installed servers and how tests use them: find one or skip (unless
//! `OPSCOPE_REQUIRE_BACKENDS=1`), temporary directories, an HTTP client and bounded
//! polling; loopback ports (`ports`) and the server process, killed on drop
//! (`server_process`).

mod ports;
mod server_process;

use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use ports::{HeldPort, free_port, refusing_address};
pub use server_process::{Launch, LoggedAddress, ServerProcess};
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
