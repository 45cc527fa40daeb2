//! A gateway's state as separate processes: what its correlator journals, what it
//! takes back when it starts again, and what clients cannot make it take. Each test
//! reproduces a way the state was poisoned or lost; the spans are generated here.
mod common;

use std::path::Path;
use std::time::Duration;

use common::reconciles::{SECOND, export_in_order, looping, now_nanos, reconciles};
use common::{Opscope, OtlpSink, report_fault, wait_until};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

const TIMEOUT: Duration = Duration::from_secs(30);
/// Reconciles of one object, half a second apart: a loop by the default threshold
/// (30 in a minute).
const RECONCILES: u64 = 40;
const FUTURE: &str = "opscope_correlator_future_events_total";
const LATE: &str = "opscope_correlator_late_events_total";

/// A gateway-shaped config: OTLP in, the memory limiter, the tagger (the agents'
/// work, done here to keep the test to one process) and a correlator journaling to
/// `journal`; signals to `signals`.
fn gateway(journal: &Path, signals: &OtlpSink, accept_handover: bool) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols: {{ grpc: {{ endpoint: 127.0.0.1:0 }} }}
    accept_handover: {accept_handover}
processors:
  memory_limiter: {{ check_interval: 1s, limit_mib: 512 }}
  operator_tagger: {{}}
  correlator: {{ storage: {{ directory: "{journal}" }} }}
exporters:
  otlp/signals: {{ endpoint: "{signals}", tls: {{ insecure: true }} }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:0 }}
service:
  extensions: [health_check]
  pipelines:
    traces: {{ receivers: [otlp], processors: [memory_limiter, operator_tagger, correlator] }}
    signals: {{ exporters: [otlp/signals] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:0 }}
"#,
        journal = journal.display(),
        signals = signals.endpoint(),
    )
}

fn send(opscope: &Opscope, requests: Vec<ExportTraceServiceRequest>) {
    export_in_order(opscope.ports().grpc_url(), requests, "opscope");
}

fn wait_looping(sink: &OtlpSink, name: &str) -> bool {
    wait_until(TIMEOUT, || looping(sink).contains(name))
}

fn counter(opscope: &Opscope, family: &str) -> f64 {
    opscope.metric_value(&opscope.ports().metrics_addr(), family, &[])
}

/// One span dated an hour ahead is refused live; it must be refused again when the
/// journal is taken back, or event time jumps an hour and every later event is late.
#[test]
fn a_span_from_the_future_does_not_blind_a_gateway_after_its_restart() {
    let journal = tempfile::tempdir().expect("journal directory");
    let signals = OtlpSink::grpc();
    let mut first = Opscope::start(&gateway(journal.path(), &signals, false));
    let now = now_nanos();
    send(
        &first,
        vec![
            reconciles("from-the-future", 1, now + 3600 * SECOND, false),
            reconciles("train", RECONCILES, now, false),
        ],
    );
    assert!(wait_looping(&signals, "train"), "{:?}", looping(&signals));
    assert!(wait_until(TIMEOUT, || counter(&first, FUTURE) >= 1.0));
    first.stop_within(TIMEOUT);

    let signals = OtlpSink::grpc();
    let again = Opscope::start(&gateway(journal.path(), &signals, false));
    assert!(
        wait_looping(&signals, "train"),
        "the journaled loop is raised again: {:?}\n{}",
        looping(&signals),
        again.logs()
    );
    send(
        &again,
        vec![reconciles("eval", RECONCILES, now_nanos(), false)],
    );
    assert!(
        wait_looping(&signals, "eval"),
        "a new loop fires after the restart: {:?}",
        looping(&signals)
    );
    assert!(
        wait_until(TIMEOUT, || counter(&again, FUTURE) >= 1.0),
        "refused again when taken back"
    );
    assert_eq!(counter(&again, LATE), 0.0);
}

