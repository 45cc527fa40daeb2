//! opscope beside the real OpenTelemetry Collector (built from its modules by
//! `testkit/backends/build otelcol`), both ways:
//!
//! * as the Collector's next hop: a user who keeps the Collector as node agent and
//!   adds opscope as gateway. The Collector's otlp exporter (gRPC, gzip) forwards the
//!   fleet's traces, and its filelog receiver, tailing an operator pod's log in CRI
//!   format, forwards the lines with its otlp_http exporter (gzip); opscope tags and
//!   correlates both.
//! * as the Collector's upstream: opscope's otlp and otlphttp exporters send to the
//!   Collector, which counts what it accepted and passes it on to a sink; counts and
//!   attributes are compared with what opscope was sent.
//!
//! Skipped with a printed reason when the Collector is not built, unless
//! `OPSCOPE_REQUIRE_BACKENDS=1`, which makes them fail instead.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Opscope, OtlpSink, Ports, Received, http_get};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opscope_testkit::backend::{poll_until, temp_dir};
use opscope_testkit::otel_collector::{ANY_PORT, OtelCollector, otel_collector_or_skip};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// The agent's `prometheus` exporter page, where signals show as
/// `opscope_signal_active`.
fn signal_page(addr: &str) -> String {
    http_get(addr, "/metrics")
        .map(|r| r.text())
        .unwrap_or_default()
}

fn active_signal(page: &str, signal: &str, name: &str) -> Option<String> {
    page.lines()
        .filter(|line| line.starts_with("opscope_signal_active{"))
        .find(|line| {
            line.contains(&format!("signal=\"{signal}\""))
                && line.contains(&format!("name=\"{name}\""))
        })
        .map(String::from)
}

/// The Collector as node agent, opscope as gateway: the fleet's traces over gRPC with
/// gzip, an operator pod's log tailed by filelog over OTLP/HTTP with gzip; opscope
/// fires the loop of the traces and the conflicts of the log, and tags both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_as_node_agent_forwards_to_opscope_which_correlates() {
    let Some(binary) = otel_collector_or_skip() else {
        return;
    };
    // kube-apiserver's own access log of the job controller's 409 storm
    // (kubernetes/kubernetes#16134), as the runtime writes it for the pod.
    let pods = temp_dir("opscope-pods");
    let fixture =
        repo("processors/tests/fixtures/real/klog/k8s-16134-apiserver-job-status-409-storm.log");
    let lines = std::fs::read_to_string(fixture).expect("the fixture");
    common::pod_logs::write_pod_log(
        pods.path(),
        "kube-system_kube-apiserver-node-1_0b7c1d2e-3f4a-4b5c-8d6e-7f8091a2b3c4",
        "kube-apiserver",
        &lines,
    );

    let ports = Ports::ANY;
    let sink = OtlpSink::grpc();
    let agent_config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: 127.0.0.1:{grpc} }}
      http: {{ endpoint: 127.0.0.1:{http} }}
processors:
  operator_tagger: {{}}
  correlator: {{}}
  batch: {{ timeout: 100ms }}
