//! End to end against the built agent, the `filelog` receiver facing what a node's log
//! directory may hold besides log files: a FIFO where a rotated sibling or a
//! checkpointed file was, and files that live for less than one poll interval. Other
//! files must keep being tailed, and SIGTERM must end the process within
//! `shutdown_timeout`.

mod common;

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Opscope, OtlpSink, Ports, http_get, report_fault};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

const TIME: &str = "2024-05-01T12:00:00.123456789Z";
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(4);
const WAIT: Duration = Duration::from_secs(20);

/// Container log directories laid out as the kubelet does, and the agent's checkpoint.
struct Node {
    root: tempfile::TempDir,
}

impl Node {
    fn new() -> Self {
        Self {
            root: tempfile::tempdir().expect("a temp dir"),
        }
    }

    /// The log directory of container `name` of its own pod, created.
    fn container(&self, name: &str) -> PathBuf {
        let directory = self
            .root
            .path()
            .join("pods")
            .join(format!(
                "default_{name}-7d9c8_0f9d8c7b-1111-2222-3333-{name:0>12}"
            ))
            .join(name);
        std::fs::create_dir_all(&directory).expect("mkdir");
        directory
    }

    fn config(&self, ports: &Ports, sink: &OtlpSink, poll_interval: &str) -> String {
        format!(
            r#"
receivers:
  filelog:
    include: ["{root}/pods/*/*/*.log"]
    start_at: beginning
    storage: {root}/state
    poll_interval: {poll_interval}
exporters:
  otlp/sink: {{ endpoint: "{sink}" }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  shutdown_timeout: {shutdown}s
  pipelines:
    logs: {{ receivers: [filelog], exporters: [otlp/sink] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
            root = self.root.path().display(),
            sink = sink.endpoint(),
            health = ports.health,
            metrics = ports.metrics,
            shutdown = SHUTDOWN_TIMEOUT.as_secs(),
        )
    }
}

/// Appends CRI lines holding `bodies`.
fn append(path: &Path, bodies: &[String]) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open a log file");
    for body in bodies {
        writeln!(file, "{TIME} stdout F {body}").expect("write a line");
    }
}

fn lines(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

fn mkfifo(path: &Path) {
    let name = CString::new(path.as_os_str().as_bytes()).expect("no NUL in a temp path");
    // SAFETY: `name` is a valid NUL-terminated path that outlives the call.
    let result = unsafe { libc::mkfifo(name.as_ptr(), 0o644) };
    assert_eq!(result, 0, "mkfifo {}", path.display());
}

fn bodies(sink: &OtlpSink) -> Vec<String> {
    sink.received()
        .log_records()
        .filter_map(|record| match record.body.as_ref()?.value.as_ref()? {
            Value::StringValue(text) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// Waits until the sink holds every one of `wanted`; returns how many it holds.
fn wait_for_bodies(sink: &OtlpSink, wanted: &[String]) -> usize {
    let mut found = 0;
    common::wait_until(WAIT, || {
        let seen = bodies(sink);
        found = wanted.iter().filter(|body| seen.contains(body)).count();
        found == wanted.len()
    });
    found
}

/// SIGTERM, and the time the process took to exit (panics past twice the timeout).
fn stop(agent: &mut Opscope) -> Duration {
    agent.stop_within(2 * SHUTDOWN_TIMEOUT)
}

fn skipped_fifos(agent: &Opscope, ports: &Ports) -> f64 {
    agent.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_skipped_files_total",
        &[("receiver", "filelog"), ("reason", "not_regular_file")],
    )
}

#[test]
fn a_fifo_named_like_a_rotated_sibling_of_a_truncated_file_stops_nothing() {
    let node = Node::new();
    let truncated = node.container("truncated").join("0.log");
    let other = node.container("other").join("0.log");
    append(&truncated, &lines("before-truncation", 3));
    append(&other, &lines("other-before", 3));
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let mut agent = Opscope::start(&node.config(&ports, &sink, "50ms"));
    let ports = agent.ports();
    let before: Vec<String> = [lines("before-truncation", 3), lines("other-before", 3)].concat();
    assert_eq!(wait_for_bodies(&sink, &before), before.len());

    // A copytruncate leaves the copy as `0.log.1`: here a FIFO stands in its place.
    mkfifo(&truncated.with_file_name("0.log.1"));
    std::fs::write(&truncated, "").expect("truncate");
    append(&truncated, &lines("after", 1));
    let after: Vec<String> = [lines("after", 1), lines("other-after", 50)].concat();
    append(&other, &lines("other-after", 50));
    let read = wait_for_bodies(&sink, &after);
    let ready = http_get(&ports.health_addr(), "/readyz").map(|r| r.status);
    let skipped = skipped_fifos(&agent, &ports);
    let took = stop(&mut agent);
    report_fault(
        "filelog_fifo_rotated_sibling",
        &[
            ("written_after", after.len() as f64),
            ("read_after", read as f64),
            ("skipped_fifos", skipped),
            ("sigterm_exit_ms", took.as_millis() as f64),
        ],
    );
    assert_eq!(read, after.len(), "tailing went on past the FIFO");
    assert_eq!(ready.ok(), Some(200), "still ready: every file is tailed");
    assert_eq!(skipped, 1.0, "the FIFO is counted once as skipped");
    assert!(took < SHUTDOWN_TIMEOUT, "SIGTERM took {took:?}");
    assert!(
        agent.logs().contains("not a regular file"),
        "the FIFO is named in the log:\n{}",
        agent.logs()
    );
}

#[test]
fn a_fifo_in_place_of_a_checkpointed_file_stops_nothing_after_a_restart() {
    let node = Node::new();
    let replaced = node.container("replaced").join("0.log");
    let other = node.container("other").join("0.log");
    append(&replaced, &lines("replaced-before", 3));
    append(&other, &lines("other-before", 3));
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let config = node.config(&ports, &sink, "50ms");
    let mut agent = Opscope::start(&config);
    let before = [lines("replaced-before", 3), lines("other-before", 3)].concat();
    assert_eq!(wait_for_bodies(&sink, &before), before.len());
    stop(&mut agent);

    std::fs::remove_file(&replaced).expect("remove");
    mkfifo(&replaced);
    let mut agent = Opscope::start(&config);
    let ports = agent.ports();
    let after = lines("other-after", 50);
    append(&other, &after);
    let read = wait_for_bodies(&sink, &after);
    let ready = http_get(&ports.health_addr(), "/readyz").map(|r| r.status);
    let skipped = skipped_fifos(&agent, &ports);
    let took = stop(&mut agent);
    report_fault(
        "filelog_fifo_checkpointed_file",
        &[
            ("written_after", after.len() as f64),
            ("read_after", read as f64),
            ("skipped_fifos", skipped),
            ("sigterm_exit_ms", took.as_millis() as f64),
        ],
    );
    assert_eq!(read, after.len(), "tailing went on past the FIFO");
    assert_eq!(ready.ok(), Some(200), "still ready: every file is tailed");
    assert_eq!(skipped, 1.0, "the FIFO is counted once as skipped");
    assert!(took < SHUTDOWN_TIMEOUT, "SIGTERM took {took:?}");
}

/// The kubelet's rotation, `0.log` renamed to `0.log.<timestamp>` (which `*.log` does
/// not match), done within 100 ms of the file's creation, over and over: each file
/// lives for a fraction of the 500 ms poll interval.
#[test]
fn files_created_and_renamed_within_a_poll_interval_are_read() {
    const FILES: usize = 10;
    const LINES: usize = 5;
    let node = Node::new();
    let directory = node.container("fast");
    let marker = node.container("marker").join("0.log");
    append(&marker, &lines("marker", 1));
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let mut agent = Opscope::start(&node.config(&ports, &sink, "500ms"));
    assert_eq!(wait_for_bodies(&sink, &lines("marker", 1)), 1);

    let mut written = Vec::new();
    let mut longest = Duration::ZERO;
    for file in 0..FILES {
        let bodies = lines(&format!("rotated-{file}"), LINES);
        let path = directory.join("0.log");
        let created = Instant::now();
        append(&path, &bodies);
        std::fs::rename(
            &path,
            directory.join(format!("0.log.20240501-1200{file:02}")),
        )
        .expect("rename");
        longest = longest.max(created.elapsed());
        written.extend(bodies);
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(
        longest < Duration::from_millis(100),
        "each file lived {longest:?}"
    );
    let read = wait_for_bodies(&sink, &written);
    stop(&mut agent);
    report_fault(
        "filelog_fast_rotation",
        &[
            ("files", FILES as f64),
            ("written", written.len() as f64),
            ("read", read as f64),
            ("longest_life_ms", longest.as_secs_f64() * 1000.0),
        ],
    );
    assert_eq!(read, written.len(), "every short-lived file was read");
}
