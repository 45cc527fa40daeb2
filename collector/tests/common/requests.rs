//! The requests the fault and delivery tests send: numbered, so that what arrives
//! can be told apart and counted.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// Request `request`: `count` spans named `request-<request>-span-<i>`, each of its own
/// trace, with `payload` (when not empty) as an attribute of each.
pub fn numbered_spans(request: usize, count: usize, payload: &str) -> ExportTraceServiceRequest {
    let attributes = if payload.is_empty() {
        Vec::new()
    } else {
        vec![KeyValue {
            key: "payload".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(payload.to_string())),
            }),
            ..Default::default()
        }]
    };
    let spans = (0..count)
        .map(|i| Span {
            trace_id: [request.to_be_bytes(), i.to_be_bytes()].concat(),
            span_id: (i as u64 + 1).to_be_bytes().to_vec(),
            name: format!("request-{request}-span-{i}"),
            attributes: attributes.clone(),
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
