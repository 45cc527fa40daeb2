//! The durable sending queue of the running agent: what it acknowledged survives
//! `kill -9` and SIGTERM while the backend is down, and is delivered after the next
//! start; a torn segment tail is cut off and counted; a full queue, or a full disk (a
//! 1 MiB tmpfs), refuses with a retryable answer and keeps what it took.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Behaviour, Opscope, OtlpSink, Ports, numbered_spans};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use tokio::runtime::Runtime;
use tonic::Code;
use tonic::transport::Channel;

const TIMEOUT: Duration = Duration::from_secs(30);
const SPANS_PER_REQUEST: usize = 5;

/// The agent with an OTLP exporter to `sink` through a durable queue in `storage` that
/// acknowledges only what is on disk; retries never give up.
fn config(ports: &Ports, sink: &OtlpSink, storage: &Path, extra: &str) -> String {
    let exporter = format!(
        "{{ endpoint: {}, timeout: 5s, \
         sending_queue: {{ storage: {}, ack: durable, num_consumers: 2{extra} }}, \
         retry_on_failure: {{ initial_interval: 20ms, max_interval: 100ms, max_elapsed_time: 0s }} }}",
        sink.endpoint(),
        storage.display()
    );
    ports.config("otlp/sink", &exporter)
}

/// Request `n`: spans named `request-<n>-span-<i>`.
fn spans(n: usize) -> ExportTraceServiceRequest {
    numbered_spans(n, SPANS_PER_REQUEST, "")
}

/// Sends requests `from..to` one after another until one fails or `stop` is set;
/// returns the numbers of the acknowledged requests.
fn send_until_failure(ports: &Ports, from: usize, to: usize, stop: &AtomicBool) -> Vec<usize> {
    let runtime = Runtime::new().expect("client runtime");
    let mut client: TraceServiceClient<Channel> = runtime
        .block_on(TraceServiceClient::connect(ports.grpc_url()))
        .expect("connect to opscope");
    let mut acknowledged = Vec::new();
    for n in from..to {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let mut request = tonic::Request::new(spans(n));
        request.set_timeout(Duration::from_secs(5));
        match runtime.block_on(client.export(request)) {
            Ok(_) => acknowledged.push(n),
            Err(_) => break,
        }
    }
    acknowledged
}

/// A backend that answers `UNAVAILABLE` until released.
fn backend_down() -> OtlpSink {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Fail {
        code: Code::Unavailable,
        times: usize::MAX,
    });
    sink
}

/// Prints the test's fault figures: spans acknowledged, delivered and duplicated,
/// and one figure of its own.
fn report(test: &str, acknowledged: &[usize], duplicates: usize, other: (&str, f64)) {
    let acknowledged = (acknowledged.len() * SPANS_PER_REQUEST) as f64;
    let duplicates = duplicates as f64;
    common::report_fault(
        test,
        &[
            ("in", acknowledged),
            ("out", acknowledged + duplicates),
            ("duplicated", duplicates),
            other,
        ],
    );
}

/// How many times each span name arrived.
fn arrivals(sink: &OtlpSink) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for span in sink.received().spans() {
        *seen.entry(span.name.clone()).or_insert(0) += 1;
    }
    seen
}

/// Every span of every acknowledged request arrived; returns the duplicates.
fn assert_all_arrived(sink: &OtlpSink, acknowledged: &[usize]) -> usize {
    let expected = acknowledged.len() * SPANS_PER_REQUEST;
    let complete = sink.wait_for(TIMEOUT, |received| {
        let names: std::collections::BTreeSet<&str> =
            received.spans().map(|s| s.name.as_str()).collect();
        acknowledged.iter().all(|n| {
            (0..SPANS_PER_REQUEST).all(|i| names.contains(format!("request-{n}-span-{i}").as_str()))
        })
    });
    let seen = arrivals(sink);
    assert!(
        complete,
        "{} acknowledged spans expected, {} distinct arrived",
        expected,
        seen.len()
    );
    seen.values().map(|count| count - 1).sum()
}

