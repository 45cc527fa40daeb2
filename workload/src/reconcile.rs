//! One reconcile as an instrumented controller traces it: a root `reconcile` span
//! naming the object, and a client span per call it makes to the API server.

use opscope_proto::otlp::common::v1::KeyValue;
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::span::SpanKind;
use opscope_proto::otlp::trace::v1::status::StatusCode;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use crate::attributes::{int, text};

/// Time between the starts of two consecutive API calls of a reconcile; each lasts
/// two thirds of it, the first starts a millisecond into the reconcile.
const CALL_SPACING_NANOS: u64 = 2_000_000;
const CALL_NANOS: u64 = 2_000_000;
const FIRST_CALL_OFFSET_NANOS: u64 = 1_000_000;
/// The shortest reconcile: long enough for two calls.
const MIN_RECONCILE_NANOS: u64 = 5_000_000;

/// The API server address controllers in a cluster talk to.
const API_SERVER: &str = "https://10.96.0.1:443";

/// An operator pod, as its resource attributes name it.
#[derive(Debug, Clone)]
pub struct OperatorPod {
    pub service: String,
    pub namespace: String,
    pub pod: String,
}

impl OperatorPod {
    pub fn new(service: &str, namespace: &str, pod: &str) -> Self {
        Self {
            service: service.into(),
            namespace: namespace.into(),
            pod: pod.into(),
        }
    }

    pub fn resource(&self) -> Resource {
        Resource {
            attributes: vec![
                text("service.name", &self.service),
                text("k8s.namespace.name", &self.namespace),
                text("k8s.pod.name", &self.pod),
            ],
            ..Default::default()
        }
    }

    /// The pod's spans as one `ResourceSpans`.
    pub fn resource_spans(&self, spans: Vec<Span>) -> ResourceSpans {
        ResourceSpans {
            resource: Some(self.resource()),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }
    }
}

/// A namespaced custom resource a controller reconciles, with the strings every span
/// about it repeats worked out once.
#[derive(Debug, Clone)]
pub struct ObjectRef {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The lower-case kind, which controller-runtime names the controller after.
    pub controller: String,
    /// The object's URL on the API server (`/apis/<group>/v1/namespaces/...`).
    pub url: String,
}

impl ObjectRef {
    pub fn new(group: &str, kind: &str, namespace: &str, name: &str) -> Self {
        let controller = kind.to_ascii_lowercase();
        let url =
            format!("{API_SERVER}/apis/{group}/v1/namespaces/{namespace}/{controller}s/{name}");
        Self {
            group: group.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            controller,
            url,
        }
    }

    fn attributes(&self) -> Vec<KeyValue> {
        vec![
            text("k8s.object.group", &self.group),
            text("k8s.object.kind", &self.kind),
            text("k8s.object.namespace", &self.namespace),
            text("k8s.object.name", &self.name),
            text("k8s.controller.name", &self.controller),
        ]
    }
}

/// A call of the reconcile to the API server about its object: `subresource` is
/// appended to the object's URL (`""` or `"/status"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiCall {
    pub method: &'static str,
    pub subresource: &'static str,
    pub code: i64,
}

impl ApiCall {
    pub const fn new(method: &'static str, subresource: &'static str, code: i64) -> Self {
        Self {
            method,
            subresource,
            code,
        }
    }
}

/// A reconcile of `object` ending at `end` (Unix nanoseconds). A reconcile with an
/// `error` ends with an error status, and so does each of its calls answered 400 or
/// above. `attributes` are added to the root span (object state, padding).
#[derive(Debug, Clone)]
pub struct Reconcile<'a> {
    pub object: &'a ObjectRef,
    pub end: u64,
    pub calls: &'a [ApiCall],
    pub error: Option<&'a str>,
    pub attributes: Vec<KeyValue>,
}

/// Trace and span ids from a counter: unique within a generator, and unique across
/// generators that start from different high bits.
#[derive(Debug, Clone)]
pub struct SpanIds {
    last: u64,
}

