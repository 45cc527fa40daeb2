//! Small OTLP batches of a known shape, for the tests of code that cuts, joins and
//! counts batches.

use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// A trace batch with `per_scope` spans in each of `scopes` scopes of one resource,
/// named `s<scope>-<index>`.
pub fn traces(scopes: usize, per_scope: usize) -> ExportTraceServiceRequest {
    let scope_spans = (0..scopes)
        .map(|scope| ScopeSpans {
            spans: (0..per_scope)
                .map(|i| Span {
                    name: format!("s{scope}-{i}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource::default()),
            scope_spans,
            schema_url: "https://example.test/schema".into(),
        }],
    }
}