/// A client cannot mark its records as handed over (which would have them taken
/// whatever their age): only a receiver set `accept_handover` keeps the mark, and
/// even a hand-over is refused when it is dated ahead of the wall clock.
#[test]
fn only_a_receiver_that_accepts_hand_overs_keeps_the_mark() {
    let send_marked = |opscope: &Opscope| {
        let now = now_nanos();
        send(
            opscope,
            vec![
                reconciles("current", 1, now, false),
                reconciles("past", RECONCILES, now - 600 * SECOND, true),
                reconciles("future", 1, now + 3600 * SECOND, true),
            ],
        );
    };
    let tracked = |opscope: &Opscope, expected: f64| {
        let metrics = opscope.ports().metrics_addr();
        let family = "opscope_correlator_tracked_objects";
        opscope.wait_for_metric(&metrics, family, &[], expected, TIMEOUT)
    };
    let journal = tempfile::tempdir().expect("journal directory");
    let signals = OtlpSink::grpc();
    let agent = Opscope::start(&gateway(journal.path(), &signals, false));
    send_marked(&agent);
    assert_eq!(tracked(&agent, 1.0), 1.0, "only the current object");
    assert!(
        wait_until(TIMEOUT, || counter(&agent, LATE) >= RECONCILES as f64),
        "the mark was removed: ten-minute-old spans are late"
    );
    assert!(wait_until(TIMEOUT, || counter(&agent, FUTURE) >= 1.0));
    drop(agent);

    let journal = tempfile::tempdir().expect("journal directory");
    let signals = OtlpSink::grpc();
    let gateway = Opscope::start(&gateway(journal.path(), &signals, true));
    send_marked(&gateway);
    assert_eq!(
        tracked(&gateway, 2.0),
        2.0,
        "a hand-over is taken whatever its age, but not from the future"
    );
    assert!(
        wait_until(TIMEOUT, || counter(&gateway, FUTURE) >= 1.0),
        "a hand-over from the future is refused"
    );
    assert_eq!(counter(&gateway, LATE), 0.0);
}

/// The batch count in the log line the correlator writes once it took its journal.
fn replayed_batches(logs: &str) -> Option<u64> {
    let line = logs
        .lines()
        .find(|line| line.contains("state rebuilt from its journal"))?;
    let (_, after) = line.split_once("batches=")?;
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A client told OK has its batch in the journal: killed right after the 50th OK, a
/// gateway takes all 50 back.
#[test]
fn a_journaling_gateway_answers_once_the_batch_is_journaled() {
    let journal = tempfile::tempdir().expect("journal directory");
    let signals = OtlpSink::grpc();
    let mut first = Opscope::start(&gateway(journal.path(), &signals, false));
    let now = now_nanos();
    let batches: Vec<ExportTraceServiceRequest> = (0..50)
        .map(|i| reconciles(&format!("object-{i}"), 1, now, false))
        .collect();
    send(&first, batches);
    first.kill();

    let again = Opscope::start(&gateway(journal.path(), &signals, false));
    assert_eq!(
        replayed_batches(&again.logs()),
        Some(50),
        "{}",
        again.logs()
    );
}

/// The peak resident memory of a process, from `/proc/<pid>/status` (`VmHWM`).
fn peak_resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// A journal decodes into several times its size: it is taken back a batch at a time,
/// so a large one fits under the memory limit that a whole one did not.
#[test]
fn a_large_journal_is_taken_back_a_batch_at_a_time() {
    use opscope_processors::correlator::{Journal, JournalConfig};
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest as Request;
    use opscope_proto::otlp::trace::v1::{
        ResourceSpans as Resource, ScopeSpans as Scope, Span as Minimal,
    };

    let journal = tempfile::tempdir().expect("journal directory");
    let config = JournalConfig {
        directory: journal.path().to_path_buf(),
        max_size_mib: 1024,
    };
    let now = now_nanos();
    let mut writer = Journal::open(&config, Duration::from_secs(900)).expect("open the journal");
    // Minimal spans, a name each (18 bytes on disk, ten times that decoded): 48 MiB,
    // which took half a GiB taken back whole.
    let span = Minimal {
        name: "reconcile-span-0".into(),
        ..Minimal::default()
    };
    let batch = Request {
        resource_spans: vec![Resource {
            scope_spans: vec![Scope {
                spans: vec![span; 10_000],
                ..Scope::default()
            }],
            ..Resource::default()
        }],
    };
    let written = opscope_proto::prost::Message::encoded_len(&batch) as u64;
    let count = (48 << 20) / written;
    for _ in 0..count {
        writer.append(&batch, now);
    }
    drop(writer);

    let signals = OtlpSink::grpc();
    let gateway = Opscope::start(&gateway(journal.path(), &signals, false));
    let peak = peak_resident_bytes(gateway.pid());
    report_fault(
        "large_journal_taken_back",
        &[
            ("journal_mib", (count * written) as f64 / f64::from(1 << 20)),
            ("spans", (count * 10_000) as f64),
            ("peak_rss_mib", (peak >> 20) as f64),
        ],
    );
    assert_eq!(replayed_batches(&gateway.logs()), Some(count));
    assert!(
        peak < 160 << 20,
        "{count} batches of {written} bytes taken back with a peak of {} MiB",
        peak >> 20
    );
}
