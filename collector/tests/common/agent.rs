//! `Opscope`: the agent binary (`run` on a temporary config, or `demo`) run as a child process, killed on drop.
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{Ports, http_get, wait_until};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The file, in the agent's directory, it writes its bound addresses to once ready.
const LISTEN_REPORT: &str = "listening.json";

pub struct Opscope {
    child: Child,
    dir: TempDir,
    /// The address each listener bound, by setting (`receivers.otlp.protocols.grpc`),
    /// as the agent reported it once ready; empty until then.
    listening: BTreeMap<String, String>,
}

impl Opscope {
    /// Starts `opscope run -c` on `config` (whose listeners ask for port 0, or any) and
    /// waits until it is ready and has said where it listens; panics if that takes more
    /// than 30 s or the agent exits first.
    pub fn start(config: &str) -> Self {
        let mut opscope = Self::spawn(config);
        opscope.wait_ready();
        opscope
    }

    /// Like [`Self::start`], but an agent that exits before it is ready is an error
    /// carrying what it printed, for a test that may start it again.
    pub fn try_start(config: &str) -> Result<Self, String> {
        let mut opscope = Self::spawn(config);
        opscope.ready_or_exit()?;
        Ok(opscope)
    }

    /// Starts `opscope run -c` on `config` without waiting for it to become ready
    /// (then [`Self::wait_ready`]).
    pub fn spawn(config: &str) -> Self {
        let (dir, command) = Self::run_command(Command::new(env!("CARGO_BIN_EXE_opscope")), config);
        Self::spawn_command(dir, command)
    }

    /// Like [`Self::start`], with the agent's file-descriptor limit (`RLIMIT_NOFILE`)
    /// set to `limit`.
    pub fn start_with_descriptor_limit(config: &str, limit: u64) -> Self {
        let (dir, mut command) =
            Self::run_command(Command::new(env!("CARGO_BIN_EXE_opscope")), config);
        // SAFETY: the closure runs in the child between fork and exec and only calls
        // setrlimit(2), which is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                let rlimit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let mut opscope = Self::spawn_command(dir, command);
        opscope.wait_ready();
        opscope
    }

