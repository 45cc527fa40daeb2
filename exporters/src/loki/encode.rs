//! Log records as a Loki push request: entries grouped into streams by label set and
//! sorted by time, the records' ids as structured metadata, the body snappy-compressed.

use std::collections::BTreeMap;

use opscope_model::attributes::get_str;
use opscope_model::kubernetes::ObjectRef;
use opscope_model::semconv;
use opscope_model::timestamp::NANOS_PER_SECOND;
use opscope_proto::loki::{EntryAdapter, LabelPairAdapter, PushRequest, StreamAdapter, Timestamp};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use opscope_proto::otlp::logs::v1::LogRecord;
use opscope_proto::prost::Message;

use super::labels::{LabelSet, LabelValues, StreamLabel, sanitize};

/// The longest structured metadata value kept, in characters.
const MAX_METADATA_VALUE_CHARS: usize = 512;

/// Entries grouped by stream, in a stable stream order.
#[derive(Default)]
pub struct Streams(BTreeMap<LabelSet, Vec<EntryAdapter>>);

impl Streams {
    pub fn add(&mut self, labels: LabelSet, entry: EntryAdapter) {
        self.0.entry(labels).or_default().push(entry);
    }

    /// The streams, each with its entries in time order (equal times keep their order).
    pub fn into_push_request(self) -> PushRequest {
        let streams = self
            .0
            .into_iter()
            .map(|(labels, mut entries)| {
                entries.sort_by_key(|entry| entry.timestamp.map(|t| (t.seconds, t.nanos)));
                StreamAdapter {
                    labels: labels.to_loki_syntax(),
                    entries,
                    hash: 0,
                }
            })
            .collect();
        PushRequest { streams }
    }
}

/// The request as Loki reads it: protobuf in the snappy block format.
pub fn snappy_body(request: &PushRequest) -> Result<Vec<u8>, snap::Error> {
    snap::raw::Encoder::new().compress_vec(&request.encode_to_vec())
}

/// Every log record of `request` as an entry; records without any time get
/// `fallback_time` (nanoseconds since the epoch).
pub fn logs_push_request(
    request: &ExportLogsServiceRequest,
    labels: &[StreamLabel],
    fallback_time: u64,
) -> PushRequest {
    let mut streams = Streams::default();
    for resource_logs in &request.resource_logs {
        let resource = resource_logs
            .resource
            .as_ref()
            .map(|resource| resource.attributes.as_slice())
            .unwrap_or_default();
        let operator_name = get_str(resource, semconv::OPERATOR_NAME).unwrap_or_default();
        let k8s_namespace = get_str(resource, semconv::K8S_NAMESPACE_NAME).unwrap_or_default();
        let records = resource_logs
            .scope_logs
            .iter()
            .flat_map(|scope| &scope.log_records);
        for record in records {
            let level = level_of(record);
            let values = LabelValues {
                operator_name,
                k8s_namespace,
                level: &level,
            };
            streams.add(
                LabelSet::select(labels, &values),
                log_entry(record, fallback_time),
            );
        }
    }
    streams.into_push_request()
}

fn log_entry(record: &LogRecord, fallback_time: u64) -> EntryAdapter {
    let time = [record.time_unix_nano, record.observed_time_unix_nano]
        .into_iter()
        .find(|time| *time != 0)
        .unwrap_or(fallback_time);
    EntryAdapter {
        timestamp: Some(timestamp(time)),
        line: body_text(record.body.as_ref()),
        structured_metadata: log_metadata(record),
    }
}

/// What identifies the record, beside its stream.
fn log_metadata(record: &LogRecord) -> Vec<LabelPairAdapter> {
    let text = |key: &str| {
        get_str(&record.attributes, key)
            .unwrap_or_default()
            .to_string()
    };
    metadata([
        ("reconcile_id", text(semconv::RECONCILE_ID)),
        ("trace_id", hex_id(&record.trace_id)),
        ("span_id", hex_id(&record.span_id)),
        ("k8s_object", object_of(&record.attributes)),
        ("controller", text(semconv::CONTROLLER)),
    ])
}

/// Name/value pairs with their values sanitised; pairs without a value are left out.
pub fn metadata<const N: usize>(pairs: [(&str, String); N]) -> Vec<LabelPairAdapter> {
    pairs
        .into_iter()
        .map(|(name, value)| (name, sanitize(&value, MAX_METADATA_VALUE_CHARS)))
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| LabelPairAdapter {
            name: name.to_string(),
            value,
        })
        .collect()
}

