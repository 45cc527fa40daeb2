//! One OTLP/JSON request, in the spec's encoding, arrives as the same span.

use opentelemetry_proto::tonic::common::v1::{
    AnyValue, KeyValue as ProtoKeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::trace::v1::{span, status};

use crate::common::{Opscope, OtlpSink, Ports, http_post};
use crate::views::*;
use crate::{DELIVERY_TIMEOUT, EXPORT_TIMEOUT};

/// An OTLP/JSON body in the spec's encoding: hex ids, camelCase fields, enum numbers,
/// 64-bit integers as strings.
const JSON_TRACES: &str = r#"{
  "resourceSpans": [{
    "resource": {
      "attributes": [{ "key": "service.name", "value": { "stringValue": "json-client" } }]
    },
    "scopeSpans": [{
      "scope": { "name": "handwritten", "version": "1.2.3" },
      "spans": [{
        "traceId": "5B8EFFF798038103D269B633813FC60C",
        "spanId": "eee19b7ec3c1b174",
        "parentSpanId": "eee19b7ec3c1b173",
        "name": "GET /orders/{id}",
        "kind": 2,
        "startTimeUnixNano": "1700000000123456789",
        "endTimeUnixNano": "1700000000987654321",
        "attributes": [
          { "key": "http.route", "value": { "stringValue": "/orders/{id}" } },
          { "key": "order.count", "value": { "intValue": "9007199254740993" } },
          { "key": "order.ratio", "value": { "doubleValue": 0.25 } },
          { "key": "order.cached", "value": { "boolValue": true } },
          { "key": "order.tags", "value": { "arrayValue": { "values": [{ "stringValue": "a" }, { "intValue": "2" }] } } },
          { "key": "order.owner", "value": { "kvlistValue": { "values": [{ "key": "team", "value": { "stringValue": "payments" } }] } } }
        ],
        "events": [{
          "timeUnixNano": "1700000000500000000",
          "name": "cache.hit",
          "attributes": [{ "key": "cache.key", "value": { "stringValue": "o-1" } }]
        }],
        "status": { "code": 1 }
      }]
    }]
  }]
}"#;

#[test]
fn otlp_json_traces_arrive_unchanged() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let settings = format!("{{ endpoint: {} }}", sink.endpoint());
    let opscope = Opscope::start(&ports.config("otlp/sink", &settings));
    let ports = opscope.ports();

    let response = http_post(
        &ports.http_addr(),
        "/v1/traces",
        &[("Content-Type", "application/json")],
        JSON_TRACES.as_bytes(),
    )
    .expect("POST /v1/traces");
    assert_eq!(response.status, 200, "{}", response.text());
    let content_type = response.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let body: serde_json::Value = serde_json::from_slice(&response.body).expect("a JSON body");
    assert!(body.is_object(), "{body}");

    assert!(
        sink.wait_for(DELIVERY_TIMEOUT, |received| received.span_count() == 1),
        "the span did not reach the sink"
    );
    let received = sink.received();
    let resource_spans = received.resource_spans().next().expect("resource spans");
    let resource = resource_spans.resource.as_ref().expect("a resource");
    assert_eq!(
        attributes(&resource.attributes),
        Attributes::from([("service.name".into(), Some(string_value("json-client")))])
    );
    let scope = resource_spans.scope_spans[0]
        .scope
        .as_ref()
        .expect("a scope");
    assert_eq!(
        (scope.name.as_str(), scope.version.as_str()),
        ("handwritten", "1.2.3")
    );

    let span = received.spans().next().expect("a span");
    let kv = |key: &str, value| (key.to_owned(), Some(value));
    let expected = SpanView {
        ids: Ids {
            trace_id: hex::decode("5b8efff798038103d269b633813fc60c").unwrap(),
            span_id: hex::decode("eee19b7ec3c1b174").unwrap(),
        },
        parent_span_id: hex::decode("eee19b7ec3c1b173").unwrap(),
        flags: 0,
        name: "GET /orders/{id}".into(),
        kind: span::SpanKind::Server,
        start: 1_700_000_000_123_456_789,
        end: 1_700_000_000_987_654_321,
        attributes: Attributes::from([
            kv("http.route", string_value("/orders/{id}")),
            kv(
                "order.count",
                any_value::Value::IntValue(9_007_199_254_740_993),
            ),
            kv("order.ratio", any_value::Value::DoubleValue(0.25)),
            kv("order.cached", any_value::Value::BoolValue(true)),
            kv(
                "order.tags",
                array([string_value("a"), any_value::Value::IntValue(2)].into_iter()),
            ),
            kv(
                "order.owner",
                any_value::Value::KvlistValue(KeyValueList {
                    values: vec![ProtoKeyValue {
                        key: "team".into(),
                        value: Some(AnyValue {
                            value: Some(string_value("payments")),
                        }),
                        ..Default::default()
                    }],
                }),
            ),
        ]),
        events: vec![(
            1_700_000_000_500_000_000,
            "cache.hit".into(),
            Attributes::from([kv("cache.key", string_value("o-1"))]),
        )],
        status: (status::StatusCode::Ok, String::new()),
    };
    assert_eq!(SpanView::from(span), expected);

    let accepted = opscope.wait_for_metric(
        &ports.metrics_addr(),
        "opscope_receiver_accepted_spans_total",
        &[("receiver", "otlp"), ("transport", "http")],
        1.0,
        EXPORT_TIMEOUT,
    );
    assert_eq!(accepted, 1.0);
}
