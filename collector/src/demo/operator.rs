//! A simulated operator fleet that misbehaves the way real ones do, as OTLP traces
//! from instrumented controllers: one healthy controller, one that writes its status
//! on every reconcile and re-triggers itself, an object stuck on a finalizer whose
//! cleanup keeps failing, and two replicas fighting over one object.

use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, ArrayValue, KeyValue, any_value::Value};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::span::SpanKind;
use opscope_proto::otlp::trace::v1::status::StatusCode;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

/// One tick of the simulation, in milliseconds: the looping controller reconciles
/// once per tick.
pub const TICK_MILLIS: u64 = 200;

const CONFLICT: &str = "Operation cannot be fulfilled on widgets.apps.example.com \"shared\": the object has been modified; please apply your changes to the latest version and try again";

/// An operator pod and what it reconciles.
struct Pod {
    service: &'static str,
    namespace: &'static str,
    pod: &'static str,
}

const KUBERAY: Pod = Pod {
    service: "kuberay-operator",
    namespace: "ray-system",
    pod: "kuberay-operator-6bc4f7d9c8-x2k4p",
};
const WIDGETS_A: Pod = Pod {
    service: "widget-operator",
    namespace: "widget-system",
    pod: "widget-operator-5d6b8c9f7-q8w2z",
};
const WIDGETS_B: Pod = Pod {
    service: "widget-operator",
    namespace: "widget-system",
    pod: "widget-operator-5d6b8c9f7-h7k2m",
};

/// The object of a reconcile: group, kind, namespace, name.
type Object = (&'static str, &'static str, &'static str, &'static str);

const LOOPING: Object = ("ray.io", "RayJob", "ml", "train");
const CALM: Object = ("apps.example.com", "Widget", "shop", "calm");
const SHARED: Object = ("apps.example.com", "Widget", "shop", "shared");
const STUCK: Object = ("apps.example.com", "Widget", "shop", "stuck");

/// Generates the fleet's traces, tick by tick.
pub struct SimulatedFleet {
    tick: u64,
    /// When the stuck object was deleted (the simulation's start).
    deleted_at: u64,
    next_id: u64,
}

impl SimulatedFleet {
    pub fn new(start_unix_nanos: u64) -> Self {
        Self {
            tick: 0,
            deleted_at: start_unix_nanos,
            next_id: 1,
        }
    }

