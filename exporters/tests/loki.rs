//! The Loki exporter against a loopback recording server: pushes read back with a snappy
//! and protobuf wire reader written here, not the encoding structs; 429/503 retried, 400 dropped.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::post;
use opscope_exporters::loki::{LokiConfig, LokiExporter};
use opscope_exporters::{
    Exporter, QueueConfig, QueueMetrics, RetryConfig, SendingQueue, SignalBatch,
};
use opscope_processors::correlator::{
    ObjectRef, OperatorRef, Severity, Signal, SignalState, SignalType,
};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;
use tokio_util::sync::CancellationToken;

/// The longest any test may take; every wait below is bounded by it.
const TEST_DEADLINE: Duration = Duration::from_secs(20);

// ---- The recording server -------------------------------------------------------

#[derive(Debug)]
struct Push {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

/// Records every push and answers from a script (204 once the script is used up).
#[derive(Default)]
struct Recorder {
    pushes: Mutex<Vec<Push>>,
    answers: Mutex<VecDeque<StatusCode>>,
}

impl Recorder {
    fn pushes(&self) -> Vec<Push> {
        std::mem::take(&mut *self.pushes.lock().expect("recorder lock"))
    }
}

async fn record(
    State(recorder): State<Arc<Recorder>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    recorder.pushes.lock().expect("recorder lock").push(Push {
        path: uri.path().to_string(),
        headers,
        body,
    });
    let next = recorder.answers.lock().expect("recorder lock").pop_front();
    next.unwrap_or(StatusCode::NO_CONTENT)
}

/// A server on a free loopback port; its base URL and what it records.
async fn start_loki(answers: &[StatusCode]) -> (String, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    recorder
        .answers
        .lock()
        .expect("recorder lock")
        .extend(answers);
    let app = Router::new()
        .route("/loki/api/v1/push", post(record))
        .with_state(Arc::clone(&recorder));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), recorder)
}

async fn within_deadline<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(TEST_DEADLINE, test)
        .await
        .expect("test finished within its deadline")
}

// ---- An independent reader of the wire formats ------------------------------------

/// Reads a protobuf varint at `*at`, moving `*at` past it.
fn varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = bytes[*at];
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
    }
    panic!("varint longer than 10 bytes");
}

/// Decompresses the snappy block format: a varint length, then literals and copies.
fn snappy_block_decode(input: &[u8]) -> Vec<u8> {
    let mut at = 0;
    let length = varint(input, &mut at) as usize;
    let mut output = Vec::with_capacity(length);
    while at < input.len() {
        let tag = input[at];
        at += 1;
        let (copy_length, offset) = match tag & 0b11 {
            0 => {
                let mut literal = usize::from(tag >> 2);
                if literal >= 60 {
                    let width = literal - 59;
                    literal = little_endian(&input[at..at + width]);
                    at += width;
                }
                output.extend_from_slice(&input[at..=at + literal]);
                at += literal + 1;
                continue;
            }
            1 => {
                let offset = (usize::from(tag >> 5) << 8) | usize::from(input[at]);
                at += 1;
                (usize::from((tag >> 2) & 0b111) + 4, offset)
            }
            width => {
                let width = if width == 2 { 2 } else { 4 };
                let offset = little_endian(&input[at..at + width]);
                at += width;
                (usize::from(tag >> 2) + 1, offset)
            }
        };
        assert!(offset > 0 && offset <= output.len(), "copy offset {offset}");
        for _ in 0..copy_length {
            output.push(output[output.len() - offset]);
        }
    }
    assert_eq!(output.len(), length, "length announced by the block");
    output
}

fn little_endian(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rev()
        .fold(0, |value, byte| (value << 8) | usize::from(*byte))
}

enum WireValue<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// The fields of one protobuf message, in wire order: (field number, value).
fn fields(message: &[u8]) -> Vec<(u64, WireValue<'_>)> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let key = varint(message, &mut at);
        let value = match key & 0b111 {
            0 => WireValue::Varint(varint(message, &mut at)),
            2 => {
                let length = varint(message, &mut at) as usize;
                at += length;
                WireValue::Bytes(&message[at - length..at])
            }
            other => panic!("wire type {other} is not used by PushRequest"),
        };
        fields.push((key >> 3, value));
    }
    fields
}