#[test]
fn acknowledged_spans_survive_kill_9_while_the_backend_is_down() {
    let sink = backend_down();
    let storage = tempfile::tempdir().expect("queue dir");
    let ports = Ports::ANY;
    let config = config(&ports, &sink, storage.path(), "");
    let mut opscope = Opscope::start(&config);
    let ports = opscope.ports();

    // Load from four client threads; the agent is killed in the middle of it.
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..4)
        .map(|client| {
            let stop = Arc::clone(&stop);
            let from = client * 1_000_000;
            std::thread::spawn(move || send_until_failure(&ports, from, usize::MAX, &stop))
        })
        .collect();
    assert!(
        common::wait_until(TIMEOUT, || sink.attempts() >= 3),
        "the exporter tries the backend: {}",
        opscope.logs()
    );
    std::thread::sleep(Duration::from_millis(700));
    opscope.kill();
    stop.store(true, Ordering::SeqCst);
    let acknowledged: Vec<usize> = senders
        .into_iter()
        .flat_map(|sender| sender.join().expect("client thread"))
        .collect();
    assert!(
        acknowledged.len() >= 20,
        "requests were acknowledged before the kill: {acknowledged:?}"
    );

    sink.release();
    let restarted = Opscope::start(&config);
    let ports = restarted.ports();
    let duplicates = assert_all_arrived(&sink, &acknowledged);
    // At least once: a batch in flight when the agent died may come twice.
    report(
        "kill_9_durable_queue",
        &acknowledged,
        duplicates,
        ("lost", 0.0),
    );
    let left = restarted.wait_for_metric(
        &ports.metrics_addr(),
        "opscope_exporter_queue_size",
        &[("exporter", "otlp/sink"), ("pipeline", "traces")],
        0.0,
        TIMEOUT,
    );
    assert_eq!(left, 0.0, "the queue drained");
}

#[test]
fn sigterm_keeps_the_undelivered_on_disk_and_a_torn_tail_is_cut_off_at_the_next_start() {
    let sink = backend_down();
    let storage = tempfile::tempdir().expect("queue dir");
    let ports = Ports::ANY;
    let config = config(&ports, &sink, storage.path(), "");
    let mut opscope = Opscope::start(&config);
    let ports = opscope.ports();
    let acknowledged = send_until_failure(&ports, 0, 20, &AtomicBool::new(false));
    assert_eq!(acknowledged.len(), 20, "{}", opscope.logs());

    opscope.sigterm();
    let status = opscope
        .wait_exit(TIMEOUT)
        .expect("opscope exits on SIGTERM");
    assert!(status.success(), "{status}");
    let logs = opscope.logs();
    assert!(
        logs.contains("stay in the durable queue for the next start"),
        "{logs}"
    );
    assert!(!logs.contains("dropping"), "nothing is dropped: {logs}");

    // A crash mid-write leaves half a frame at the end of the newest segment.
    let segment = newest_segment(storage.path());
    let mut bytes = std::fs::read(&segment).expect("read the segment");
    bytes.extend_from_slice(&[0xff, 0x00, 0x00, 0x00, 0x12]);
    std::fs::write(&segment, bytes).expect("tear the segment");

    sink.release();
    let restarted = Opscope::start(&config);
    let ports = restarted.ports();
    let duplicates = assert_all_arrived(&sink, &acknowledged);
    assert_eq!(duplicates, 0, "nothing was in flight at the clean stop");
    report(
        "sigterm_durable_queue_then_torn_tail",
        &acknowledged,
        duplicates,
        ("cut_segments", 1.0),
    );
    let cut = restarted.wait_for_metric(
        &ports.metrics_addr(),
        "opscope_exporter_queue_corrupt_segments_total",
        &[("exporter", "otlp/sink")],
        1.0,
        TIMEOUT,
    );
    assert_eq!(cut, 1.0, "{}", restarted.logs());
    assert!(
        restarted
            .logs()
            .contains("cutting off a torn or corrupt tail")
    );
}

#[test]
fn a_full_durable_queue_refuses_with_a_retryable_answer_and_keeps_what_it_took() {
    let sink = backend_down();
    let storage = tempfile::tempdir().expect("queue dir");
    let ports = Ports::ANY;
    let config = config(&ports, &sink, storage.path(), ", queue_size: 4");
    let mut opscope = Opscope::start(&config);
    let ports = opscope.ports();

    let acknowledged = send_until_failure(&ports, 0, 1000, &AtomicBool::new(false));
    assert!(!acknowledged.is_empty());
    // The next request waits for room and is refused by its deadline or the full
    // pipeline; either is an answer a client retries.
    let runtime = Runtime::new().expect("client runtime");
    let refusal = runtime.block_on(async {
        let mut client = TraceServiceClient::connect(ports.grpc_url())
            .await
            .expect("connect");
        let mut last = None;
        for n in 1000..1100 {
            let mut request = tonic::Request::new(spans(n));
            request.set_timeout(Duration::from_millis(500));
            if let Err(status) = client.export(request).await {
                last = Some(status);
                if last.as_ref().is_some_and(|s| s.code() == Code::Unavailable) {
                    break;
                }
            }
        }
        last
    });
    let refusal = refusal.expect("a full queue refuses");
    assert!(
        matches!(refusal.code(), Code::Unavailable | Code::DeadlineExceeded),
        "{refusal:?}"
    );

    opscope.kill();
    sink.release();
    let _restarted = Opscope::start(&config);
    let duplicates = assert_all_arrived(&sink, &acknowledged);
    report(
        "full_durable_queue",
        &acknowledged,
        duplicates,
        ("refused_requests", 1.0),
    );
}

