//! The OTLP receivers' input limits over real sockets: a request with too many
//! attributes or too long a value is refused whole, INVALID_ARGUMENT over gRPC and
//! 400 over HTTP, with the path of the offending element, and counted; a request
//! within the limits is delivered.

mod common;

use std::time::Duration;

use common::{Opscope, OtlpSink, Ports, http_post};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tokio::runtime::Runtime;
use tonic::Code;

const TIMEOUT: Duration = Duration::from_secs(20);

fn config(ports: &Ports, sink: &OtlpSink) -> String {
    ports
        .config("otlp/sink", &format!("{{ endpoint: {} }}", sink.endpoint()))
        .replacen(
            "  otlp:\n    protocols:\n",
            "  otlp:\n    limits: { max_attributes: 4, max_attribute_value_bytes: 100 }\n    protocols:\n",
            1,
        )
}

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// Two spans; the second carries `attributes`.
fn request(attributes: Vec<KeyValue>) -> ExportTraceServiceRequest {
    let span = |name: &str, attributes| Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        name: name.into(),
        attributes,
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![span("plain", Vec::new()), span("loaded", attributes)],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn too_many() -> Vec<KeyValue> {
    (0..5).map(|i| attribute(&format!("k{i}"), "v")).collect()
}

#[test]
fn requests_over_the_limits_are_refused_with_the_offending_path() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&config(&ports, &sink));
    let ports = opscope.ports();
    let runtime = Runtime::new().expect("client runtime");
    let mut client = runtime
        .block_on(TraceServiceClient::connect(ports.grpc_url()))
        .expect("connect to opscope");

    let status = runtime
        .block_on(client.export(request(too_many())))
        .expect_err("too many attributes");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "resource_spans[0].scope_spans[0].spans[1]: 5 attributes, more than max_attributes 4"
    );

    let long_value = request(vec![attribute("payload", &"x".repeat(101))]);
    let http = http_post(
        &ports.http_addr(),
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &long_value.encode_to_vec(),
    )
    .expect("HTTP request");
    assert_eq!(http.status, 400, "{}", http.text());
    assert!(
        http.text().contains(
            "resource_spans[0].scope_spans[0].spans[1].attributes[0]: value of \"payload\" has 101 bytes, more than max_attribute_value_bytes 100"
        ),
        "{}",
        http.text()
    );

    let metrics = ports.metrics_addr();
    let refused = |family: &str| opscope.metric_value(&metrics, family, &[("reason", "limits")]);
    assert_eq!(refused("opscope_receiver_refused_spans_total"), 4.0);
    assert_eq!(refused("opscope_receiver_refused_requests_total"), 2.0);

    let within = (0..4).map(|i| attribute(&format!("k{i}"), "v")).collect();
    runtime
        .block_on(client.export(request(within)))
        .expect("a request within the limits is accepted");
    assert!(
        sink.wait_for(TIMEOUT, |received| received.span_count() == 2),
        "got {} spans",
        sink.span_count()
    );
}
