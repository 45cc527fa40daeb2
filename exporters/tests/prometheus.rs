//! The `prometheus` and `prometheusremotewrite` exporters over real loopback sockets:
//! the scrape endpoint (checked by `promtool` when installed), remote write against a
//! recording receiver, and both against a real Prometheus when it is installed.
//!
//! Traces and logs reach these exporters as the `operator_metrics` connector hands
//! them on: the metrics it derives from their correlator events.
//!
//! Tests that need `prometheus` or `promtool` are skipped with a printed reason when
//! the binary is absent, unless `OPSCOPE_REQUIRE_BACKENDS=1`, which makes them fail.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, StatusCode};
use opscope_exporters::prometheus::{
    PrometheusConfig, PrometheusExporter, RemoteWriteConfig, RemoteWriteExporter,
};
use opscope_exporters::{ExportError, Exporter, SignalBatch};
use opscope_model::kubernetes::{ObjectRef, OperatorRef};
use opscope_model::semconv;
use opscope_model::signal::{Severity, Signal, SignalState, SignalType};
use opscope_net::server_tls::{ConnectionMetrics, ReloadMetrics};
use opscope_processors::CorrelatorEvents;
use opscope_processors::operator_metrics::OperatorMetrics;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point,
};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
use opscope_proto::prost::Message;
use opscope_proto::remote_write::WriteRequest;
use opscope_testkit::backend::http_client;
use opscope_testkit::prometheus::{
    PrometheusServer, one_with, prometheus_or_skip, promtool_check, promtool_or_skip,
};
use opscope_testkit::recording::RecordingServer;

// ---------------------------------------------------------------------------------
// The scenario: what a misbehaving widget operator sends, already tagged.

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..KeyValue::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..KeyValue::default()
    }
}

/// The resource the tagger leaves on the operator's records.
fn operator_resource() -> Resource {
    Resource {
        attributes: vec![
            text(semconv::OPERATOR_NAME, "widget-operator"),
            text(semconv::K8S_NAMESPACE_NAME, "operators"),
            text(semconv::K8S_POD_NAME, "widget-operator-0"),
            text(semconv::SERVICE_NAME, "widget-operator"),
            text("service.namespace", "operators"),
        ],
        ..Resource::default()
    }
}

fn object_attributes() -> Vec<KeyValue> {
    vec![
        text(semconv::OBJECT_KIND, "Widget"),
        text(semconv::OBJECT_NAMESPACE, "default"),
        text(semconv::OBJECT_NAME, "w1"),
        text(semconv::CONTROLLER, "widget"),
    ]
}