impl SpanIds {
    pub fn starting_after(last: u64) -> Self {
        Self { last }
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.last = self.last.wrapping_add(1);
        self.last
    }
}

impl<'a> Reconcile<'a> {
    /// A reconcile with no attributes beyond its object's.
    pub fn new(
        object: &'a ObjectRef,
        end: u64,
        calls: &'a [ApiCall],
        error: Option<&'a str>,
    ) -> Self {
        Self {
            object,
            end,
            calls,
            error,
            attributes: Vec::new(),
        }
    }

    /// Appends the reconcile's spans to `spans`: the root first, then one client
    /// span per call, in order.
    pub fn write_spans(self, ids: &mut SpanIds, spans: &mut Vec<Span>) {
        let trace_id = ids.next().to_be_bytes().repeat(2);
        let root_id = ids.next().to_be_bytes().to_vec();
        let calls_nanos = FIRST_CALL_OFFSET_NANOS + CALL_SPACING_NANOS * self.calls.len() as u64;
        let start = self
            .end
            .saturating_sub(calls_nanos.max(MIN_RECONCILE_NANOS));
        let mut attributes = self.object.attributes();
        attributes.extend(self.attributes);
        spans.push(Span {
            trace_id: trace_id.clone(),
            span_id: root_id.clone(),
            name: "reconcile".into(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: self.end,
            attributes,
            status: Some(status(self.error)),
            ..Default::default()
        });
        for (n, call) in self.calls.iter().enumerate() {
            let call_start = start + FIRST_CALL_OFFSET_NANOS + n as u64 * CALL_SPACING_NANOS;
            spans.push(Span {
                trace_id: trace_id.clone(),
                span_id: ids.next().to_be_bytes().to_vec(),
                parent_span_id: root_id.clone(),
                name: call.method.into(),
                kind: SpanKind::Client as i32,
                start_time_unix_nano: call_start,
                end_time_unix_nano: call_start + CALL_NANOS,
                attributes: vec![
                    text("http.request.method", call.method),
                    text(
                        "url.full",
                        &format!("{}{}", self.object.url, call.subresource),
                    ),
                    int("http.response.status_code", call.code),
                ],
                status: Some(status(self.error.filter(|_| call.code >= 400))),
                ..Default::default()
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_is_a_root_span_with_a_client_span_per_call() {
        let object = ObjectRef::new("apps.example.com", "Widget", "shop", "w1");
        let calls = [
            ApiCall::new("GET", "", 200),
            ApiCall::new("PATCH", "/status", 200),
            ApiCall::new("PUT", "", 409),
        ];
        let mut spans = Vec::new();
        Reconcile {
            object: &object,
            end: 100_000_000,
            calls: &calls,
            error: Some("conflict"),
            attributes: Vec::new(),
        }
        .write_spans(&mut SpanIds::starting_after(0), &mut spans);
        assert_eq!(spans.len(), 4);
        let root = &spans[0];
        assert!(root.parent_span_id.is_empty());
        assert_eq!(root.end_time_unix_nano, 100_000_000);
        for child in &spans[1..] {
            assert_eq!(child.parent_span_id, root.span_id);
            assert_eq!(child.trace_id, root.trace_id);
            assert!(child.start_time_unix_nano >= root.start_time_unix_nano);
            assert!(child.end_time_unix_nano <= root.end_time_unix_nano);
        }
        let errors: Vec<i32> = spans[1..]
            .iter()
            .map(|s| s.status.as_ref().map_or(0, |s| s.code))
            .collect();
        assert_eq!(
            errors,
            [0, 0, StatusCode::Error as i32],
            "only the 409 call fails"
        );
        assert_eq!(
            format!("{:?}", spans[2].attributes[1].value),
            format!(
                "{:?}",
                text("", "https://10.96.0.1:443/apis/apps.example.com/v1/namespaces/shop/widgets/w1/status").value
            )
        );
    }
}