    /// Like [`Self::try_start`], in a mount namespace of its own where `hosts` is
    /// `/etc/hosts`: the system resolver finds the names the test writes there, and
    /// sees the file change. Needs `unshare` and the right to mount (root).
    pub fn try_start_with_hosts(config: &str, hosts: &Path) -> Result<Self, String> {
        let mut unshare = Command::new("unshare");
        unshare
            .args(["--mount", "sh", "-c"])
            .arg(r#"mount --bind "$1" /etc/hosts && shift && exec "$@""#)
            .arg("sh")
            .arg(hosts)
            .arg(env!("CARGO_BIN_EXE_opscope"));
        let (dir, command) = Self::run_command(unshare, config);
        let mut opscope = Self::spawn_command(dir, command);
        opscope.ready_or_exit()?;
        Ok(opscope)
    }

    /// Whether [`Self::try_start_with_hosts`] can work here: `unshare` is installed and
    /// may bind-mount over `/etc/hosts`.
    pub fn can_use_own_hosts(hosts: &Path) -> bool {
        Command::new("unshare")
            .args([
                "--mount",
                "sh",
                "-c",
                r#"mount --bind "$1" /etc/hosts"#,
                "sh",
            ])
            .arg(hosts)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Starts `opscope demo` with `args` (such as `--duration 30`) and waits until it
    /// is ready and has said where it listens.
    pub fn start_demo(args: &[String]) -> Self {
        let dir = tempfile::tempdir().expect("create a temp dir");
        let mut command = Command::new(env!("CARGO_BIN_EXE_opscope"));
        command
            .arg("demo")
            .args(args)
            .arg("--listen-report")
            .arg(dir.path().join(LISTEN_REPORT));
        let mut opscope = Self::spawn_command(dir, command);
        opscope.wait_ready();
        opscope
    }

    /// `command` with `run -c <config> --listen-report <file>` appended, and the
    /// temporary directory holding both files.
    fn run_command(mut command: Command, config: &str) -> (TempDir, Command) {
        let dir = tempfile::tempdir().expect("create a temp dir");
        let config_path = dir.path().join("opscope.yaml");
        fs::write(&config_path, config).expect("write the config");
        command
            .args([OsStr::new("run"), OsStr::new("-c"), config_path.as_os_str()])
            .arg("--listen-report")
            .arg(dir.path().join(LISTEN_REPORT));
        (dir, command)
    }

    fn spawn_command(dir: TempDir, mut command: Command) -> Self {
        let output =
            |name: &str| File::create(dir.path().join(name)).expect("create an output file");
        let child = command
            .stdin(Stdio::null())
            .stdout(output("stdout.log"))
            .stderr(output("stderr.log"))
            .spawn()
            .expect("spawn the opscope binary");
        Opscope {
            child,
            dir,
            listening: BTreeMap::new(),
        }
    }

    /// Waits until the agent is ready (it writes its listen report then); panics, with
    /// what it printed, if it exits first or takes more than 30 s.
    pub fn wait_ready(&mut self) {
        if let Err(error) = self.ready_or_exit() {
            panic!("opscope {error}");
        }
    }

    fn ready_or_exit(&mut self) -> Result<(), String> {
        let report = self.dir.path().join(LISTEN_REPORT);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the opscope process") {
                return Err(format!(
                    "exited with {status} before it was ready:\n{}",
                    self.logs()
                ));
            }
            // The agent writes the file whole (beside it, then renamed) once ready.
            if let Ok(text) = fs::read_to_string(&report) {
                self.listening = serde_json::from_str(&text)
                    .unwrap_or_else(|error| panic!("listen report {text:?}: {error}"));
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "was not ready within {READY_TIMEOUT:?}:\n{}",
                    self.logs()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The `host:port` the listener of `setting` bound (`receivers.otlp.protocols.grpc`,
    /// `receivers.k8s_audit`, `extensions.health_check`, `service.telemetry.metrics`,
    /// `exporters.prometheus`); panics when the agent reported none.
    pub fn address(&self, setting: &str) -> String {
        match self.listening.get(setting) {
            Some(address) => address.clone(),
            None => panic!(
                "opscope reported no listener for {setting}: {:?}",
                self.listening
            ),
        }
    }

    /// The ports of the OTLP receiver `otlp`, the health check and self-telemetry, as
    /// bound; 0 for those the config does not have.
    pub fn ports(&self) -> Ports {
        let port = |setting: &str| {
            self.listening
                .get(setting)
                .and_then(|address| address.rsplit_once(':'))
                .and_then(|(_, port)| port.parse().ok())
                .unwrap_or(0)
        };
        Ports {
            grpc: port("receivers.otlp.protocols.grpc"),
            http: port("receivers.otlp.protocols.http"),
            health: port("extensions.health_check"),
            metrics: port("service.telemetry.metrics"),
        }
    }

    /// Scrapes `GET http://{metrics_addr}/metrics` and sums the samples named `family`
    /// (e.g. `opscope_receiver_accepted_spans_total`) whose labels include all of
    /// `labels`; 0 when there is none.
    pub fn metric_value(&self, metrics_addr: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
        let response = http_get(metrics_addr, "/metrics")
            .unwrap_or_else(|error| panic!("scrape http://{metrics_addr}/metrics: {error}"));
        assert_eq!(response.status, 200, "scrape answered {}", response.text());
        sum_samples(&response.text(), family, labels)
    }

    /// Polls [`Self::metric_value`] until it equals `expected` or `timeout` passes, and
    /// returns the last value seen (counters are updated asynchronously to the data flow).
    pub fn wait_for_metric(
        &self,
        metrics_addr: &str,
        family: &str,
        labels: &[(&str, &str)],
        expected: f64,
        timeout: Duration,
    ) -> f64 {
        let mut value = 0.0;
        wait_until(timeout, || {
            value = self.metric_value(metrics_addr, family, labels);
            value == expected
        });
        value
    }

    /// The agent's process id, e.g. to read `/proc/<pid>/status`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn sigterm(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits in pid_t");
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child,
        // which is not reaped before `wait_exit` or drop.
        let result = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(result, 0, "kill -TERM {pid}");
    }

    /// `kill -9`: the agent gets no chance to flush or save anything.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill -9 opscope");
        self.child.wait().expect("reap opscope");
    }

    /// Waits up to `timeout` for the agent to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut status = None;
        wait_until(timeout, || {
            status = self.child.try_wait().expect("poll the opscope process");
            status.is_some()
        });
        status
    }

    /// SIGTERM, and how long the agent took to exit; panics, with what it printed, if
    /// it is still running after `limit`.
    pub fn stop_within(&mut self, limit: Duration) -> Duration {
        let started = std::time::Instant::now();
        self.sigterm();
        let status = self.wait_exit(limit);
        let took = started.elapsed();
        assert!(
            status.is_some(),
            "still running {took:?} after SIGTERM:\n{}",
            self.logs()
        );
        took
    }

    /// The file the agent's stdout goes to.
    pub fn stdout_path(&self) -> std::path::PathBuf {
        self.dir.path().join("stdout.log")
    }

    /// Everything the agent printed so far.
    pub fn logs(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!(
            "--- opscope stdout ---\n{}--- opscope stderr ---\n{}",
            read("stdout.log"),
            read("stderr.log")
        )
    }
}

impl Drop for Opscope {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("{}", self.logs());
        }
    }
}

/// Sums the values of the OpenMetrics/Prometheus text samples named `name` whose labels
/// include every pair of `wanted`.
pub fn sum_samples(exposition: &str, name: &str, wanted: &[(&str, &str)]) -> f64 {
    exposition
        .lines()
        .filter_map(parse_sample)
        .filter(|sample| sample.name == name)
        .filter(|sample| {
            wanted
                .iter()
                .all(|&(key, value)| sample.labels.iter().any(|(k, v)| k == key && v == value))
        })
        .map(|sample| sample.value)
        .fold(0.0, |total, value| total + value) // `sum()` of nothing is -0.0
}

struct Sample<'a> {
    name: &'a str,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Parses `name{label="value",...} value [timestamp]`; `None` for comments and blank lines.
fn parse_sample(line: &str) -> Option<Sample<'_>> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let (name, mut rest) = line.split_at(name_end);
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = after_brace;
        loop {
            rest = rest.trim_start_matches([' ', ',']);
            if let Some(after_labels) = rest.strip_prefix('}') {
                rest = after_labels;
                break;
            }
            let (key, quoted) = rest.split_once("=\"")?;
            let (value, after_value) = unescape_label_value(quoted)?;
            labels.push((key.trim().to_owned(), value));
            rest = after_value;
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Reads a label value up to its closing quote; returns it and the text after the quote.
fn unescape_label_value(quoted: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = quoted.char_indices();
    while let Some((index, c)) = chars.next() {
        match c {
            '"' => return Some((value, &quoted[index + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                escaped => value.push(escaped),
            },
            c => value.push(c),
        }
    }
    None
}
