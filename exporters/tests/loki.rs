//! The Loki exporter against a loopback recording server: pushes read back with the
//! testkit's independent snappy and protobuf wire reader, not the encoding structs;
//! 429/503 retried, 400 dropped.

use std::future::Future;
use std::time::Duration;

use axum::http::StatusCode;
use opscope_exporters::loki::{LokiConfig, LokiExporter};
use opscope_exporters::{
    Exporter, QueueConfig, QueueMetrics, QueueStore, RetryConfig, SendingQueue, SignalBatch,
};
use opscope_model::kubernetes::{ObjectRef, OperatorRef};
use opscope_model::memory::MemoryAccount;
use opscope_model::signal::{Severity, Signal, SignalState, SignalType};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_testkit::loki::{decode_push, metadata};
use opscope_testkit::recording::RecordingServer;
use tokio_util::sync::CancellationToken;

/// The longest any test may take; every wait below is bounded by it.
const TEST_DEADLINE: Duration = Duration::from_secs(20);

async fn within_deadline<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(TEST_DEADLINE, test)
        .await
        .expect("test finished within its deadline")
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
        QueueStore::Memory(&MemoryAccount::default()),
    )
    .expect("an in-memory queue starts");
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
        let loki = RecordingServer::start(&[]).await;
        let endpoint = loki.base_url();
        let extra = serde_json::json!({
            "tenant_id": "team-a",
            "auth": {"basic": {"username": "agent", "password": "secret"}},
        });
        let exporter = LokiExporter::new("loki", &config(&endpoint, extra)).expect("exporter");
        exporter
            .export(&operator_logs())
            .await
            .expect("Loki takes the push");

        let [push] = loki.take().try_into().expect("one push");
        assert_eq!(push.path, "/loki/api/v1/push");
        let header = |name: &str| push.header(name);
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
        let loki = RecordingServer::start(&[]).await;
        let endpoint = loki.base_url();
        let extra = serde_json::json!({"auth": {"bearer_token": "t0k3n"}});
        let exporter = LokiExporter::new("loki", &config(&endpoint, extra)).expect("exporter");
        exporter
            .export(&SignalBatch(vec![loop_signal()]))
            .await
            .expect("Loki takes the push");

        let [push] = loki.take().try_into().expect("one push");
        let header = |name: &str| push.header(name);
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
        let loki = RecordingServer::start(&answers).await;
        let endpoint = loki.base_url();
        let exporter =
            LokiExporter::new("loki", &config(&endpoint, serde_json::json!({}))).expect("exporter");

        let metrics = through_queue(exporter, operator_logs()).await;

        let pushes = loki.take();
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
        let loki = RecordingServer::start(&[StatusCode::BAD_REQUEST]).await;
        let endpoint = loki.base_url();
        let exporter =
            LokiExporter::new("loki", &config(&endpoint, serde_json::json!({}))).expect("exporter");

        let metrics = through_queue(exporter, operator_logs()).await;

        assert_eq!(loki.take().len(), 1, "a 400 is not retried");
        assert_eq!(metrics.sent_items.get(), 0);
        assert_eq!(failed(&metrics, "permanent_error"), 4);
    })
    .await;
}