exporters:
  otlp/sink: {{ endpoint: "{sink}", tls: {{ insecure: true }} }}
  prometheus: {{ endpoint: "127.0.0.1:0" }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger, correlator, batch], exporters: [otlp/sink] }}
    logs: {{ receivers: [otlp], processors: [operator_tagger, correlator, batch], exporters: [otlp/sink] }}
    signals: {{ exporters: [prometheus] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        grpc = ports.grpc,
        http = ports.http,
        health = ports.health,
        metrics = ports.metrics,
        sink = sink.endpoint(),
    );
    let agent = Opscope::start(&agent_config);
    let ports = agent.ports();
    let signals = agent.address("exporters.prometheus");

    let collector_config = format!(
        r#"receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {ANY_PORT}
  filelog:
    include: ["{pods}/*/*/*.log"]
    start_at: beginning
    poll_interval: 100ms
    operators:
      - type: container
processors:
  batch:
    timeout: 200ms
exporters:
  otlp_grpc/opscope:
    endpoint: 127.0.0.1:{grpc}
    compression: gzip
    tls:
      insecure: true
  otlp_http/opscope:
    endpoint: http://127.0.0.1:{http}
    compression: gzip
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp_grpc/opscope]
    logs:
      receivers: [filelog]
      processors: [batch]
      exporters: [otlp_http/opscope]
"#,
        pods = pods.path().display(),
        grpc = ports.grpc,
        http = ports.http,
    );
    let collector = OtelCollector::start(&binary, &collector_config).await;
    let fleet = tokio::spawn(common::fleet::send_the_fleet(
        format!("http://{}", collector.otlp_grpc_endpoint()),
        Duration::from_secs(40),
    ));

    let fired = poll_until(
        || async { signal_page(&signals) },
        |page| {
            active_signal(page, "reconcile_loop", "train").is_some()
                && active_signal(page, "write_conflict", "rand-local").is_some()
        },
    )
    .await;
    fleet.abort();
    let page = fired.unwrap_or_else(|page| {
        panic!(
            "signals not fired; opscope's page:\n{page}\n{}\nopscope:\n{}",
            collector.log_tail(),
            agent.logs()
        )
    });
    let conflict = active_signal(&page, "write_conflict", "rand-local").unwrap_or_default();
    // The access log names the resource, not the kind.
    assert!(
        conflict.contains("namespace=\"e2e-tests-job-ljba5\""),
        "{conflict}"
    );
    let loop_line = active_signal(&page, "reconcile_loop", "train").unwrap_or_default();
    assert!(
        loop_line.contains("cause=\"self_triggered_status_write\""),
        "{loop_line}"
    );

    let received = sink.received();
    let tagged_log = received
        .log_records()
        .find(|record| string(&record.attributes, "k8s.api.name") == Some("rand-local"));
    assert!(
        tagged_log.is_some(),
        "no log record tagged with the Job's write: {:#?}",
        received.log_records().take(2).collect::<Vec<_>>()
    );
    let tagged_span = received
        .spans()
        .find(|span| string(&span.attributes, "k8s.object.name") == Some("train"));
    let tagged_span = tagged_span.expect("a span of ml/train");
    assert!(string(&tagged_span.attributes, "reconcile.id").is_some());
    println!(
        "collector → opscope: {} spans and {} log records tagged and passed on; \
         {conflict}; {loop_line}",
        received.span_count(),
        received.log_record_count()
    );
}

fn string<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(text) => Some(text.as_str()),
            _ => None,
        }
    })
}

/// opscope's otlp (gRPC, gzip) and otlphttp exporters into the Collector, which
/// passes what it takes on to a sink: the Collector accepted every span, log record
/// and metric point opscope was sent, and they arrive with their attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opscope_exports_to_the_collector_intact() {
    let Some(binary) = otel_collector_or_skip() else {
        return;
    };
    let sink = OtlpSink::grpc();
    let collector_config = format!(
        r#"receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {ANY_PORT}
      http:
        endpoint: {ANY_PORT}
processors:
  batch:
    timeout: 100ms
exporters:
  otlp_grpc/sink:
    endpoint: {sink}
    tls:
      insecure: true
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp_grpc/sink]
    logs:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp_grpc/sink]
    metrics:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp_grpc/sink]
"#,
        sink = sink.addr(),
    );
    let collector = OtelCollector::start(&binary, &collector_config).await;
    let collector_grpc = collector.otlp_grpc_endpoint();
    let collector_http = collector.otlp_http_endpoint();

    let ports = Ports::ANY;
    let agent_config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: 127.0.0.1:{grpc} }}
processors:
  operator_tagger: {{}}
  batch: {{ timeout: 100ms }}
