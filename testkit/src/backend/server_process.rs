//! A server process a test starts: its output in a log file, ready when an HTTP probe
//! answers 2xx, killed on drop with its directory removed. No other process can take
//! its port between the choice and the bind: it is started on port 0 and found where
//! its log says it listens, or on ports held for it that it binds with `SO_REUSEPORT`;
//! a server that can do neither is started on ports chosen for it, and started again
//! on others when one of them was taken before it bound it.

use std::fs::File;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Instant;

use tempfile::TempDir;

use super::{PATIENCE, POLL_INTERVAL, free_port, http_client};

/// How many times in all a server is started on chosen ports, one of which was taken.
const BIND_ATTEMPTS: usize = 5;

/// What a server logs when a port it binds is taken: Go's wording, and Rust's
/// ("Address already in use") once lowercased.
const ADDRESS_IN_USE: &str = "address already in use";

/// Where a server's log names an address it bound: on the first line that holds `line`,
/// right after `key`, with a port other than 0 (`key` is `address=` in
/// `msg="Listening on" address=127.0.0.1:34833`).
#[derive(Debug, Clone, Copy)]
pub struct LoggedAddress {
    pub line: &'static str,
    pub key: &'static str,
}

/// One start of a server on the ports chosen for it: its command and where it answers.
pub struct Launch {
    pub command: Command,
    /// `http://127.0.0.1:<port>`, which the paths of [`ServerProcess::url`] are below.
    pub base_url: String,
    /// A path below `base_url`, or a URL of its own, that answers 2xx once it is ready.
    pub ready: String,
}

/// A server started for a test, logging to `<dir>/<name>.log`; killed on drop, and its
/// directory removed.
pub struct ServerProcess {
    name: &'static str,
    child: Child,
    base_url: String,
    dir: TempDir,
}

/// Why a server is not ready.
enum NotReady {
    Exited(ExitStatus),
    TimedOut(&'static str),
}

impl ServerProcess {
    /// Starts the server `launch` builds, on ports no other process can take (held for
    /// it: [`super::HeldPort::shareable`]), and waits until it is ready; panics with the
    /// log's tail when it exits first or is not ready within [`PATIENCE`].
    pub async fn start(name: &'static str, launch: Launch, dir: TempDir) -> Self {
        let server = Self::spawn(name, launch.command, launch.base_url, dir);
        server.ready_or_fail(&launch.ready).await
    }

    /// Starts `command`, its HTTP listener given port 0; waits until its log names
    /// the loopback address it bound (`listening`), then until
    /// `GET <that address><ready_path>` answers 2xx. Panics with the log's tail when
    /// the server exits first or either takes longer than [`PATIENCE`].
    pub async fn start_on_port_zero(
        name: &'static str,
        command: Command,
        listening: LoggedAddress,
        ready_path: &str,
        dir: TempDir,
    ) -> Self {
        let mut server = Self::spawn(name, command, String::new(), dir);
        let address = server.logged_address(listening).await;
        server.base_url = format!("http://{address}");
        server.ready_or_fail(ready_path).await
    }

    /// Starts the server `launch` builds (in `dir`, on `N` loopback ports chosen for
    /// it) and waits until it is ready. When it exits first because another process
    /// took one of its ports in between (its log says "address already in use"), it is
    /// started again on ports chosen anew, [`BIND_ATTEMPTS`] times in all; any other
    /// failure panics with the log's tail. Returns the server and its ports.
    pub async fn start_on_chosen_ports<const N: usize>(
        name: &'static str,
        dir: TempDir,
        mut launch: impl FnMut(&Path, [u16; N]) -> Launch,
    ) -> (Self, [u16; N]) {
        let mut ports = [(); N].map(|()| free_port());
        let first = launch(dir.path(), ports);
        let mut ready = first.ready;
        let mut server = Self::spawn(name, first.command, first.base_url, dir);
        for attempt in 1.. {
            let ready_url = server.url_or_own(&ready);
            match server.wait_ready(&ready_url).await {
                Ok(()) => break,
                Err(NotReady::Exited(_)) if attempt < BIND_ATTEMPTS && server.port_was_taken() => {
                    // Straight to stderr, past the test harness's capture: a retry is seen.
                    let _ = writeln!(
                        std::io::stderr(),
                        "{name}: one of ports {ports:?} was taken before it bound it; \
                         starting it on others"
                    );
                    ports = [(); N].map(|()| free_port());
                    let again = launch(server.dir(), ports);
                    ready = again.ready;
                    server.base_url = again.base_url;
                    server.child = spawn_logging(name, again.command, server.dir());
                }
                Err(not_ready) => server.fail(not_ready),
            }
        }
        (server, ports)
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
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- {} log (tail) ---\n{tail}", self.name)
    }

