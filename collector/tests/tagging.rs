//! The live agent tags what it forwards and reports signals as they fire: an
//! operator's controller-runtime logs sent over OTLP arrive downstream with their
//! operator, reconcile and object, and a reconcile loop among them is printed and
//! counted within seconds.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Opscope, OtlpSink, Ports, wait_until};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
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
    let ports = Ports::free();
    let opscope = Opscope::start(&config(&ports, &sink), &ports.health_addr());
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

    assert!(sink.wait_for(TIMEOUT, |r| r.log_record_count() == RECONCILES as usize));
    let received = sink.received();
    let resource = received
        .resource_logs()
        .next()
        .and_then(|r| r.resource.as_ref())
        .expect("a resource");
    assert_eq!(
        string_attribute(&resource.attributes, "operator.name"),
        Some("kuberay-operator")
    );
    for record in received.log_records() {
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
