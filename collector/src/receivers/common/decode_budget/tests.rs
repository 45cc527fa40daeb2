use opscope_model::Telemetry;
use opscope_model::decoded_size::DecodedSize;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint, exponential_histogram_data_point::Buckets, metric::Data,
    summary_data_point::ValueAtQuantile,
};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use opscope_proto::prost::Message;

use super::*;
use crate::consumer::OtlpBatch;

fn text(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(value.into())),
    })
}

fn attribute(key: &str, value: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value,
        ..Default::default()
    }
}

/// Attributes of every value shape, arrays and maps nested.
fn attributes() -> Vec<KeyValue> {
    let nested = AnyValue {
        value: Some(any_value::Value::KvlistValue(KeyValueList {
            values: vec![
                attribute("inner", text("value")),
                attribute(
                    "list",
                    Some(AnyValue {
                        value: Some(any_value::Value::ArrayValue(ArrayValue {
                            values: vec![text("a").unwrap(), text("bc").unwrap()],
                        })),
                    }),
                ),
            ],
        })),
    };
    vec![
        attribute("k8s.object.name", text("cache-7")),
        attribute(
            "bytes",
            Some(AnyValue {
                value: Some(any_value::Value::BytesValue(vec![1, 2, 3])),
            }),
        ),
        attribute(
            "count",
            Some(AnyValue {
                value: Some(any_value::Value::IntValue(7)),
            }),
        ),
        attribute("nested", Some(nested)),
        attribute("empty", None),
    ]
}

fn resource() -> Option<Resource> {
    Some(Resource {
        attributes: attributes(),
        entity_refs: vec![EntityRef {
            schema_url: "https://example.com".into(),
            r#type: "k8s.pod".into(),
            id_keys: vec!["k8s.pod.uid".into()],
            description_keys: vec!["k8s.pod.name".into(), "k8s.namespace.name".into()],
        }],
        ..Default::default()
    })
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "controller-runtime".into(),
        version: "0.19.0".into(),
        attributes: attributes(),
        ..Default::default()
    })
}

