//! OTLP attributes read with the same key rules as structured log lines, so an
//! operator logging through an OpenTelemetry bridge is recognised like one logging
//! JSON to stdout.

use opscope_proto::otlp::common::v1::{KeyValue, any_value::Value};

use super::formats::{FieldValue, LogFacts, facts_from_fields};

pub fn facts_from_attributes(attributes: &[KeyValue], facts: &mut LogFacts) {
    facts_from_fields(attributes.iter().filter_map(field), facts);
}

fn field(kv: &KeyValue) -> Option<(&str, FieldValue<'_>)> {
    Some((
        kv.key.as_str(),
        field_value(kv.value.as_ref()?.value.as_ref()?)?,
    ))
}

/// Arrays, bytes and dictionary references are not read by any rule.
fn field_value(value: &Value) -> Option<FieldValue<'_>> {
    Some(match value {
        Value::StringValue(s) => FieldValue::Str(s),
        Value::IntValue(i) => FieldValue::Int(*i),
        Value::DoubleValue(d) => FieldValue::Float(*d),
        Value::BoolValue(b) => FieldValue::Bool(*b),
        Value::KvlistValue(list) => {
            FieldValue::Object(list.values.iter().filter_map(field).collect())
        }
        Value::ArrayValue(_) | Value::BytesValue(_) | Value::StringValueStrindex(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::attributes::set;
    use opscope_proto::otlp::common::v1::{AnyValue, KeyValueList};

    #[test]
    fn controller_runtime_keys_in_attributes() {
        let mut attributes = Vec::new();
        set(
            &mut attributes,
            "controllerKind",
            Value::StringValue("RayJob".into()),
        );
        set(
            &mut attributes,
            "reconcileID",
            Value::StringValue("4c2a".into()),
        );
        let object = KeyValueList {
            values: vec![
                KeyValue {
                    key: "name".into(),
                    value: Some(AnyValue {
                        value: Some(Value::StringValue("train".into())),
                    }),
                    ..Default::default()
                },
                KeyValue {
                    key: "namespace".into(),
                    value: Some(AnyValue {
                        value: Some(Value::StringValue("ml".into())),
                    }),
                    ..Default::default()
                },
            ],
        };
        set(&mut attributes, "RayJob", Value::KvlistValue(object));
        let mut facts = LogFacts::default();
        facts_from_attributes(&attributes, &mut facts);
        assert_eq!(facts.kind.as_deref(), Some("RayJob"));
        assert_eq!(facts.reconcile_id.as_deref(), Some("4c2a"));
        assert_eq!(
            (facts.namespace.as_deref(), facts.name.as_deref()),
            (Some("ml"), Some("train"))
        );
    }
}
