//! OTLP attribute values, built the few ways the generators need them.

use opscope_proto::otlp::common::v1::{AnyValue, ArrayValue, KeyValue, any_value::Value};

pub(crate) fn attribute(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

pub(crate) fn text(key: &str, value: &str) -> KeyValue {
    attribute(key, Value::StringValue(value.to_string()))
}

pub(crate) fn int(key: &str, value: i64) -> KeyValue {
    attribute(key, Value::IntValue(value))
}

pub(crate) fn strings(items: &[&str]) -> Value {
    Value::ArrayValue(ArrayValue {
        values: items
            .iter()
            .map(|s| AnyValue {
                value: Some(Value::StringValue((*s).to_string())),
            })
            .collect(),
    })
}