/// `Kind namespace/name` of the reconciled object, empty when the record names none.
fn object_of(attributes: &[KeyValue]) -> String {
    let text = |key: &str| get_str(attributes, key).unwrap_or_default().into();
    let object = ObjectRef {
        kind: text(semconv::OBJECT_KIND),
        resource: text(semconv::OBJECT_RESOURCE),
        namespace: text(semconv::OBJECT_NAMESPACE),
        name: text(semconv::OBJECT_NAME),
        ..ObjectRef::default()
    };
    if object.name.is_empty() {
        String::new()
    } else {
        object.display()
    }
}

/// The level label: from the severity number when set, else from the text.
fn level_of(record: &LogRecord) -> String {
    let level = match record.severity_number {
        1..=4 => "trace",
        5..=8 => "debug",
        9..=12 => "info",
        13..=16 => "warn",
        17..=20 => "error",
        21..=24 => "fatal",
        _ => return level_from_text(&record.severity_text),
    };
    level.to_string()
}

fn level_from_text(text: &str) -> String {
    let lowercase = text.trim().to_lowercase();
    match lowercase.as_str() {
        "warning" => "warn".to_string(),
        "err" => "error".to_string(),
        _ => lowercase,
    }
}

/// A string body as it is; any other body as JSON.
fn body_text(body: Option<&AnyValue>) -> String {
    match body.and_then(|body| body.value.as_ref()) {
        None => String::new(),
        Some(Value::StringValue(text)) => text.clone(),
        Some(other) => json_of(other).to_string(),
    }
}

fn json_of(value: &Value) -> serde_json::Value {
    match value {
        Value::StringValue(text) => text.clone().into(),
        Value::BoolValue(flag) => (*flag).into(),
        Value::IntValue(number) => (*number).into(),
        Value::DoubleValue(number) => serde_json::Number::from_f64(*number)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
        Value::ArrayValue(array) => array.values.iter().map(any_json).collect(),
        Value::KvlistValue(list) => list
            .values
            .iter()
            .map(|kv| {
                (
                    kv.key.clone(),
                    kv.value.as_ref().map_or(serde_json::Value::Null, any_json),
                )
            })
            .collect(),
        Value::BytesValue(bytes) => hex::encode(bytes).into(),
        // An index into a profile's string table, which logs do not carry.
        Value::StringValueStrindex(_) => serde_json::Value::Null,
    }
}

fn any_json(value: &AnyValue) -> serde_json::Value {
    value
        .value
        .as_ref()
        .map_or(serde_json::Value::Null, json_of)
}

/// A trace or span id in lowercase hex; empty when the id is unset (all zero).
fn hex_id(id: &[u8]) -> String {
    if id.iter().all(|byte| *byte == 0) {
        String::new()
    } else {
        hex::encode(id)
    }
}

