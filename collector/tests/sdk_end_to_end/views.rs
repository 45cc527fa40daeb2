//! What is compared between what the SDK sent and what arrived: spans and log
//! records reduced to the fields the tests set, attributes by key.

use std::collections::BTreeMap;

use opentelemetry::logs::AnyValue as LogValue;
use opentelemetry::trace::SpanContext;
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, KeyValue as ProtoKeyValue, any_value,
};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::{Span, SpanFlags, span, status};

/// OTLP span flags: the W3C trace flags, plus "whether the parent is remote is known" (it is
/// not remote: every parent here is local).
pub(crate) fn local_span_flags(context: &SpanContext) -> u32 {
    u32::from(context.trace_flags().to_u8()) | SpanFlags::ContextHasIsRemoteMask as u32
}

pub(crate) fn to_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    bytes.try_into().expect("id of the right length")
}

/// Attributes by key: OTLP gives their order no meaning.
pub(crate) type Attributes = BTreeMap<String, Option<any_value::Value>>;

pub(crate) fn attributes(attributes: &[ProtoKeyValue]) -> Attributes {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone().and_then(|v| v.value)))
        .collect()
}

pub(crate) fn attributes_of(attributes: &[KeyValue]) -> Attributes {
    attributes
        .iter()
        .map(|kv| (kv.key.to_string(), Some(attribute_value(&kv.value))))
        .collect()
}

pub(crate) fn log_attributes_of(attributes: &[(&str, LogValue)]) -> Attributes {
    attributes
        .iter()
        .map(|(key, value)| (key.to_string(), Some(log_value(value))))
        .collect()
}

/// The OTLP form of an SDK attribute value (the kinds this test uses).
pub(crate) fn attribute_value(value: &Value) -> any_value::Value {
    match value {
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::I64(i) => any_value::Value::IntValue(*i),
        Value::F64(f) => any_value::Value::DoubleValue(*f),
        Value::String(s) => any_value::Value::StringValue(s.to_string()),
        Value::Array(Array::String(items)) => array(
            items
                .iter()
                .map(|s| any_value::Value::StringValue(s.to_string())),
        ),
        Value::Array(Array::I64(items)) => {
            array(items.iter().copied().map(any_value::Value::IntValue))
        }
        other => unimplemented!("attribute value {other:?}"),
    }
}

/// The OTLP form of an SDK log value (the kinds this test uses).
pub(crate) fn log_value(value: &LogValue) -> any_value::Value {
    match value {
        LogValue::Boolean(b) => any_value::Value::BoolValue(*b),
        LogValue::Int(i) => any_value::Value::IntValue(*i),
        LogValue::Double(f) => any_value::Value::DoubleValue(*f),
        LogValue::String(s) => any_value::Value::StringValue(s.to_string()),
        other => unimplemented!("log value {other:?}"),
    }
}

pub(crate) fn array(items: impl Iterator<Item = any_value::Value>) -> any_value::Value {
    any_value::Value::ArrayValue(ArrayValue {
        values: items.map(|value| AnyValue { value: Some(value) }).collect(),
    })
}

pub(crate) fn string_value(s: &str) -> any_value::Value {
    any_value::Value::StringValue(s.to_owned())
}

pub(crate) fn sorted<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut items: Vec<T> = items.into_iter().collect();
    items.sort();
    items
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ids {
    pub(crate) trace_id: Vec<u8>,
    pub(crate) span_id: Vec<u8>,
}

impl Ids {
    pub(crate) fn of(context: &SpanContext) -> Self {
        Ids {
            trace_id: context.trace_id().to_bytes().to_vec(),
            span_id: context.span_id().to_bytes().to_vec(),
        }
    }
}

/// The fields of a span this test sets, compared between what was sent and what arrived.
#[derive(Debug, PartialEq)]
pub(crate) struct SpanView {
    pub(crate) ids: Ids,
    pub(crate) parent_span_id: Vec<u8>,
    pub(crate) flags: u32,
    pub(crate) name: String,
    pub(crate) kind: span::SpanKind,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) attributes: Attributes,
    pub(crate) events: Vec<(u64, String, Attributes)>,
    pub(crate) status: (status::StatusCode, String),
}

impl From<&Span> for SpanView {
    fn from(span: &Span) -> Self {
        let status = span.status.clone().unwrap_or_default();
        SpanView {
            ids: Ids {
                trace_id: span.trace_id.clone(),
                span_id: span.span_id.clone(),
            },
            parent_span_id: span.parent_span_id.clone(),
            flags: span.flags,
            name: span.name.clone(),
            kind: span.kind(),
            start: span.start_time_unix_nano,
            end: span.end_time_unix_nano,
            attributes: attributes(&span.attributes),
            events: span
                .events
                .iter()
                .map(|e| (e.time_unix_nano, e.name.clone(), attributes(&e.attributes)))
                .collect(),
            status: (status.code(), status.message),
        }
    }
}

impl Eq for SpanView {}

impl PartialOrd for SpanView {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SpanView {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.ids.cmp(&other.ids)
    }
}

/// The fields of a log record this test sets, compared between what was sent and what arrived.
#[derive(Debug, PartialEq)]
pub(crate) struct LogView {
    pub(crate) time: u64,
    pub(crate) severity_number: i32,
    pub(crate) severity_text: String,
    pub(crate) body: Option<any_value::Value>,
    pub(crate) attributes: Attributes,
    pub(crate) ids: Ids,
    pub(crate) flags: u32,
}

impl From<&LogRecord> for LogView {
    fn from(record: &LogRecord) -> Self {
        LogView {
            time: record.time_unix_nano,
            severity_number: record.severity_number,
            severity_text: record.severity_text.clone(),
            body: record.body.clone().and_then(|body| body.value),
            attributes: attributes(&record.attributes),
            ids: Ids {
                trace_id: record.trace_id.clone(),
                span_id: record.span_id.clone(),
            },
            flags: record.flags,
        }
    }
}

impl Eq for LogView {}

impl PartialOrd for LogView {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LogView {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.time.cmp(&other.time)
    }
}