    /// The traces the fleet exports during one tick ending at `now`.
    pub fn tick(&mut self, now: u64) -> ExportTraceServiceRequest {
        let tick = self.tick;
        self.tick += 1;
        let mut kuberay = Vec::new();
        let mut widgets_a = Vec::new();
        let mut widgets_b = Vec::new();
        // time.Now() written into status on every reconcile, no event filter.
        self.reconcile(
            &mut kuberay,
            now,
            LOOPING,
            Some(("PATCH", "/status", 200)),
            None,
            &[],
        );
        if tick.is_multiple_of(25) {
            self.reconcile(&mut widgets_a, now, CALM, Some(("GET", "", 200)), None, &[]);
        }
        if tick.is_multiple_of(25) {
            // Two replicas without leader election update the same object.
            for spans in [&mut widgets_a, &mut widgets_b] {
                self.reconcile(
                    spans,
                    now,
                    SHARED,
                    Some(("PUT", "", 409)),
                    Some(CONFLICT),
                    &[],
                );
            }
        }
        if tick.is_multiple_of(10) {
            let deleted = humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_nanos(self.deleted_at),
            )
            .to_string();
            let state = [
                ("k8s.object.deletion_timestamp", Value::StringValue(deleted)),
                (
                    "k8s.object.finalizers",
                    strings(&["apps.example.com/bucket-cleanup"]),
                ),
            ];
            let failure = "cleanup of bucket shop-stuck failed: BucketNotEmpty: the bucket you tried to delete is not empty";
            self.reconcile(&mut widgets_a, now, STUCK, None, Some(failure), &state);
        }
        ExportTraceServiceRequest {
            resource_spans: [
                (KUBERAY, kuberay),
                (WIDGETS_A, widgets_a),
                (WIDGETS_B, widgets_b),
            ]
            .into_iter()
            .filter(|(_, spans)| !spans.is_empty())
            .map(|(pod, spans)| resource_spans(&pod, spans))
            .collect(),
        }
    }

    /// A reconcile root span and, when it calls the API server, its client spans
    /// (a conflicting update is tried twice, as `retry.RetryOnConflict` would).
    fn reconcile(
        &mut self,
        spans: &mut Vec<Span>,
        now: u64,
        object: Object,
        call: Option<(&str, &str, i64)>,
        error: Option<&str>,
        state: &[(&str, Value)],
    ) {
        let trace_id = self.id().to_be_bytes().repeat(2);
        let root_id = self.id().to_be_bytes().to_vec();
        let start = now.saturating_sub(5_000_000);
        let (group, kind, namespace, name) = object;
        let mut attributes = vec![
            attribute("k8s.object.group", Value::StringValue(group.into())),
            attribute("k8s.object.kind", Value::StringValue(kind.into())),
            attribute("k8s.object.namespace", Value::StringValue(namespace.into())),
            attribute("k8s.object.name", Value::StringValue(name.into())),
            attribute(
                "k8s.controller.name",
                Value::StringValue(kind.to_ascii_lowercase()),
            ),
        ];
        attributes.extend(
            state
                .iter()
                .map(|(key, value)| attribute(key, value.clone())),
        );
        spans.push(Span {
            trace_id: trace_id.clone(),
            span_id: root_id.clone(),
            name: "reconcile".into(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: now,
            attributes,
            status: Some(status(error)),
            ..Default::default()
        });
        let Some((method, subresource, code)) = call else {
            return;
        };
        let plural = format!("{}s", kind.to_ascii_lowercase());
        let url = format!(
            "https://10.96.0.1:443/apis/{group}/v1/namespaces/{namespace}/{plural}/{name}{subresource}"
        );
        let attempts = if code == 409 { 2 } else { 1 };
        for attempt in 0..attempts {
            let start = start + attempt * 2_000_000;
            spans.push(Span {
                trace_id: trace_id.clone(),
                span_id: self.id().to_be_bytes().to_vec(),
                parent_span_id: root_id.clone(),
                name: method.into(),
                kind: SpanKind::Client as i32,
                start_time_unix_nano: start + 1_000_000,
                end_time_unix_nano: start + 3_000_000,
                attributes: vec![
                    attribute("http.request.method", Value::StringValue(method.into())),
                    attribute("url.full", Value::StringValue(url.clone())),
                    attribute("http.response.status_code", Value::IntValue(code)),
                ],
                status: Some(status(error.filter(|_| code >= 400))),
                ..Default::default()
            });
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

fn status(error: Option<&str>) -> Status {
    match error {
        Some(message) => Status {
            code: StatusCode::Error as i32,
            message: message.to_string(),
        },
        None => Status::default(),
    }
}

fn resource_spans(pod: &Pod, spans: Vec<Span>) -> ResourceSpans {
    let text = |key: &str, value: &str| attribute(key, Value::StringValue(value.to_string()));
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![
                text("service.name", pod.service),
                text("k8s.namespace.name", pod.namespace),
                text("k8s.pod.name", pod.pod),
            ],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn attribute(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn strings(items: &[&str]) -> Value {
    Value::ArrayValue(ArrayValue {
        values: items
            .iter()
            .map(|s| AnyValue {
                value: Some(Value::StringValue((*s).to_string())),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_reconciles_on_its_schedule() {
        let mut fleet = SimulatedFleet::new(0);
        let first = fleet.tick(1_000_000_000);
        // Every pod speaks at the first tick: loop, calm, both fighters, stuck.
        assert_eq!(first.resource_spans.len(), 3);
        let roots = |request: &ExportTraceServiceRequest| {
            request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
                .filter(|s| s.name == "reconcile")
                .count()
        };
        assert_eq!(roots(&first), 5);
        let second = fleet.tick(1_200_000_000);
        assert_eq!(roots(&second), 1, "only the looping controller every tick");
    }
}