/// A protobuf timestamp from nanoseconds since the epoch.
pub fn timestamp(unix_nanos: u64) -> Timestamp {
    // Both fit: u64::MAX / 10^9 is below i64::MAX, and the remainder below 10^9.
    Timestamp {
        seconds: (unix_nanos / NANOS_PER_SECOND) as i64,
        nanos: (unix_nanos % NANOS_PER_SECOND) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_proto::otlp::common::v1::{ArrayValue, KeyValueList};
    use opscope_proto::otlp::logs::v1::{ResourceLogs, ScopeLogs};
    use opscope_proto::otlp::resource::v1::Resource;

    fn text_attribute(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.into())),
            }),
            ..Default::default()
        }
    }

    fn record(time: u64, severity_number: i32, body: &str) -> LogRecord {
        LogRecord {
            time_unix_nano: time,
            severity_number,
            body: Some(AnyValue {
                value: Some(Value::StringValue(body.into())),
            }),
            ..Default::default()
        }
    }

    fn request(operator: &str, records: Vec<LogRecord>) -> ResourceLogs {
        ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    text_attribute(semconv::OPERATOR_NAME, operator),
                    text_attribute(semconv::K8S_NAMESPACE_NAME, "ops"),
                    text_attribute("k8s.pod.name", "ray-operator-7d9f"),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn push(resource_logs: Vec<ResourceLogs>) -> PushRequest {
        let request = ExportLogsServiceRequest { resource_logs };
        logs_push_request(&request, &StreamLabel::DEFAULT_SET, 42)
    }

    fn lines(stream: &StreamAdapter) -> Vec<&str> {
        stream.entries.iter().map(|e| e.line.as_str()).collect()
    }

    #[test]
    fn streams_grouped_by_label_set_with_entries_in_time_order() {
        let pushed = push(vec![
            request(
                "ray",
                vec![
                    record(30, 9, "c"),
                    record(10, 9, "a"),
                    record(20, 17, "err"),
                ],
            ),
            request("ray", vec![record(20, 10, "b")]),
            request("kuberay", vec![record(5, 9, "k")]),
        ]);
        let labels: Vec<&str> = pushed.streams.iter().map(|s| s.labels.as_str()).collect();
        assert_eq!(
            labels,
            [
                r#"{k8s_namespace="ops", level="error", operator_name="ray"}"#,
                r#"{k8s_namespace="ops", level="info", operator_name="kuberay"}"#,
                r#"{k8s_namespace="ops", level="info", operator_name="ray"}"#,
            ]
        );
        assert_eq!(lines(&pushed.streams[2]), ["a", "b", "c"]);
    }

    #[test]
    fn ids_go_to_structured_metadata_not_labels() {
        let mut with_ids = record(1, 9, "reconciled");
        with_ids.trace_id = vec![0xab; 16];
        with_ids.span_id = vec![0x01; 8];
        with_ids.attributes = vec![
            text_attribute(semconv::RECONCILE_ID, "5f1c"),
            text_attribute(semconv::OBJECT_KIND, "RayJob"),
            text_attribute(semconv::OBJECT_NAMESPACE, "ml"),
            text_attribute(semconv::OBJECT_NAME, "train"),
            text_attribute(semconv::CONTROLLER, "rayjob"),
        ];
        let pushed = push(vec![request("ray", vec![with_ids, record(2, 9, "plain")])]);
        let [stream] = pushed.streams.as_slice() else {
            panic!("one stream expected: {pushed:?}");
        };
        let pairs: Vec<(&str, &str)> = stream.entries[0]
            .structured_metadata
            .iter()
            .map(|pair| (pair.name.as_str(), pair.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("reconcile_id", "5f1c"),
                ("trace_id", "abababababababababababababababab"),
                ("span_id", "0101010101010101"),
                ("k8s_object", "RayJob ml/train"),
                ("controller", "rayjob"),
            ]
        );
        assert!(stream.entries[1].structured_metadata.is_empty());
        assert!(!stream.labels.contains("5f1c") && !stream.labels.contains("train"));
    }

    #[test]
    fn time_falls_back_to_observed_then_to_now() {
        let mut observed = record(0, 9, "observed");
        observed.observed_time_unix_nano = 3_000_000_007;
        let pushed = push(vec![request("ray", vec![observed, record(0, 9, "none")])]);
        let times: Vec<_> = pushed.streams[0]
            .entries
            .iter()
            .map(|e| e.timestamp)
            .collect();
        assert_eq!(
            times,
            [
                Some(Timestamp {
                    seconds: 0,
                    nanos: 42
                }),
                Some(Timestamp {
                    seconds: 3,
                    nanos: 7
                }),
            ]
        );
    }

    #[test]
    fn level_from_number_else_from_text() {
        let level = |number: i32, text: &str| {
            let mut record = record(1, number, "");
            record.severity_text = text.into();
            level_of(&record)
        };
        assert_eq!(level(13, "whatever"), "warn");
        assert_eq!(level(21, ""), "fatal");
        assert_eq!(level(0, "WARNING"), "warn");
        assert_eq!(level(0, "Info"), "info");
        assert_eq!(level(0, ""), "");
    }

    #[test]
    fn non_string_bodies_are_json() {
        let list = Value::KvlistValue(KeyValueList {
            values: vec![
                text_attribute("msg", "done"),
                KeyValue {
                    key: "n".into(),
                    value: Some(AnyValue {
                        value: Some(Value::ArrayValue(ArrayValue {
                            values: vec![
                                AnyValue {
                                    value: Some(Value::IntValue(1)),
                                },
                                AnyValue {
                                    value: Some(Value::DoubleValue(f64::NAN)),
                                },
                                AnyValue {
                                    value: Some(Value::BytesValue(vec![0x0f, 0xa0])),
                                },
                            ],
                        })),
                    }),
                    ..Default::default()
                },
            ],
        });
        let body = AnyValue { value: Some(list) };
        assert_eq!(
            body_text(Some(&body)),
            r#"{"msg":"done","n":[1,null,"0fa0"]}"#
        );
        assert_eq!(body_text(None), "");
    }

    #[test]
    fn body_is_snappy_block_format() {
        let pushed = push(vec![request("ray", vec![record(1, 9, &"x".repeat(200))])]);
        let body = snappy_body(&pushed).expect("compresses");
        assert!(body.len() < 100, "repetition compressed: {}", body.len());
        assert!(
            !body.starts_with(b"\xff\x06\x00\x00sNaPpY"),
            "not the framed format"
        );
        let raw = snap::raw::Decoder::new()
            .decompress_vec(&body)
            .expect("block format");
        assert_eq!(raw, pushed.encode_to_vec());
    }
}