/// Reconciles `ids`, each ending `ok`, and (first) a record of the first one that
/// does not say how it ended; then one status update answered 409.
fn reconcile_logs(ids: &[&str]) -> ExportLogsServiceRequest {
    let record = |extra: Vec<KeyValue>| {
        let mut attributes = object_attributes();
        attributes.extend(extra);
        LogRecord {
            time_unix_nano: now_nanos(),
            attributes,
            ..LogRecord::default()
        }
    };
    let mut records = Vec::new();
    if let Some(first) = ids.first() {
        records.push(record(vec![text(semconv::RECONCILE_ID, first)]));
    }
    for id in ids {
        records.push(record(vec![
            text(semconv::RECONCILE_ID, id),
            text(semconv::RECONCILE_RESULT, "ok"),
        ]));
    }
    records.push(record(vec![
        text(semconv::API_VERB, "update"),
        text(semconv::API_SUBRESOURCE, "status"),
        int(semconv::HTTP_RESPONSE_STATUS_CODE, 409),
    ]));
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(operator_resource()),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

/// One reconcile span of 300 ms, id `r3`, in trace [`TRACE_ID`].
fn reconcile_trace() -> ExportTraceServiceRequest {
    let mut attributes = object_attributes();
    attributes.push(text(semconv::RECONCILE_ID, "r3"));
    attributes.push(text(semconv::OPSCOPE_RECORD, semconv::RECORD_RECONCILE));
    let end = now_nanos();
    let span = Span {
        trace_id: TRACE_ID
            .as_bytes()
            .chunks(2)
            .filter_map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
            .collect(),
        span_id: vec![1; 8],
        name: "reconcile".into(),
        start_time_unix_nano: end - 300_000_000,
        end_time_unix_nano: end,
        attributes,
        ..Span::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(operator_resource()),
            scope_spans: vec![ScopeSpans {
                spans: vec![span],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// The operator's own metrics: a work-queue gauge and a cumulative counter.
fn operator_metrics(depth: f64, syncs: f64) -> ExportMetricsServiceRequest {
    let point = |value: f64, attributes: Vec<KeyValue>| NumberDataPoint {
        attributes,
        time_unix_nano: now_nanos(),
        value: Some(number_data_point::Value::AsDouble(value)),
        ..NumberDataPoint::default()
    };
    let metrics = vec![
        Metric {
            name: "workqueue.depth".into(),
            description: "Items waiting in the work queue.".into(),
            unit: "{item}".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![point(depth, vec![text("name", "widget")])],
            })),
            ..Metric::default()
        },
        Metric {
            name: "widget.syncs".into(),
            description: "Widget syncs.".into(),
            unit: "{sync}".into(),
            data: Some(Data::Sum(Sum {
                data_points: vec![point(syncs, Vec::new())],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            })),
            ..Metric::default()
        },
    ];
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(operator_resource()),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
}

fn loop_signal(state: SignalState) -> SignalBatch {
    SignalBatch(vec![Signal {
        id: "reconcile_loop:default/widgets/w1".into(),
        signal: SignalType::ReconcileLoop,
        cause: "self_triggered_status_write".into(),
        severity: Severity::Warning,
        state,
        object: ObjectRef {
            group: "example.com".into(),
            kind: "Widget".into(),
            namespace: "default".into(),
            name: "w1".into(),
            ..ObjectRef::default()
        },
        operator: OperatorRef {
            name: "widget-operator".into(),
            namespace: "operators".into(),
        },
        controller: "widget".into(),
        first_seen: now_nanos(),
        last_seen: now_nanos(),
        figures: BTreeMap::from([("reconciles_per_minute".to_string(), 120.0)]),
        evidence: vec![format!("trace {TRACE_ID}")],
        hint: "add GenerationChangedPredicate".into(),
    }])
}

/// What the `operator_metrics` connector hands on for a batch of tagged records,
/// remembered in `memory` as the connector remembers what it handed on.
fn derived<T: CorrelatorEvents>(
    memory: &mut OperatorMetrics,
    batch: &T,
) -> ExportMetricsServiceRequest {
    let mut events = Vec::new();
    batch.correlator_events(&mut events);
    let derived = memory.derive(&events);
    let request = derived.request.clone().unwrap_or_default();
    memory.commit(derived);
    request
}

/// Feeds the whole scenario: 4 reconciles (3 from logs, 1 from a span), a 409 write,
/// the operator's metrics, and a firing reconcile loop.
async fn feed<E>(exporter: &E, memory: &mut OperatorMetrics)
where
    E: Exporter<ExportMetricsServiceRequest> + Exporter<SignalBatch>,
{
    let results = [
        exporter
            .export(&derived(memory, &reconcile_logs(&["r0", "r1", "r2"])))
            .await,
        exporter.export(&derived(memory, &reconcile_trace())).await,
        exporter.export(&operator_metrics(7.0, 42.0)).await,
        exporter.export(&loop_signal(SignalState::Firing)).await,
    ];
    for result in results {
        assert!(result.is_ok(), "export failed: {result:?}");
    }
}

// ---------------------------------------------------------------------------------
// The scrape endpoint.

async fn scrape(address: SocketAddr, accept: Option<&str>) -> (String, String) {
    let mut request = http_client().get(format!("http://{address}/metrics"));
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let response = request.send().await.expect("scrape answered");
    assert_eq!(response.status(), 200);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (content_type, response.text().await.expect("a text body"))
}

fn pull_config(endpoint: &str) -> PrometheusConfig {
    PrometheusConfig {
        endpoint: endpoint.into(),
        ..PrometheusConfig::default()
    }
}

fn sample_lines(exposition: &str) -> Vec<&str> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .collect()
}

#[tokio::test]
async fn scrape_serves_text_and_openmetrics_over_a_socket() {
    let exporter = PrometheusExporter::start(
        "prometheus",
        &pull_config("127.0.0.1:0"),
        ReloadMetrics::default(),
        ConnectionMetrics::default(),
    )
    .expect("starts");
    let address = exporter.local_addr();
    feed(&exporter, &mut OperatorMetrics::default()).await;

    let (content_type, text) = scrape(address, None).await;
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let lines = sample_lines(&text);
    let operator = r#"k8s_namespace="operators",kind="Widget",operator_name="widget-operator""#;
    let target = r#"instance="widget-operator-0",job="operators/widget-operator""#;
    let expected = [
        format!(r#"opscope_reconcile_total{{controller="widget",{operator},result="ok"}} 4"#),
        format!(
            r#"opscope_reconcile_duration_seconds_bucket{{controller="widget",{operator},le="0.5"}} 1"#
        ),
        r#"opscope_api_writes_total{code="409",k8s_namespace="operators",operator_name="widget-operator",resource="widgets",subresource="status",verb="update"} 1"#.into(),
        r#"opscope_signal_active{cause="self_triggered_status_write",k8s_namespace="operators",kind="Widget",name="w1",namespace="default",operator_name="widget-operator",severity="warning",signal="reconcile_loop"} 1"#.into(),
        r#"opscope_signals_total{cause="self_triggered_status_write",signal="reconcile_loop"} 1"#.into(),
        format!(r#"workqueue_depth{{{target},name="widget"}} 7"#),
        format!(r#"widget_syncs_total{{{target}}} 42"#),
        format!(
            r#"target_info{{{target},k8s_namespace_name="operators",k8s_pod_name="widget-operator-0",operator_name="widget-operator"}} 1"#
        ),
    ];
    for line in &expected {
        assert!(lines.contains(&line.as_str()), "missing {line} in\n{text}");
    }
    assert!(!text.contains("# {"), "exemplars only in OpenMetrics");
    assert!(!text.contains("# EOF"));

    let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let (content_type, open_metrics) = scrape(address, Some(accept)).await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(open_metrics.ends_with("# EOF\n"));
    assert!(open_metrics.contains("# TYPE opscope_reconcile counter\n"));
    let exemplar = format!(r#" # {{reconcile_id="r3",trace_id="{TRACE_ID}"}} 0.3"#);
    assert!(open_metrics.contains(&exemplar), "{open_metrics}");

    if let Some(promtool) = promtool_or_skip() {
        let (clean, said) = promtool_check(&promtool, &text);
        assert!(clean, "promtool check metrics: {said}\n{text}");
        println!("promtool check metrics: clean ({} lines)", lines.len());
    }
}

#[tokio::test]
async fn resolved_signals_leave_and_repeated_batches_count_again() {
    let exporter = PrometheusExporter::start(
        "prometheus",
        &pull_config("127.0.0.1:0"),
        ReloadMetrics::default(),
        ConnectionMetrics::default(),
    )
    .expect("starts");
    let mut memory = OperatorMetrics::default();
    feed(&exporter, &mut memory).await;
    let resolved = exporter.export(&loop_signal(SignalState::Resolved)).await;
    assert!(resolved.is_ok());
    // The same reconciles again are not new; a new one is.
    let again = exporter
        .export(&derived(&mut memory, &reconcile_logs(&["r0", "r4"])))
        .await;
    assert!(again.is_ok());
    let (_, text) = scrape(exporter.local_addr(), None).await;
    assert!(!text.contains("opscope_signal_active{"), "{text}");
    assert!(text.contains("opscope_signals_total{"), "the count stays");
    assert!(text.contains(r#"result="ok"} 5"#), "{text}");
    assert!(text.contains(r#"verb="update"} 2"#), "{text}");
    let stats = exporter.stats();
    assert_eq!(stats.refused.total(), 0);
    // reconciles, durations, writes, signals started, queue depth, syncs, target info.
    assert_eq!(stats.series, 7, "{stats:?}");
}

#[tokio::test]
async fn the_endpoint_is_named_when_it_cannot_be_bound_and_stops_on_drop() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = taken.local_addr().expect("bound").to_string();
    let error = PrometheusExporter::start(
        "prometheus",
        &pull_config(&address),
        ReloadMetrics::default(),
        ConnectionMetrics::default(),
    )
    .err()
    .expect("the port is taken");
    assert_eq!(error.field, "endpoint");
    drop(taken);

    let exporter = PrometheusExporter::start(
        "prometheus",
        &pull_config("127.0.0.1:0"),
        ReloadMetrics::default(),
        ConnectionMetrics::default(),
    )
    .expect("starts");
    let address = exporter.local_addr();
    scrape(address, None).await;
    drop(exporter);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let refused = http_client()
            .get(format!("http://{address}/metrics"))
            .send()
            .await
            .is_err();
        if refused {
            break;
        }
        assert!(Instant::now() < deadline, "still serving after drop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------
// Remote write against a recording receiver.

struct Recorded {
    headers: HeaderMap,
    request: WriteRequest,
}

/// The remote-write requests a receiver got, decoded: snappy block, then protobuf.
fn written(receiver: &RecordingServer) -> Vec<Recorded> {
    let decode = |body: &[u8]| {
        let raw = snap::raw::Decoder::new()
            .decompress_vec(body)
            .expect("a snappy block");
        WriteRequest::decode(raw.as_slice()).expect("a WriteRequest")
    };
    receiver
        .requests()
        .into_iter()
        .map(|recorded| Recorded {
            request: decode(&recorded.body),
            headers: recorded.headers,
        })
        .collect()
}

fn push_config(endpoint: String) -> RemoteWriteConfig {
    serde_json::from_value(serde_json::json!({
        "endpoint": endpoint,
        "external_labels": {"source": "remote_write"},
    }))
    .expect("a valid config")
}

fn label<'a>(series: &'a opscope_proto::remote_write::TimeSeries, name: &str) -> &'a str {
    series
        .labels
        .iter()
        .find(|l| l.name == name)
        .map_or("", |l| l.value.as_str())
}

/// The value sent for the series named `name` in a request, if any.
fn sent(request: &WriteRequest, name: &str) -> Option<f64> {
    request
        .timeseries
        .iter()
        .find(|s| label(s, "__name__") == name)
        .and_then(|s| s.samples.first())
        .map(|s| s.value)
}

#[tokio::test]
async fn remote_write_sends_sorted_series_with_the_protocol_headers() {
    let receiver = RecordingServer::start(&[]).await;
    let exporter = RemoteWriteExporter::new(
        "prometheusremotewrite",
        &push_config(format!("{}/api/v1/write", receiver.base_url())),
    )
    .expect("valid");
    feed(&exporter, &mut OperatorMetrics::default()).await;
    assert!(
        exporter
            .export(&loop_signal(SignalState::Resolved))
            .await
            .is_ok()
    );

    let requests = written(&receiver);
    assert_eq!(requests.len(), 5);
    let mut last_timestamp = 0;
    for Recorded { headers, request } in requests.iter() {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
        };
        assert_eq!(header("content-encoding"), "snappy");
        assert_eq!(header("content-type"), "application/x-protobuf");
        assert_eq!(header("x-prometheus-remote-write-version"), "0.1.0");
        assert!(header("user-agent").starts_with("opscope/"));
        for series in &request.timeseries {
            let names: Vec<_> = series.labels.iter().map(|l| l.name.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(names, sorted);
            assert!(names.contains(&"__name__"));
            assert_eq!(label(series, "source"), "remote_write");
        }
        let timestamp = request
            .timeseries
            .first()
            .and_then(|s| s.samples.first())
            .map_or(0, |s| s.timestamp);
        assert!(
            timestamp > last_timestamp,
            "each request is later than the one before"
        );
        last_timestamp = timestamp;
    }
    let [logs, trace, metrics, firing, resolved] = &requests[..] else {
        panic!("five requests");
    };
    assert_eq!(sent(&logs.request, "opscope_reconcile_total"), Some(3.0));
    assert_eq!(sent(&logs.request, "opscope_api_writes_total"), Some(1.0));
    assert_eq!(sent(&trace.request, "opscope_reconcile_total"), Some(4.0));
    assert_eq!(
        sent(&trace.request, "opscope_reconcile_duration_seconds_count"),
        Some(1.0)
    );
    assert_eq!(sent(&metrics.request, "workqueue_depth"), Some(7.0));
    assert_eq!(sent(&metrics.request, "widget_syncs_total"), Some(42.0));
    assert_eq!(sent(&metrics.request, "target_info"), Some(1.0));
    assert_eq!(sent(&firing.request, "opscope_signal_active"), Some(1.0));
    assert_eq!(sent(&firing.request, "opscope_signals_total"), Some(1.0));
    let stale = sent(&resolved.request, "opscope_signal_active").expect("a stale marker");
    assert_eq!(stale.to_bits(), 0x7ff0_0000_0000_0002);
    let families: Vec<_> = metrics
        .request
        .metadata
        .iter()
        .map(|m| m.metric_family_name.as_str())
        .collect();
    assert_eq!(families, vec!["target", "widget_syncs", "workqueue_depth"]);
}

#[tokio::test]
async fn a_retried_batch_counts_once_and_a_refused_one_is_permanent() {
    let answers = [
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::NO_CONTENT,
        StatusCode::BAD_REQUEST,
    ];
    let receiver = RecordingServer::start(&answers).await;
    let exporter = RemoteWriteExporter::new(
        "prometheusremotewrite",
        &push_config(format!("{}/api/v1/write", receiver.base_url())),
    )
    .expect("valid");
    let mut memory = OperatorMetrics::default();
    let batch = derived(&mut memory, &reconcile_logs(&["r0", "r1"]));
    let first = exporter.export(&batch).await;
    assert!(
        matches!(first, Err(ExportError::Retryable { .. })),
        "{first:?}"
    );
    assert!(exporter.export(&batch).await.is_ok());
    let refused = exporter
        .export(&derived(&mut memory, &reconcile_logs(&["r2"])))
        .await;
    assert!(
        matches!(refused, Err(ExportError::Permanent { .. })),
        "{refused:?}"
    );
    let next = derived(&mut memory, &reconcile_logs(&["r3"]));
    assert!(exporter.export(&next).await.is_ok());

    let requests = written(&receiver);
    let counts: Vec<_> = requests
        .iter()
        .map(|r| sent(&r.request, "opscope_reconcile_total"))
        .collect();
    // Sent twice for the retry, the same count both times; the refused batch is not kept.
    assert_eq!(counts, vec![Some(2.0), Some(2.0), Some(3.0), Some(3.0)]);
}

// ---------------------------------------------------------------------------------
// A real Prometheus: it scrapes the endpoint and receives the remote write.

const SIGNAL_LABELS: &[(&str, &str)] = &[
    ("signal", "reconcile_loop"),
    ("cause", "self_triggered_status_write"),
    ("severity", "warning"),
    ("operator_name", "widget-operator"),
    ("k8s_namespace", "operators"),
    ("kind", "Widget"),
    ("namespace", "default"),
    ("name", "w1"),
];

#[tokio::test]
async fn real_prometheus_scrapes_and_receives_the_same_series() {
    let Some(binary) = prometheus_or_skip() else {
        return;
    };
    let started = Instant::now();
    let pull = PrometheusExporter::start(
        "prometheus",
        &pull_config("127.0.0.1:0"),
        ReloadMetrics::default(),
        ConnectionMetrics::default(),
    )
    .expect("starts");
    let server = PrometheusServer::start(&binary, pull.local_addr()).await;
    let push = RemoteWriteExporter::new(
        "prometheusremotewrite",
        &push_config(server.url("/api/v1/write")),
    )
    .expect("valid");
    feed(&pull, &mut OperatorMetrics::default()).await;
    feed(&push, &mut OperatorMetrics::default()).await;

    for (path, source) in [
        ("scrape", r#"source!="remote_write""#),
        ("remote write", r#"source="remote_write""#),
    ] {
        let signal = format!("opscope_signal_active{{{source}}}");
        let seen = server
            .eventually(&signal, one_with(1.0, SIGNAL_LABELS))
            .await;
        println!("{path}: {signal} = {seen:?}");
        let reconciles = format!(
            r#"opscope_reconcile_total{{{source},result="ok",kind="Widget",controller="widget"}}"#
        );
        server
            .eventually(
                &reconciles,
                one_with(4.0, &[("operator_name", "widget-operator")]),
            )
            .await;
        let writes =
            format!(r#"opscope_api_writes_total{{{source},code="409",resource="widgets"}}"#);
        server
            .eventually(&writes, one_with(1.0, &[("verb", "update")]))
            .await;
        let depth = format!(r#"workqueue_depth{{{source}}}"#);
        let job = &[
            ("job", "operators/widget-operator"),
            ("instance", "widget-operator-0"),
        ];
        server.eventually(&depth, one_with(7.0, job)).await;
        server
            .eventually(
                &format!("widget_syncs_total{{{source}}}"),
                one_with(42.0, job),
            )
            .await;
        let info = format!("target_info{{{source}}}");
        server
            .eventually(
                &info,
                one_with(1.0, &[("operator_name", "widget-operator")]),
            )
            .await;
    }
    let scraped_job = server
        .query(r#"opscope_signals_total{job="opscope"}"#)
        .await;
    assert_eq!(
        scraped_job.len(),
        1,
        "scraped series carry the scrape job: {scraped_job:?}"
    );

    let exemplars = server
        .exemplars(r#"opscope_reconcile_duration_seconds_bucket{source!="remote_write"}"#)
        .await;
    assert!(
        exemplars.contains(TRACE_ID),
        "exemplar with the trace id via OpenMetrics: {exemplars}"
    );

    for exporter_result in [
        pull.export(&loop_signal(SignalState::Resolved)).await,
        push.export(&loop_signal(SignalState::Resolved)).await,
    ] {
        assert!(exporter_result.is_ok());
    }
    server
        .eventually("opscope_signal_active", |answer| answer.is_empty())
        .await;
    println!(
        "real prometheus: scrape and remote write agree; signal resolved on both; {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