fn bytes_of(message: &[u8], number: u64) -> Vec<&[u8]> {
    fields(message)
        .into_iter()
        .filter(|(n, _)| *n == number)
        .map(|(_, value)| match value {
            WireValue::Bytes(bytes) => bytes,
            WireValue::Varint(_) => panic!("field {number} is not length-delimited"),
        })
        .collect()
}

fn string_of(message: &[u8], number: u64) -> String {
    let values = bytes_of(message, number);
    let value = values.last().copied().unwrap_or_default();
    String::from_utf8(value.to_vec()).expect("UTF-8 string field")
}

fn varint_of(message: &[u8], number: u64) -> u64 {
    fields(message)
        .into_iter()
        .filter_map(|(n, value)| match value {
            WireValue::Varint(v) if n == number => Some(v),
            _ => None,
        })
        .next_back()
        .unwrap_or_default()
}

#[derive(Debug)]
struct Stream {
    labels: String,
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    /// Nanoseconds since the epoch.
    time: u64,
    line: String,
    metadata: Vec<(String, String)>,
}

/// `PushRequest{streams=1}`, `StreamAdapter{labels=1, entries=2}`,
/// `EntryAdapter{timestamp=1, line=2, structuredMetadata=3}`, `Timestamp{seconds=1,
/// nanos=2}`, `LabelPairAdapter{name=1, value=2}`.
fn decode_push(body: &[u8]) -> Vec<Stream> {
    let request = snappy_block_decode(body);
    bytes_of(&request, 1)
        .into_iter()
        .map(|stream| Stream {
            labels: string_of(stream, 1),
            entries: bytes_of(stream, 2).into_iter().map(decode_entry).collect(),
        })
        .collect()
}

fn decode_entry(entry: &[u8]) -> Entry {
    let timestamp = bytes_of(entry, 1).last().copied().unwrap_or_default();
    Entry {
        time: varint_of(timestamp, 1) * 1_000_000_000 + varint_of(timestamp, 2),
        line: string_of(entry, 2),
        metadata: bytes_of(entry, 3)
            .into_iter()
            .map(|pair| (string_of(pair, 1), string_of(pair, 2)))
            .collect(),
    }
}

fn metadata<'a>(entry: &'a Entry, name: &str) -> Option<&'a str> {
    entry
        .metadata
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.as_str())
}

// ---- What is sent ---------------------------------------------------------------------

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn log_record(time: u64, severity_number: i32, body: &str, reconcile_id: &str) -> LogRecord {
    LogRecord {
        time_unix_nano: time,
        severity_number,
        body: Some(AnyValue {
            value: Some(Value::StringValue(body.into())),
        }),
        attributes: vec![
            text("reconcile.id", reconcile_id),
            text("k8s.object.kind", "RayJob"),
            text("k8s.object.namespace", "ml"),
            text("k8s.object.name", "train"),
            text("k8s.controller.name", "rayjob"),
        ],
        trace_id: vec![0x5b; 16],
        span_id: vec![0xee; 8],
        ..Default::default()
    }
}

const T0: u64 = 1_700_000_000_000_000_000;

