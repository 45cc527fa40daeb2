//! The `resource` processor: inserts, updates, upserts or deletes resource attributes,
//! with the settings of the OpenTelemetry Collector's processor of the same name.

use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use serde::Deserialize;

use crate::processor::Processor;
use opscope_model::config::{FieldError, Validate};
use opscope_model::telemetry::Telemetry;
use std::time::Instant;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfig {
    pub attributes: Vec<AttributeAction>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributeAction {
    pub key: String,
    #[serde(default)]
    pub value: Option<serde_json::Value>,
    pub action: Action,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Adds the attribute where it is missing.
    Insert,
    /// Changes the attribute where it exists.
    Update,
    /// Sets the attribute everywhere.
    Upsert,
    Delete,
}

impl Validate for ResourceConfig {
    fn validate(&self) -> Result<(), FieldError> {
        for (index, attribute) in self.attributes.iter().enumerate() {
            let field = |name: &str| format!("attributes[{index}].{name}");
            if attribute.key.is_empty() {
                return Err(FieldError::new(field("key"), "must not be empty"));
            }
            match (&attribute.value, attribute.action) {
                (None, Action::Delete) => {}
                (None, action) => {
                    return Err(FieldError::new(
                        field("value"),
                        format!("is required for action {action:?}").to_lowercase(),
                    ));
                }
                (Some(value), _) => {
                    any_value_of(value)
                        .map_err(|message| FieldError::new(field("value"), message))?;
                }
            }
        }
        Ok(())
    }
}

/// Converts a scalar config value to an OTLP attribute value.
fn any_value_of(value: &serde_json::Value) -> Result<AnyValue, String> {
    use serde_json::Value;
    let value = match value {
        Value::String(s) => any_value::Value::StringValue(s.clone()),
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => any_value::Value::IntValue(i),
            None => any_value::Value::DoubleValue(n.as_f64().unwrap_or_default()),
        },
        Value::Null | Value::Array(_) | Value::Object(_) => {
            return Err(format!("must be a string, number or boolean, not {value}"));
        }
    };
    Ok(AnyValue { value: Some(value) })
}

struct CompiledAction {
    key: String,
    value: Option<AnyValue>,
    action: Action,
}

pub struct ResourceProcessor {
    actions: Vec<CompiledAction>,
}

impl ResourceProcessor {
    /// Builds the processor from a validated config.
    pub fn new(config: &ResourceConfig) -> Result<Self, FieldError> {
        config.validate()?;
        let actions = config
            .attributes
            .iter()
            .map(|a| CompiledAction {
                key: a.key.clone(),
                value: a.value.as_ref().and_then(|v| any_value_of(v).ok()),
                action: a.action,
            })
            .collect();
        Ok(Self { actions })
    }

    fn apply(&self, attributes: &mut Vec<KeyValue>) {
        for action in &self.actions {
            let existing = attributes.iter().position(|kv| kv.key == action.key);
            match (action.action, existing) {
                (Action::Delete, Some(index)) => {
                    attributes.remove(index);
                }
                (Action::Update | Action::Upsert, Some(index)) => {
                    if let Some(attribute) = attributes.get_mut(index) {
                        attribute.value = action.value.clone();
                    }
                }
                (Action::Insert | Action::Upsert, None) => attributes.push(KeyValue {
                    key: action.key.clone(),
                    value: action.value.clone(),
                    ..Default::default()
                }),
                (Action::Insert, Some(_)) | (Action::Update | Action::Delete, None) => {}
            }
        }
    }
}

impl<T: Telemetry> Processor<T> for ResourceProcessor {
    fn process(&mut self, mut data: T, _now: Instant, out: &mut Vec<T>) {
        for resource in data.resources_mut() {
            self.apply(&mut resource.attributes);
        }
        out.push(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_testkit::otlp_batches::traces;

    fn config(yaml_like_json: &str) -> ResourceConfig {
        serde_json::from_str(yaml_like_json).expect("test config parses")
    }

    fn attributes(batch: &ExportTraceServiceRequest) -> Vec<(String, String)> {
        let resource = batch.resource_spans[0].resource.as_ref().expect("resource");
        resource
            .attributes
            .iter()
            .map(|kv| {
                (
                    kv.key.clone(),
                    format!("{:?}", kv.value.as_ref().and_then(|v| v.value.clone())),
                )
            })
            .collect()
    }

    #[test]
    fn insert_update_upsert_delete() {
        let mut processor = ResourceProcessor::new(&config(
            r#"{"attributes":[
                {"key":"cluster","value":"prod","action":"insert"},
                {"key":"service.name","value":"ignored","action":"insert"},
                {"key":"team","value":"x","action":"update"},
                {"key":"replicas","value":3,"action":"upsert"},
                {"key":"secret","action":"delete"}]}"#,
        ))
        .expect("valid");
        let mut batch = traces(1, 1);
        let resource = batch.resource_spans[0].resource.as_mut().expect("resource");
        for key in ["service.name", "secret"] {
            resource.attributes.push(KeyValue {
                key: key.into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("orig".into())),
                }),
                ..Default::default()
            });
        }
        let mut out = Vec::new();
        Processor::process(&mut processor, batch, Instant::now(), &mut out);
        let got = attributes(&out[0]);
        let keys: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["service.name", "cluster", "replicas"]);
        assert!(got[0].1.contains("orig"));
        assert!(got[2].1.contains("IntValue(3)"));
    }

    #[test]
    fn missing_value_names_the_field() {
        let err = config(r#"{"attributes":[{"key":"a","action":"upsert"}]}"#)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "attributes[0].value");
    }
}