exporters:
  otlp/collector: {{ endpoint: "http://{collector_grpc}", compression: gzip, tls: {{ insecure: true }} }}
  otlphttp/collector: {{ endpoint: "http://{collector_http}" }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger, batch], exporters: [otlp/collector] }}
    logs: {{ receivers: [otlp], processors: [operator_tagger, batch], exporters: [otlphttp/collector] }}
    metrics: {{ receivers: [otlp], processors: [operator_tagger, batch], exporters: [otlphttp/collector] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        grpc = ports.grpc,
        health = ports.health,
        metrics = ports.metrics,
    );
    let agent = Opscope::start(&agent_config);
    let ports = agent.ports();

    const SPANS: usize = 300;
    const LOG_RECORDS: usize = 200;
    const METRIC_POINTS: usize = 50;
    let mut traces = TraceServiceClient::connect(ports.grpc_url())
        .await
        .expect("opscope's gRPC receiver");
    for request in 0..3 {
        let mut batch = common::numbered_spans(request, SPANS / 3, "payload ✓ \"quoted\"");
        batch.resource_spans[0].resource = Some(operator_resource());
        traces.export(batch).await.expect("spans accepted");
    }
    let mut logs = LogsServiceClient::connect(ports.grpc_url())
        .await
        .expect("opscope's gRPC receiver");
    logs.export(operator_logs(LOG_RECORDS))
        .await
        .expect("log records accepted");

    let mut metrics = MetricsServiceClient::connect(ports.grpc_url())
        .await
        .expect("opscope's gRPC receiver");
    metrics
        .export(operator_gauges(METRIC_POINTS))
        .await
        .expect("metric points accepted");

    let accepted = |family: &'static str| collector.metric_sum(family);
    let counted = poll_until(
        || async {
            (
                accepted("otelcol_receiver_accepted_spans_total").await,
                accepted("otelcol_receiver_accepted_log_records_total").await,
                accepted("otelcol_receiver_accepted_metric_points_total").await,
            )
        },
        |(spans, records, points)| {
            *spans >= SPANS as f64
                && *records >= LOG_RECORDS as f64
                && *points >= METRIC_POINTS as f64
        },
    )
    .await;
    let Ok((spans, records, points)) = counted else {
        let page = collector.metrics().await;
        panic!(
            "the Collector accepted {counted:?}; its metrics:\n{page}\n{}",
            collector.log_tail()
        );
    };
    assert_eq!(
        (spans, records, points),
        (SPANS as f64, LOG_RECORDS as f64, METRIC_POINTS as f64)
    );
    let received = poll_until(
        || async { sink.received() },
        |received: &Received| {
            received.span_count() >= SPANS
                && received.log_record_count() >= LOG_RECORDS
                && received.metric_point_count() >= METRIC_POINTS
        },
    )
    .await
    .unwrap_or_else(|last| panic!("the sink got {} spans", last.span_count()));
    assert_eq!(received.span_count(), SPANS);
    assert_eq!(received.log_record_count(), LOG_RECORDS);
    assert_eq!(received.metric_point_count(), METRIC_POINTS);
    for metric in received.metrics() {
        assert_eq!(metric.name, "workqueue_depth");
    }
    for span in received.spans() {
        assert_eq!(
            string(&span.attributes, "payload"),
            Some("payload ✓ \"quoted\"")
        );
    }
    for resource in received.resources() {
        let attributes = &resource.expect("a resource").attributes;
        assert_eq!(string(attributes, "operator.name"), Some("widget-operator"));
    }
    let bodies: Vec<_> = received
        .log_records()
        .filter_map(|record| match record.body.as_ref()?.value.as_ref()? {
            Value::StringValue(text) => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(bodies.len(), LOG_RECORDS);
    assert!(bodies.iter().all(|body| body.contains("reconcileID")));
    println!(
        "opscope → collector: {spans} spans (gRPC, gzip), {records} log records and \
         {points} metric points (HTTP) accepted, passed on with their attributes"
    );
}

/// `count` points of a `workqueue_depth` gauge of one operator, one per queue.
fn operator_gauges(count: usize) -> ExportMetricsServiceRequest {
    let now = opscope_model::timestamp::now_unix_nanos();
    let data_points = (0..count)
        .map(|i| NumberDataPoint {
            attributes: vec![KeyValue {
                key: "name".into(),
                value: Some(AnyValue {
                    value: Some(Value::StringValue(format!("queue-{i}"))),
                }),
                ..Default::default()
            }],
            time_unix_nano: now,
            value: Some(number_data_point::Value::AsInt(i as i64)),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(operator_resource()),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "workqueue_depth".into(),
                    data: Some(metric::Data::Gauge(Gauge { data_points })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn operator_resource() -> Resource {
    Resource {
        attributes: vec![KeyValue {
            key: "operator.name".into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue("widget-operator".into())),
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// `count` controller-runtime JSON lines of one operator, each of its own reconcile.
fn operator_logs(count: usize) -> ExportLogsServiceRequest {
    let now = opscope_model::timestamp::now_unix_nanos();
    let records = (0..count)
        .map(|i| LogRecord {
            time_unix_nano: now + i as u64,
            body: Some(AnyValue {
                value: Some(Value::StringValue(format!(
                    r#"{{"level":"info","msg":"Reconciling","controller":"widget","controllerGroup":"example.com","controllerKind":"Widget","Widget":{{"name":"w{i}","namespace":"shop"}},"namespace":"shop","name":"w{i}","reconcileID":"00000000-0000-4000-8000-{i:012}"}}"#
                ))),
            }),
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(operator_resource()),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