/// Records of the `ray` operator, out of time order, at two levels.
fn operator_logs() -> ExportLogsServiceRequest {
    let records = vec![
        log_record(T0 + 3_000, 9, "Reconcile done, requeueing after 5s", "r-3"),
        log_record(T0 + 1_000, 9, "Starting reconcile", "r-1"),
        log_record(T0 + 2_000, 17, "Reconciler error", "r-2"),
        log_record(T0 + 1_500, 9, "Reconcile done, requeueing after 5s", "r-1"),
    ];
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    text("operator.name", "ray"),
                    text("k8s.namespace.name", "ray-system"),
                    text("k8s.pod.name", "ray-operator-6c9d7"),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn loop_signal() -> Signal {
    Signal {
        id: "reconcile_loop:rayjobs/ml/train".into(),
        signal: SignalType::ReconcileLoop,
        cause: "self_triggered_status_write".into(),
        severity: Severity::Critical,
        state: SignalState::Firing,
        object: ObjectRef {
            kind: "RayJob".into(),
            namespace: "ml".into(),
            name: "train".into(),
            ..Default::default()
        },
        operator: OperatorRef {
            name: "ray".into(),
            namespace: "ray-system".into(),
        },
        controller: "rayjob".into(),
        first_seen: T0,
        last_seen: T0 + 60_000_000_000,
        figures: [("reconciles_per_minute".to_string(), 240.0)].into(),
        evidence: vec![
            "reconcile r-1".into(),
            "trace 5b8efff798038103d269b633813fc60c span eee19b7ec3c1b174".into(),
        ],
        hint: "add a predicate that ignores status-only updates".into(),
    }
}

fn config(endpoint: &str, extra: serde_json::Value) -> LokiConfig {
    let mut json = serde_json::json!({ "endpoint": endpoint, "timeout": "5s" });
    if let (Some(json), Some(extra)) = (json.as_object_mut(), extra.as_object()) {
        json.extend(extra.clone());
    }
    serde_json::from_value(json).expect("valid Loki config")
}

fn fast_retry() -> RetryConfig {
    RetryConfig {
        initial_interval: Duration::from_millis(10),
        max_interval: Duration::from_millis(50),
        max_elapsed_time: Duration::from_secs(10),
        ..Default::default()
    }
}

/// Runs one batch through a sending queue in front of `exporter` until it is
/// delivered or dropped.
async fn through_queue(exporter: LokiExporter, batch: ExportLogsServiceRequest) -> QueueMetrics {
    let metrics = QueueMetrics::default();
    let (sender, mut queue) = SendingQueue::start(
        "loki",
        exporter,
        &QueueConfig::default(),
        &fast_retry(),
        metrics.clone(),
        CancellationToken::new(),
    );
    assert!(sender.send(batch).await.is_ok(), "queue accepts the batch");
    drop(sender);
    queue.join().await;
    metrics
}

fn failed(metrics: &QueueMetrics, reason: &str) -> u64 {
    let labels = vec![("reason".to_string(), reason.to_string())];
    metrics.failed_items.get_or_create(&labels).get()
}

// ---- The tests ----------------------------------------------------------------------

#[tokio::test]
async fn log_records_arrive_as_labelled_streams_with_ids_in_metadata() {
    within_deadline(async {
        let (endpoint, loki) = start_loki(&[]).await;
        let extra = serde_json::json!({
            "tenant_id": "team-a",
            "auth": {"basic": {"username": "agent", "password": "secret"}},
        });
        let exporter = LokiExporter::new("loki", &config(&endpoint, extra)).expect("exporter");
        exporter
            .export(&operator_logs())
            .await
            .expect("Loki takes the push");

        let [push] = loki.pushes().try_into().expect("one push");
        assert_eq!(push.path, "/loki/api/v1/push");
        let header = |name: &str| push.headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header("content-type"), Some("application/x-protobuf"));
        assert_eq!(header("content-encoding"), None);
        assert_eq!(header("x-scope-orgid"), Some("team-a"));
        // base64("agent:secret")
        assert_eq!(header("authorization"), Some("Basic YWdlbnQ6c2VjcmV0"));
        assert!(
            !push.body.starts_with(b"\xff\x06\x00\x00sNaPpY"),
            "block, not framed"
        );

        let streams = decode_push(&push.body);
        let labels: Vec<&str> = streams.iter().map(|s| s.labels.as_str()).collect();
        assert_eq!(
            labels,
            [
                r#"{k8s_namespace="ray-system", level="error", operator_name="ray"}"#,
                r#"{k8s_namespace="ray-system", level="info", operator_name="ray"}"#,
            ]
        );
        let info = &streams[1];
        let times: Vec<u64> = info.entries.iter().map(|e| e.time).collect();
        assert_eq!(times, [T0 + 1_000, T0 + 1_500, T0 + 3_000]);
        let lines: Vec<&str> = info.entries.iter().map(|e| e.line.as_str()).collect();
        assert_eq!(
            lines,
            [
                "Starting reconcile",
                "Reconcile done, requeueing after 5s",
                "Reconcile done, requeueing after 5s"
            ]
        );
        let reconcile_ids: Vec<_> = info
            .entries
            .iter()
            .map(|e| metadata(e, "reconcile_id"))
            .collect();
        assert_eq!(reconcile_ids, [Some("r-1"), Some("r-1"), Some("r-3")]);
        let first = &info.entries[0];
        assert_eq!(metadata(first, "trace_id"), Some("5b".repeat(16).as_str()));
        assert_eq!(metadata(first, "span_id"), Some("ee".repeat(8).as_str()));
        assert_eq!(metadata(first, "k8s_object"), Some("RayJob ml/train"));
        assert_eq!(metadata(first, "controller"), Some("rayjob"));
        for id in ["r-1", "r-2", "r-3", "5b5b", "train", "ray-operator-6c9d7"] {
            assert!(labels.iter().all(|l| !l.contains(id)), "{id} in a label");
        }
    })
    .await;
}