/// A 1 MiB tmpfs mounted for the test, unmounted on drop; `None` where mounting is
/// not permitted (not root), which fails the test when `OPSCOPE_REQUIRE_BACKENDS=1`.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount() -> Option<Self> {
        let dir = tempfile::tempdir().expect("mount point");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(output) if output.status.success() => Some(Self { dir }),
            outcome => {
                let reason = format!("cannot mount a tmpfs: {outcome:?}");
                assert!(!opscope_testkit::backend::backends_required(), "{reason}");
                eprintln!("skipped: {reason}");
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn a_full_disk_refuses_new_data_and_keeps_what_it_took() {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    let sink = backend_down();
    let ports = Ports::ANY;
    let config = config(&ports, &sink, disk.dir.path(), ", segment_size_mib: 1");
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();

    // Requests of about 40 KiB: the 1 MiB disk fills after a few dozen.
    let runtime = Runtime::new().expect("client runtime");
    let mut client: TraceServiceClient<Channel> = runtime
        .block_on(TraceServiceClient::connect(ports.grpc_url()))
        .expect("connect to opscope");
    let mut acknowledged = Vec::new();
    let mut refusal = None;
    for n in 0..400 {
        let mut request = spans(n);
        for span in request.resource_spans[0].scope_spans[0].spans.iter_mut() {
            span.attributes.push(KeyValue {
                key: "padding".into(),
                value: Some(AnyValue {
                    value: Some(Value::StringValue(format!("{n:08}").repeat(1000))),
                }),
                ..Default::default()
            });
        }
        let mut request = tonic::Request::new(request);
        request.set_timeout(Duration::from_millis(500));
        // Requests already in the pipeline wait for room until the client's deadline;
        // once the pipeline is full, new ones are refused at once.
        match runtime.block_on(client.export(request)) {
            Ok(_) if refusal.is_none() => acknowledged.push(n),
            Ok(_) => {}
            Err(status) if status.code() == Code::Unavailable => {
                refusal = Some(status);
                break;
            }
            Err(status) => refusal = Some(status),
        }
    }
    let refusal = refusal.expect("a full disk refuses new data");
    assert_eq!(
        refusal.code(),
        Code::Unavailable,
        "a retryable answer: {refusal:?}"
    );
    assert!(acknowledged.len() >= 5, "{acknowledged:?}");
    let storage_errors = || {
        opscope.metric_value(
            &ports.metrics_addr(),
            "opscope_exporter_queue_storage_errors_total",
            &[("exporter", "otlp/sink")],
        )
    };
    // An append is tried again every second while the disk is full: each failure is
    // counted, and said once (then at most once a minute), not once a try.
    let counted = common::wait_until(TIMEOUT, || storage_errors() >= 3.0);
    assert!(counted, "the failed appends are counted");
    let said = opscope.logs().matches("cannot append").count();
    let failed = storage_errors();
    assert_eq!(said, 1, "{failed} failed appends");
    common::report_fault(
        "disk_full_warnings",
        &[("failed_appends", failed), ("lines_logged", said as f64)],
    );

    // The backend comes back: the queue drains, frees the disk, and takes data again.
    sink.release();
    let duplicates = assert_all_arrived(&sink, &acknowledged);
    assert_eq!(duplicates, 0);
    let started = std::time::Instant::now();
    let accepted_again = common::wait_until(TIMEOUT, || {
        runtime.block_on(client.export(spans(10_000))).is_ok()
    });
    assert!(accepted_again, "accepted again once there is room");
    let recovered = (
        "accepted_again_after_ms",
        started.elapsed().as_millis() as f64,
    );
    report(
        "disk_full_durable_queue",
        &acknowledged,
        duplicates,
        recovered,
    );
    assert!(
        sink.wait_for(TIMEOUT, |received| received
            .spans()
            .any(|s| s.name == "request-10000-span-0")),
        "{}",
        opscope.logs()
    );
}

/// The segment file with the highest first sequence number under `storage`.
fn newest_segment(storage: &Path) -> std::path::PathBuf {
    let mut segments: Vec<_> = walk(storage)
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "seg"))
        .collect();
    segments.sort_by_key(|path| path.file_name().map(|n| n.to_os_string()));
    segments.pop().expect("a segment file")
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
