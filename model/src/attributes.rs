//! Reading and writing OTLP attribute lists by key.

use opscope_proto::otlp::common::v1::{AnyValue, ArrayValue, KeyValue, any_value::Value};

pub fn get<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

/// A string attribute, or an integer written as text.
pub fn get_str<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    as_str(get(attributes, key))
}

/// An integer attribute, also when written as a string.
pub fn get_i64(attributes: &[KeyValue], key: &str) -> Option<i64> {
    as_i64(get(attributes, key))
}

pub fn get_f64(attributes: &[KeyValue], key: &str) -> Option<f64> {
    as_f64(get(attributes, key))
}

pub fn get_bool(attributes: &[KeyValue], key: &str) -> Option<bool> {
    as_bool(get(attributes, key))
}

/// The strings of an array attribute (a single string counts as one).
pub fn get_strings(attributes: &[KeyValue], key: &str) -> Vec<String> {
    as_strings(get(attributes, key))
}

/// A non-empty string value.
pub fn as_str(value: Option<&Value>) -> Option<&str> {
    match value? {
        Value::StringValue(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// An integer value, also when written as a string or a whole double.
pub fn as_i64(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::IntValue(i) => Some(*i),
        Value::StringValue(s) => s.trim().parse().ok(),
        Value::DoubleValue(d) if d.fract() == 0.0 => Some(*d as i64),
        _ => None,
    }
}

pub fn as_f64(value: Option<&Value>) -> Option<f64> {
    match value? {
        Value::DoubleValue(d) => Some(*d),
        Value::IntValue(i) => Some(*i as f64),
        Value::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub fn as_bool(value: Option<&Value>) -> Option<bool> {
    match value? {
        Value::BoolValue(b) => Some(*b),
        Value::StringValue(s) => s.parse().ok(),
        _ => None,
    }
}

/// The strings of an array value (a single string counts as one).
pub fn as_strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::ArrayValue(array)) => array
            .values
            .iter()
            .filter_map(|v| match &v.value {
                Some(Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        Some(Value::StringValue(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

pub fn string_value(s: impl Into<String>) -> Value {
    Value::StringValue(s.into())
}

pub fn array_value(items: impl IntoIterator<Item = String>) -> Value {
    Value::ArrayValue(ArrayValue {
        values: items
            .into_iter()
            .map(|s| AnyValue {
                value: Some(Value::StringValue(s)),
            })
            .collect(),
    })
}

/// Sets `key` to `value`, replacing an existing value.
pub fn set(attributes: &mut Vec<KeyValue>, key: &str, value: Value) {
    match attributes.iter_mut().find(|kv| kv.key == key) {
        Some(existing) => existing.value = Some(AnyValue { value: Some(value) }),
        None => push(attributes, key, value),
    }
}

/// Sets `key` only where it is missing.
pub fn insert(attributes: &mut Vec<KeyValue>, key: &str, value: Value) {
    if !attributes.iter().any(|kv| kv.key == key) {
        push(attributes, key, value);
    }
}

/// Appends `key` without looking for it: the caller knows it is missing.
fn push(attributes: &mut Vec<KeyValue>, key: &str, value: Value) {
    attributes.push(KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    });
}

pub fn set_str(attributes: &mut Vec<KeyValue>, key: &str, value: &str) {
    set(attributes, key, string_value(value));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replaces_and_insert_keeps() {
        let mut attributes = Vec::new();
        set_str(&mut attributes, "a", "1");
        set_str(&mut attributes, "a", "2");
        insert(&mut attributes, "a", string_value("3"));
        insert(&mut attributes, "b", Value::IntValue(7));
        assert_eq!(get_str(&attributes, "a"), Some("2"));
        assert_eq!(get_i64(&attributes, "b"), Some(7));
        assert_eq!(get_i64(&attributes, "a"), Some(2));
        assert_eq!(attributes.len(), 2);
    }
}