#[tokio::test]
async fn signal_changes_arrive_on_signal_streams_as_json_lines() {
    within_deadline(async {
        let (endpoint, loki) = start_loki(&[]).await;
        let extra = serde_json::json!({"auth": {"bearer_token": "t0k3n"}});
        let exporter = LokiExporter::new("loki", &config(&endpoint, extra)).expect("exporter");
        exporter
            .export(&SignalBatch(vec![loop_signal()]))
            .await
            .expect("Loki takes the push");

        let [push] = loki.pushes().try_into().expect("one push");
        let header = |name: &str| push.headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header("authorization"), Some("Bearer t0k3n"));
        assert_eq!(header("x-scope-orgid"), None);
        let streams = decode_push(&push.body);
        let [stream] = streams.as_slice() else {
            panic!("one stream expected: {streams:?}");
        };
        assert_eq!(
            stream.labels,
            r#"{k8s_namespace="ray-system", level="error", operator_name="ray", signal="reconcile_loop"}"#
        );
        let [entry] = stream.entries.as_slice() else {
            panic!("one entry expected: {stream:?}");
        };
        assert_eq!(entry.time, T0 + 60_000_000_000);
        let line: serde_json::Value = serde_json::from_str(&entry.line).expect("JSON line");
        assert_eq!(line["signal"], "reconcile_loop");
        assert_eq!(line["state"], "firing");
        assert_eq!(line["figures"]["reconciles_per_minute"], 240.0);
        assert_eq!(
            metadata(entry, "signal_id"),
            Some("reconcile_loop:rayjobs/ml/train")
        );
        assert_eq!(metadata(entry, "reconcile_id"), Some("r-1"));
        assert_eq!(
            metadata(entry, "trace_id"),
            Some("5b8efff798038103d269b633813fc60c")
        );
        assert_eq!(metadata(entry, "k8s_object"), Some("RayJob ml/train"));
    })
    .await;
}

#[tokio::test]
async fn throttled_and_unavailable_pushes_are_retried_by_the_queue() {
    within_deadline(async {
        let answers = [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
        ];
        let (endpoint, loki) = start_loki(&answers).await;
        let exporter =
            LokiExporter::new("loki", &config(&endpoint, serde_json::json!({}))).expect("exporter");

        let metrics = through_queue(exporter, operator_logs()).await;

        let pushes = loki.pushes();
        assert_eq!(pushes.len(), 3, "429, 503, then accepted");
        assert!(pushes.iter().all(|p| p.body == pushes[0].body), "same push");
        assert_eq!(metrics.sent_items.get(), 4);
        assert_eq!(failed(&metrics, "permanent_error"), 0);
        assert_eq!(failed(&metrics, "retries_exhausted"), 0);
    })
    .await;
}

#[tokio::test]
async fn refused_pushes_are_dropped_and_counted() {
    within_deadline(async {
        let (endpoint, loki) = start_loki(&[StatusCode::BAD_REQUEST]).await;
        let exporter =
            LokiExporter::new("loki", &config(&endpoint, serde_json::json!({}))).expect("exporter");

        let metrics = through_queue(exporter, operator_logs()).await;

        assert_eq!(loki.pushes().len(), 1, "a 400 is not retried");
        assert_eq!(metrics.sent_items.get(), 0);
        assert_eq!(failed(&metrics, "permanent_error"), 4);
    })
    .await;
}
