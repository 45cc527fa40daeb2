//! The live agent tags what it forwards and reports signals as they fire: an
//! operator's controller-runtime logs sent over OTLP arrive downstream with their
//! operator, reconcile and object, and a reconcile loop among them is printed and
//! counted within seconds.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Opscope, OtlpSink, Ports, wait_until};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use tokio::runtime::Runtime;

const TIMEOUT: Duration = Duration::from_secs(20);
const RECONCILES: u64 = 40;

fn config(ports: &Ports, sink: &OtlpSink) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: 127.0.0.1:{grpc} }}
processors:
  operator_tagger: {{}}
  correlator: {{}}
  batch: {{ timeout: 50ms }}
exporters:
  otlp/sink: {{ endpoint: {sink} }}
  debug: {{ verbosity: basic }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    logs: {{ receivers: [otlp], processors: [operator_tagger, correlator, batch], exporters: [otlp/sink, debug] }}
    signals: {{ exporters: [debug, otlp/sink] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        grpc = ports.grpc,
        sink = sink.endpoint(),
        health = ports.health,
        metrics = ports.metrics,
    )
}

fn text(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(value.to_string())),
    })
}

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: text(value),
        ..Default::default()
    }
}

/// Two reconciles a second of one RayJob, as controller-runtime logs them, ending now.
fn looping_operator_logs() -> ExportLogsServiceRequest {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64;
    let records = (0..RECONCILES)
        .map(|i| {
            let time = now - (RECONCILES - i) * 500_000_000;
            let body = format!(
                r#"{{"level":"info","ts":{:.3},"logger":"controllers.RayJob","msg":"Reconciling","controller":"rayjob","controllerGroup":"ray.io","controllerKind":"RayJob","RayJob":{{"name":"train","namespace":"ml"}},"namespace":"ml","name":"train","reconcileID":"5f0c2a8e-{i:04}-4d6f-9a1b-2c3d4e5f6a7b"}}"#,
                time as f64 / 1e9
            );
            LogRecord { observed_time_unix_nano: time, body: text(&body), ..Default::default() }
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    attribute("k8s.namespace.name", "ray-system"),
                    attribute("k8s.pod.name", "kuberay-operator-6bc4f7d9c8-x2k4p"),
                    attribute("k8s.container.name", "manager"),
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

fn string_attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
    })
}

#[test]
fn forwarded_logs_are_tagged_and_a_reconcile_loop_fires() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&config(&ports, &sink));
    let ports = opscope.ports();
    let runtime = Runtime::new().expect("client runtime");
    runtime
        .block_on(async {
            let mut client = LogsServiceClient::connect(ports.grpc_url()).await?;
            client
                .export(looping_operator_logs())
                .await
                .map_err(Box::<dyn std::error::Error>::from)
        })
        .expect("opscope accepts the logs");

    let is_operator_record =
        |l: &&LogRecord| string_attribute(&l.attributes, "opscope.signal.id").is_none();
    let operator_records =
        |r: &common::Received| r.log_records().filter(is_operator_record).count();
    assert!(sink.wait_for(TIMEOUT, |r| operator_records(r) == RECONCILES as usize));
    let received = sink.received();
    let resource = received
        .resource_logs()
        .filter_map(|r| r.resource.as_ref())
        .find(|r| string_attribute(&r.attributes, "k8s.pod.name").is_some())
        .expect("the operator pod's resource");
    assert_eq!(
        string_attribute(&resource.attributes, "operator.name"),
        Some("kuberay-operator")
    );
    for record in received.log_records().filter(is_operator_record) {
        let attributes = &record.attributes;
        assert_eq!(
            string_attribute(attributes, "k8s.object.kind"),
            Some("RayJob")
        );
        assert_eq!(
            string_attribute(attributes, "k8s.object.namespace"),
            Some("ml")
        );
        assert_eq!(
            string_attribute(attributes, "k8s.object.name"),
            Some("train")
        );
        assert_eq!(
            string_attribute(attributes, "k8s.controller.name"),
            Some("rayjob")
        );
        assert!(
            string_attribute(attributes, "reconcile.id")
                .is_some_and(|id| id.starts_with("5f0c2a8e-"))
        );
        assert!(
            record.time_unix_nano > 0,
            "the time comes from the log line"
        );
        assert_eq!(record.severity_text, "INFO");
    }

    let fired = wait_until(TIMEOUT, || {
        opscope.metric_value(
            &ports.metrics_addr(),
            "opscope_signals_total",
            &[("signal", "reconcile_loop")],
        ) == 1.0
    });
    assert!(fired, "{}", opscope.logs());
    let printed = wait_until(TIMEOUT, || {
        opscope
            .logs()
            .contains("FIRING warning reconcile_loop RayJob ml/train")
    });
    assert!(printed, "{}", opscope.logs());
    let tracked = wait_until(TIMEOUT, || {
        opscope.metric_value(
            &ports.metrics_addr(),
            "opscope_correlator_tracked_objects",
            &[],
        ) >= 1.0
    });
    assert!(
        tracked,
        "the correlator's state is visible in self-telemetry"
    );
}

