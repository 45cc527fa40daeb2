//! Reconciles as an instrumented operator exports them, generated, and the
//! `reconcile_loop` signals that come of them.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use super::OtlpSink;

pub const SECOND: u64 = 1_000_000_000;

pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

pub fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// `count` reconciles of RayJob `ml/<name>`, half a second apart, the last at
/// `last`, as an instrumented operator exports them: a `reconcile` root naming the
/// object and a PATCH of its status. `marked` puts opscope's hand-over mark on the
/// resource, as a client could.
pub fn reconciles(name: &str, count: u64, last: u64, marked: bool) -> ExportTraceServiceRequest {
    reconciles_apart(name, count, last, SECOND / 2, marked)
}

/// Like [`reconciles`], `apart` nanoseconds apart.
pub fn reconciles_apart(
    name: &str,
    count: u64,
    last: u64,
    apart: u64,
    marked: bool,
) -> ExportTraceServiceRequest {
    let seed = (name.bytes()).fold(7u64, |hash, byte| {
        hash.wrapping_mul(31).wrapping_add(u64::from(byte))
    });
    let mut spans = Vec::new();
    for i in 0..count {
        let start = last - (count - 1 - i) * apart;
        let trace_id = (u128::from(seed) << 64 | u128::from(i + 1))
            .to_be_bytes()
            .to_vec();
        let root = (seed ^ (i + 1)).to_be_bytes().to_vec();
        spans.push(Span {
            trace_id: trace_id.clone(),
            span_id: root.clone(),
            name: "reconcile".into(),
            start_time_unix_nano: start,
            end_time_unix_nano: start + 4_000_000,
            attributes: vec![
                text("k8s.object.kind", "RayJob"),
                text("k8s.object.namespace", "ml"),
                text("k8s.object.name", name),
            ],
            ..Default::default()
        });
        spans.push(Span {
            trace_id,
            span_id: (seed ^ (1000 + i)).to_be_bytes().to_vec(),
            parent_span_id: root,
            name: "PATCH".into(),
            kind: 3,
            start_time_unix_nano: start + 1_000_000,
            end_time_unix_nano: start + 3_000_000,
            attributes: vec![
                text("http.request.method", "PATCH"),
                text(
                    "url.full",
                    &format!(
                        "https://10.96.0.1:443/apis/ray.io/v1/namespaces/ml/rayjobs/{name}/status"
                    ),
                ),
            ],
            ..Default::default()
        });
    }
    let mut attributes = vec![
        text("service.name", "kuberay-operator"),
        text("k8s.namespace.name", "ray-system"),
    ];
    if marked {
        attributes.push(KeyValue {
            key: "opscope.handed_over".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::BoolValue(true)),
            }),
            ..Default::default()
        });
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes,
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

/// The objects of the `reconcile_loop` signals `sink` got as firing.
pub fn looping(sink: &OtlpSink) -> BTreeSet<String> {
    let value = |span: &Span, key: &str| -> Option<String> {
        let found = span.attributes.iter().find(|kv| kv.key == key)?;
        match found.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(text) => Some(text.clone()),
            _ => None,
        }
    };
    sink.received()
        .spans()
        .filter(|span| span.name == "opscope.signal reconcile_loop")
        .filter(|span| value(span, "opscope.signal.state").as_deref() == Some("firing"))
        .filter_map(|span| value(span, "k8s.object.name"))
        .collect()
}

/// Exports `requests` in order over OTLP/gRPC to `url` (`http://host:port`); panics,
/// naming `to`, if one is refused.
pub fn export_in_order(url: String, requests: Vec<ExportTraceServiceRequest>, to: &str) {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    let runtime = tokio::runtime::Runtime::new().expect("client runtime");
    let exported = runtime.block_on(async {
        let mut client = TraceServiceClient::connect(url).await?;
        for request in requests {
            client.export(request).await?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    });
    if let Err(error) = exported {
        panic!("{to} does not take the spans: {error}");
    }
}
