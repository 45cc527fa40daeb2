//! Payloads shaped like an operator's telemetry and the events it yields, for the
//! criterion benchmarks.

use opscope_processors::correlator::events::{
    Event, ObjectEvent, ObjectEventKind, ObjectRef, OperatorRef, Outcome, Reconcile, Write,
};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, span};

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// `reconciles` reconcile traces of one operator: a root span with the object's
/// attributes and four client API calls under it.
pub fn reconcile_traces(reconciles: usize) -> ExportTraceServiceRequest {
    let mut spans = Vec::with_capacity(reconciles * 5);
    for n in 0..reconciles {
        let trace_id = (n as u128).to_be_bytes().to_vec();
        let root_id = ((n as u64) << 8).to_be_bytes().to_vec();
        spans.push(Span {
            trace_id: trace_id.clone(),
            span_id: root_id.clone(),
            name: "reconcile".into(),
            kind: span::SpanKind::Internal as i32,
            start_time_unix_nano: 1_700_000_000_000_000_000 + n as u64 * 1_000_000,
            end_time_unix_nano: 1_700_000_000_004_000_000 + n as u64 * 1_000_000,
            attributes: vec![
                attribute("k8s.object.kind", "Widget"),
                attribute("k8s.object.namespace", "team-a"),
                attribute("k8s.object.name", &format!("widget-{}", n % 50)),
                attribute("reconcile.id", &format!("{n:032x}")),
            ],
            ..Default::default()
        });
        for (call, (method, path)) in [
            ("GET", "/apis/example.com/v1/namespaces/team-a/widgets/w"),
            (
                "PATCH",
                "/apis/example.com/v1/namespaces/team-a/widgets/w/status",
            ),
            ("GET", "/api/v1/namespaces/team-a/configmaps/c"),
            ("PUT", "/api/v1/namespaces/team-a/configmaps/c"),
        ]
        .into_iter()
        .enumerate()
        {
            spans.push(Span {
                trace_id: trace_id.clone(),
                span_id: (((n as u64) << 8) + call as u64 + 1).to_be_bytes().to_vec(),
                parent_span_id: root_id.clone(),
                name: method.into(),
                kind: span::SpanKind::Client as i32,
                attributes: vec![
                    attribute("http.request.method", method),
                    attribute("url.full", &format!("https://10.96.0.1:443{path}")),
                ],
                ..Default::default()
            });
        }
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    attribute("service.name", "widget-operator"),
                    attribute("k8s.namespace.name", "widget-system"),
                    attribute("k8s.pod.name", "widget-operator-7d9f8-abcde"),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// `records` controller-runtime JSON log lines of an operator reconciling 50 objects,
/// as OTLP log records of one pod (the shape the filelog receiver produces).
pub fn controller_runtime_logs(records: usize) -> ExportLogsServiceRequest {
    let log_records = (0..records)
        .map(|n| {
            let body = format!(
                r#"{{"level":"info","ts":"2026-11-20T10:00:{:02}.{:03}Z","logger":"controllers.Widget","msg":"Reconciling","controller":"widget","controllerGroup":"apps.example.com","controllerKind":"Widget","Widget":{{"name":"w{}","namespace":"shop"}},"namespace":"shop","name":"w{}","reconcileID":"{n:032x}"}}"#,
                (n / 1000) % 60,
                n % 1000,
                n % 50,
                n % 50
            );
            LogRecord {
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(body)),
                }),
                ..Default::default()
            }
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    attribute("k8s.namespace.name", "widget-system"),
                    attribute("k8s.pod.name", "widget-operator-5d6b8c9f7-q8w2z"),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// `count` correlator events spread over `objects` objects, 20 per second of event
/// time: reconciles, each followed every other time by a status write.
pub fn reconcile_events(count: usize, objects: usize) -> Vec<Event> {
    let operator = OperatorRef {
        name: "widget-operator".into(),
        namespace: "widget-system".into(),
    };
    (0..count)
        .map(|n| {
            let object = ObjectRef {
                group: "apps.example.com".into(),
                kind: "Widget".into(),
                namespace: "shop".into(),
                name: format!("w{}", n % objects.max(1)),
                ..Default::default()
            };
            let kind = if n % 2 == 0 {
                ObjectEventKind::Reconcile(Reconcile {
                    controller: "widget".into(),
                    reconcile_id: format!("{n:x}"),
                    outcome: Outcome::Ok,
                    ..Default::default()
                })
            } else {
                ObjectEventKind::Write(Write {
                    verb: "update".into(),
                    subresource: "status".into(),
                    code: 200,
                    status_digest: vec![format!("status.lastSyncTime={n:016x}")],
                    ..Default::default()
                })
            };
            Event::Object(ObjectEvent {
                time: 1_700_000_000_000_000_000 + n as u64 * 50_000_000,
                object,
                operator: operator.clone(),
                kind,
                evidence: Some(format!("reconcile {n:x}")),
            })
        })
        .collect()
}