    /// The loopback address the log names `at`, waiting for it as long as the server
    /// runs, at most [`PATIENCE`]; panics with the log's tail when there is none.
    pub async fn logged_address(&mut self, at: LoggedAddress) -> SocketAddr {
        self.wait_in_log("its address not logged", |log| {
            log.lines().find_map(|line| at.read(line))
        })
        .await
    }

    /// Waits until the server logs a line holding `text`, as long as it runs, at most
    /// [`PATIENCE`]; panics with the log's tail when it does not.
    pub async fn logged_line(&mut self, text: &str) {
        self.wait_in_log("an awaited line not logged", |log| {
            log.contains(text).then_some(())
        })
        .await;
    }

    /// The loopback address the log names `at` by now, if it does.
    pub fn logged(&self, at: LoggedAddress) -> Option<SocketAddr> {
        self.log().lines().find_map(|line| at.read(line))
    }

    /// What `find` reads in the log, as soon as it does: every [`POLL_INTERVAL`] while
    /// the server runs, at most [`PATIENCE`]; panics (`what`, the log's tail) else.
    async fn wait_in_log<T>(&mut self, what: &'static str, find: impl Fn(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = find(&self.log()) {
                return found;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                self.fail(NotReady::Exited(status));
            }
            if Instant::now() >= deadline {
                self.fail(NotReady::TimedOut(what));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    fn spawn(name: &'static str, command: Command, base_url: String, dir: TempDir) -> Self {
        let child = spawn_logging(name, command, dir.path());
        Self {
            name,
            child,
            base_url,
            dir,
        }
    }

    /// Waits until `ready` answers 2xx (see [`Self::url_or_own`]); panics else.
    async fn ready_or_fail(mut self, ready: &str) -> Self {
        let ready_url = self.url_or_own(ready);
        if let Err(not_ready) = self.wait_ready(&ready_url).await {
            self.fail(not_ready);
        }
        self
    }

    /// `ready` as a URL: a path below the base URL, or a URL of its own.
    fn url_or_own(&self, ready: &str) -> String {
        if ready.starts_with("http") {
            ready.to_string()
        } else {
            self.url(ready)
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(log_path(self.name, self.dir())).unwrap_or_default()
    }

    fn port_was_taken(&self) -> bool {
        self.log().to_lowercase().contains(ADDRESS_IN_USE)
    }

    /// Waits until `GET <ready_url>` answers 2xx, while the server runs, at most
    /// [`PATIENCE`].
    async fn wait_ready(&mut self, ready_url: &str) -> Result<(), NotReady> {
        let client = http_client();
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(NotReady::Exited(status));
            }
            let ready = client.get(ready_url).send().await;
            if ready.is_ok_and(|answer| answer.status().is_success()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(NotReady::TimedOut("not ready"));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    fn fail(&self, not_ready: NotReady) -> ! {
        match not_ready {
            NotReady::Exited(status) => {
                panic!("{} exited ({status}):\n{}", self.name, self.log_tail())
            }
            NotReady::TimedOut(what) => panic!(
                "{}: {what} within {PATIENCE:?}:\n{}",
                self.name,
                self.log_tail()
            ),
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_path(name: &str, dir: &Path) -> std::path::PathBuf {
    dir.join(format!("{name}.log"))
}

/// Spawns `command` with its output to `<dir>/<name>.log`, emptied first.
fn spawn_logging(name: &str, mut command: Command, dir: &Path) -> Child {
    let log = File::create(log_path(name, dir)).expect("a log file");
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("a second log handle"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|error| panic!("{name} does not start: {error}"))
}

impl LoggedAddress {
    /// The address `line` of a log names here, if it does.
    fn read(&self, line: &str) -> Option<SocketAddr> {
        if !line.contains(self.line) {
            return None;
        }
        let (_, after) = line.split_once(self.key)?;
        let port = after.strip_prefix("127.0.0.1:")?;
        let digits = port.split(|c: char| !c.is_ascii_digit()).next()?;
        let port: u16 = digits.parse().ok()?;
        (port != 0).then(|| SocketAddr::from(([127, 0, 0, 1], port)))
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{BIND_ATTEMPTS, Launch, LoggedAddress, ServerProcess};
    use crate::backend::{refusing_address, temp_dir};

    const LISTENING: LoggedAddress = LoggedAddress {
        line: "Listening on",
        key: "address=",
    };
    const OTLP_GRPC: LoggedAddress = LoggedAddress {
        line: "Starting GRPC server",
        key: "\"endpoint\": \"",
    };
    const TAKEN: &str = "echo 'listen tcp 127.0.0.1:1: bind: address already in use' >&2; exit 1";

    fn read(at: LoggedAddress, log: &str) -> Option<String> {
        log.lines()
            .find_map(|line| at.read(line))
            .map(|a| a.to_string())
    }

    fn shell(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

    /// A URL that answers 200, for a stand-in server that is ready.
    async fn answering() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a listener");
        let url = format!("http://{}/", listener.local_addr().expect("its address"));
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    /// Starts a stand-in server whose `n`th start (from 1) runs `script(n)` and is
    /// ready at `ready(n)`, in a task of its own; whether it started, and how many
    /// times it was started.
    async fn start_stand_in(
        script: impl Fn(usize) -> &'static str + Send + 'static,
        ready: impl Fn(usize) -> String + Send + 'static,
    ) -> (bool, usize) {
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&starts);
        let started = tokio::spawn(async move {
            let launch = move |_: &std::path::Path, [_port]: [u16; 1]| {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                Launch {
                    command: shell(script(n)),
                    base_url: String::new(),
                    ready: ready(n),
                }
            };
            ServerProcess::start_on_chosen_ports("stand-in", temp_dir("stand-in"), launch).await
        })
        .await;
        (started.is_ok(), starts.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_server_whose_port_was_taken_is_started_again_on_others() {
        let (_held, refusing) = refusing_address();
        let answering = answering().await;
        let (started, starts) = start_stand_in(
            |n| if n == 1 { TAKEN } else { "exec sleep 60" },
            move |n| {
                if n == 1 {
                    format!("http://{refusing}/")
                } else {
                    answering.clone()
                }
            },
        )
        .await;
        assert!(started);
        assert_eq!(starts, 2);
    }

    #[tokio::test]
    async fn starts_on_taken_ports_are_bounded() {
        let (_held, refusing) = refusing_address();
        let (started, starts) =
            start_stand_in(|_| TAKEN, move |_| format!("http://{refusing}/")).await;
        assert!(!started);
        assert_eq!(starts, BIND_ATTEMPTS);
    }

    #[tokio::test]
    async fn a_server_that_fails_otherwise_is_not_started_again() {
        let (_held, refusing) = refusing_address();
        let (started, starts) = start_stand_in(
            |_| "echo 'no such config' >&2; exit 3",
            move |_| format!("http://{refusing}/"),
        )
        .await;
        assert!(!started);
        assert_eq!(starts, 1);
    }

    #[test]
    fn the_bound_address_is_read_where_the_log_names_it() {
        // Prometheus 2: the configured address first, then the bound one.
        let prometheus = r#"level=info component=web msg="Start listening for connections" address=127.0.0.1:0
level=info component=web msg="Listening on" address=127.0.0.1:34833"#;
        assert_eq!(
            read(LISTENING, prometheus).as_deref(),
            Some("127.0.0.1:34833")
        );
        // Jaeger: its query server's gRPC listener logs port 0 as its `addr`, the OTLP
        // receiver's its `endpoint`.
        let jaeger = r#"info	app/server.go:300	Starting GRPC server	{"otelcol.component.id": "jaeger_query", "port": 32935, "addr": "127.0.0.1:0"}
info	otlpreceiver@v0.139.0/otlp.go:120	Starting GRPC server	{"otelcol.component.id": "otlp", "endpoint": "127.0.0.1:38677"}"#;
        assert_eq!(read(OTLP_GRPC, jaeger).as_deref(), Some("127.0.0.1:38677"));
    }

    #[test]
    fn a_log_naming_port_zero_or_another_host_names_no_address() {
        let log = r#"level=info msg="Listening on" address=127.0.0.1:0
level=info msg="Listening on" address=0.0.0.0:9090
level=info msg="Listening on" address=127.0.0.1:99999
level=info msg="Listening" address=127.0.0.1:9090"#;
        assert_eq!(read(LISTENING, log), None);
    }
}