/// Reconcile traces as an instrumented operator exports them: a `reconcile` root with
/// the object, and a client span PATCHing the object's status, ending now. Returns
/// the request and the (trace id, span id) of every root.
/// The trace id and span id of a span.
type SpanRef = (Vec<u8>, Vec<u8>);

fn looping_operator_traces() -> (ExportTraceServiceRequest, Vec<SpanRef>) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64;
    let mut spans = Vec::new();
    let mut roots = Vec::new();
    for i in 0..RECONCILES {
        let start = now - (RECONCILES - i) * 500_000_000;
        let trace_id = (u128::from(i) + 1).to_be_bytes().to_vec();
        let root_id = (i + 1).to_be_bytes().to_vec();
        roots.push((trace_id.clone(), root_id.clone()));
        spans.push(Span {
            trace_id: trace_id.clone(),
            span_id: root_id.clone(),
            name: "reconcile".into(),
            start_time_unix_nano: start,
            end_time_unix_nano: start + 4_000_000,
            attributes: vec![
                attribute("k8s.object.kind", "RayJob"),
                attribute("k8s.object.namespace", "ml"),
                attribute("k8s.object.name", "train"),
            ],
            ..Default::default()
        });
        spans.push(Span {
            trace_id,
            span_id: (1000 + i).to_be_bytes().to_vec(),
            parent_span_id: root_id,
            name: "PATCH".into(),
            kind: 3,
            start_time_unix_nano: start + 1_000_000,
            end_time_unix_nano: start + 3_000_000,
            attributes: vec![
                attribute("http.request.method", "PATCH"),
                attribute(
                    "url.full",
                    "https://10.96.0.1:443/apis/ray.io/v1/namespaces/ml/rayjobs/train/status",
                ),
                KeyValue {
                    key: "http.response.status_code".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::IntValue(200)),
                    }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
    }
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    attribute("service.name", "kuberay-operator"),
                    attribute("k8s.namespace.name", "ray-system"),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    (request, roots)
}

#[test]
fn a_signal_span_links_to_the_reconciles_behind_it() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let traces = "    traces: { receivers: [otlp], processors: [operator_tagger, correlator, batch], exporters: [otlp/sink] }\n";
    let config = config(&ports, &sink).replacen("    logs: {", &format!("{traces}    logs: {{"), 1);
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();
    let (request, roots) = looping_operator_traces();
    let runtime = Runtime::new().expect("client runtime");
    runtime
        .block_on(async {
            let mut client = TraceServiceClient::connect(ports.grpc_url()).await?;
            client
                .export(request)
                .await
                .map_err(Box::<dyn std::error::Error>::from)
        })
        .expect("opscope accepts the spans");

    let is_signal = |span: &Span| span.name == "opscope.signal reconcile_loop";
    let arrived = sink.wait_for(TIMEOUT, |r| {
        r.spans().any(is_signal)
            && r.spans().filter(|s| s.name == "PATCH").count() == RECONCILES as usize
    });
    assert!(arrived, "the signal span and the operator's spans arrive");
    let received = sink.received();
    let signal = received
        .spans()
        .find(|s| is_signal(s))
        .expect("the signal span");
    assert_eq!(
        string_attribute(&signal.attributes, "opscope.signal.state"),
        Some("firing")
    );
    assert_eq!(
        string_attribute(&signal.attributes, "k8s.object.name"),
        Some("train")
    );
    assert_eq!(
        string_attribute(&signal.attributes, "operator.name"),
        Some("kuberay-operator")
    );
    assert!(
        !signal.links.is_empty() && signal.links.len() <= 5,
        "{:?}",
        signal.links
    );
    for link in &signal.links {
        assert!(
            roots
                .iter()
                .any(|(trace, span)| *trace == link.trace_id && *span == link.span_id),
            "the link {link:?} names a reconcile root span"
        );
    }
    let patch = received
        .spans()
        .find(|s| s.name == "PATCH")
        .expect("the PATCH spans are forwarded");
    assert_eq!(
        string_attribute(&patch.attributes, "k8s.api.verb"),
        Some("patch")
    );
    assert_eq!(
        string_attribute(&patch.attributes, "k8s.api.subresource"),
        Some("status")
    );
    assert!(
        string_attribute(&patch.attributes, "reconcile.id").is_some(),
        "children carry their reconcile"
    );
}