fn traces() -> ExportTraceServiceRequest {
    let span = Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        parent_span_id: vec![3; 8],
        trace_state: "vendor=x".into(),
        name: "reconcile".into(),
        attributes: attributes(),
        events: vec![span::Event {
            name: "requeue".into(),
            attributes: attributes(),
            ..Default::default()
        }],
        links: vec![span::Link {
            trace_id: vec![4; 16],
            span_id: vec![5; 8],
            attributes: attributes(),
            ..Default::default()
        }],
        status: Some(Status {
            message: "conflict".into(),
            code: 2,
        }),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: resource(),
            scope_spans: vec![ScopeSpans {
                scope: scope(),
                spans: vec![span.clone(), Span::default(), span],
                schema_url: "https://opentelemetry.io/schemas/1.26.0".into(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn logs() -> ExportLogsServiceRequest {
    let record = LogRecord {
        severity_text: "INFO".into(),
        body: text(r#"{"msg":"Reconciling","reconcileID":"1"}"#),
        attributes: attributes(),
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        event_name: "reconcile".into(),
        ..Default::default()
    };
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: resource(),
            scope_logs: vec![ScopeLogs {
                scope: scope(),
                log_records: vec![record, LogRecord::default()],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn metrics() -> ExportMetricsServiceRequest {
    let exemplar = Exemplar {
        filtered_attributes: attributes(),
        span_id: vec![2; 8],
        trace_id: vec![1; 16],
        ..Default::default()
    };
    let number = NumberDataPoint {
        attributes: attributes(),
        exemplars: vec![exemplar.clone()],
        ..Default::default()
    };
    let metric = |name: &str, data| Metric {
        name: name.into(),
        description: "what it counts".into(),
        unit: "1".into(),
        metadata: attributes(),
        data: Some(data),
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: resource(),
            scope_metrics: vec![ScopeMetrics {
                scope: scope(),
                metrics: vec![
                    metric(
                        "workqueue_depth",
                        Data::Gauge(Gauge {
                            data_points: vec![number.clone()],
                        }),
                    ),
                    metric(
                        "reconcile_total",
                        Data::Sum(Sum {
                            data_points: vec![number.clone(), number],
                            ..Default::default()
                        }),
                    ),
                    metric(
                        "reconcile_time_seconds",
                        Data::Histogram(Histogram {
                            data_points: vec![HistogramDataPoint {
                                attributes: attributes(),
                                bucket_counts: vec![1, 2, 3, 4],
                                explicit_bounds: vec![0.1, 1.0, 10.0],
                                exemplars: vec![exemplar.clone()],
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
                    ),
                    metric(
                        "latency",
                        Data::ExponentialHistogram(ExponentialHistogram {
                            data_points: vec![ExponentialHistogramDataPoint {
                                attributes: attributes(),
                                positive: Some(Buckets {
                                    offset: 1,
                                    bucket_counts: vec![1, 300, 70_000],
                                }),
                                negative: Some(Buckets::default()),
                                exemplars: vec![exemplar],
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
                    ),
                    metric(
                        "rpc",
                        Data::Summary(Summary {
                            data_points: vec![SummaryDataPoint {
                                attributes: attributes(),
                                quantile_values: vec![ValueAtQuantile::default(); 3],
                                ..Default::default()
                            }],
                        }),
                    ),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The census of a request's protobuf bytes is what its decoded form measures.
fn census_matches_the_decoded_request<T: OtlpBatch>(request: &T) {
    let census = Census::of(T::KIND, WireFormat::Protobuf, &request.encode_to_vec()).unwrap();
    assert_eq!(census.items, request.item_count() as u64);
    assert_eq!(census.decoded_bytes, request.resource_data().heap_size());
    assert_eq!(census.decoded_bytes, request.memory_size());
}

#[test]
fn the_protobuf_census_is_the_decoded_size_of_every_signal() {
    census_matches_the_decoded_request(&traces());
    census_matches_the_decoded_request(&logs());
    census_matches_the_decoded_request(&metrics());
    census_matches_the_decoded_request(&ExportTraceServiceRequest::default());
}

/// JSON spells ids in hex and numbers as text: its census counts at least what the
/// request decodes to, and not much more.
fn json_census_bounds_the_decoded_request<T: OtlpBatch>(request: &T) {
    let body = serde_json::to_vec(request).unwrap();
    let census = Census::of(T::KIND, WireFormat::Json, &body).unwrap();
    let decoded = request.resource_data().heap_size();
    assert_eq!(census.items, request.item_count() as u64);
    assert!(
        census.decoded_bytes >= decoded && census.decoded_bytes < decoded + decoded / 2,
        "{} against {decoded}",
        census.decoded_bytes
    );
}

#[test]
fn the_json_census_bounds_the_decoded_size_of_every_signal() {
    json_census_bounds_the_decoded_request(&traces());
    json_census_bounds_the_decoded_request(&logs());
    json_census_bounds_the_decoded_request(&metrics());
}

/// `ld(field, payload)`: a length-delimited field.
fn length_delimited(field: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![(field << 3) | 2];
    let mut length = payload.len();
    while length >= 0x80 {
        out.push((length as u8 & 0x7f) | 0x80);
        length >>= 7;
    }
    out.push(length as u8);
    out.extend_from_slice(payload);
    out
}

#[test]
fn two_million_empty_spans_are_refused_before_decoding() {
    // A ResourceSpans holding one ScopeSpans of 2 M empty spans: 3.8 MiB.
    let spans = [0x12u8, 0x00].repeat(2_000_000);
    let body = length_delimited(1, &length_delimited(2, &spans));
    let census = Census::of(TelemetryKind::Traces, WireFormat::Protobuf, &body).unwrap();
    assert_eq!(census.items, 2_000_000);
    assert!(census.decoded_bytes > 400 * MIB, "{census:?}");
    assert_eq!(
        census.check(&InputLimits::default(), TelemetryKind::Traces),
        Err("the request holds 2000000 spans, more than limits.max_items 100000".into())
    );
    let generous = InputLimits {
        max_items: 10_000_000,
        ..Default::default()
    };
    let refused = census.check(&generous, TelemetryKind::Traces).unwrap_err();
    assert!(
        refused.starts_with("the request would take ")
            && refused.ends_with(" MiB once decoded, more than limits.max_decoded_size_mib 128"),
        "{refused}"
    );
}

#[test]
fn nested_values_count_in_the_decoded_size() {
    // One attribute whose array holds 1 M empty values: 2 MiB on the wire.
    let values = [0x0au8, 0x00].repeat(1_000_000);
    let array = length_delimited(5, &values);
    let key_value = length_delimited(2, &array);
    let span = [length_delimited(9, &key_value), vec![0x0a, 16], vec![1; 16]].concat();
    let body = length_delimited(1, &length_delimited(2, &length_delimited(2, &span)));
    let census = Census::of(TelemetryKind::Traces, WireFormat::Protobuf, &body).unwrap();
    assert_eq!(census.items, 1);
    let decoded = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
    assert_eq!(census.decoded_bytes, decoded.memory_size());
    assert!(
        census
            .check(&InputLimits::default(), TelemetryKind::Traces)
            .is_ok()
    );
    assert!(census.decoded_bytes > 30 * MIB);
}

#[test]
fn unknown_fields_and_groups_are_skipped_as_prost_skips_them() {
    let request = traces();
    let mut body = request.encode_to_vec();
    // Field 9 as a varint, a fixed32, a group holding a length-delimited field.
    body.extend_from_slice(&[0x48, 0x01, 0x4d, 0, 0, 0, 0, 0x4b, 0x0a, 0x01, 0x00, 0x4c]);
    assert_eq!(
        ExportTraceServiceRequest::decode(body.as_slice()).unwrap(),
        request
    );
    let census = Census::of(TelemetryKind::Traces, WireFormat::Protobuf, &body).unwrap();
    assert_eq!(census.decoded_bytes, request.memory_size());
}

#[test]
fn malformed_bytes_are_undecodable() {
    for (body, reason) in [
        (&[0x0a, 0x05, 0x01][..], "a field runs past the end"),
        (&[0x0a, 0xff][..], "a varint runs past the end"),
        (&[0x0f][..], "invalid wire type"),
        (&[0x0c][..], "invalid wire type"),
        (&[0x0b, 0x0a][..], "a varint runs past the end"),
    ] {
        assert_eq!(
            Census::of(TelemetryKind::Traces, WireFormat::Protobuf, body),
            Err(CensusError::new(reason)),
            "{body:?}"
        );
        assert!(ExportTraceServiceRequest::decode(body).is_err(), "{body:?}");
    }
    // A log body of arrays nested 200 deep.
    let value = (0..200).fold(Vec::new(), |inner, _| {
        length_delimited(5, &length_delimited(1, &inner))
    });
    let record = length_delimited(5, &value);
    let body = length_delimited(1, &length_delimited(2, &length_delimited(2, &record)));
    assert_eq!(
        Census::of(TelemetryKind::Logs, WireFormat::Protobuf, &body),
        Err(CensusError::new("messages nested too deeply"))
    );
    assert!(ExportLogsServiceRequest::decode(body.as_slice()).is_err());
    assert!(
        Census::of(
            TelemetryKind::Traces,
            WireFormat::Json,
            b"{\"resourceSpans\": ["
        )
        .is_err()
    );
}

#[test]
fn json_of_many_empty_spans_is_counted_without_building_them() {
    let spans = vec!["{}"; 500_000].join(",");
    let body = format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{spans}]}}]}}]}}"#);
    let census = Census::of(TelemetryKind::Traces, WireFormat::Json, body.as_bytes()).unwrap();
    assert_eq!(census.items, 500_000);
    assert!(
        census
            .check(&InputLimits::default(), TelemetryKind::Traces)
            .is_err()
    );
}

mod properties {
    use opscope_testkit::mutate::mutated_bytes;
    use proptest::prelude::*;

    use super::*;

    /// Whatever prost decodes, the census reads too, and counts at least what the
    /// decoded request takes (a string repeated on the wire counts each time; prost
    /// keeps the last).
    fn census_covers<T: OtlpBatch>(body: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(decoded) = T::decode(body) {
            let census = Census::of(T::KIND, WireFormat::Protobuf, body);
            prop_assert!(census.is_ok(), "{census:?}");
            let census = census.unwrap_or_default();
            prop_assert!(census.items >= decoded.item_count() as u64);
            prop_assert!(census.decoded_bytes >= decoded.memory_size());
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn the_census_covers_every_request_prost_decodes(
            body in mutated_bytes(vec![
                traces().encode_to_vec(),
                logs().encode_to_vec(),
                metrics().encode_to_vec(),
            ])
        ) {
            census_covers::<ExportTraceServiceRequest>(&body)?;
            census_covers::<ExportLogsServiceRequest>(&body)?;
            census_covers::<ExportMetricsServiceRequest>(&body)?;
        }
    }
}
