//! Reading one component's section: its `type[/name]` key, and its settings typed,
//! validated, and every problem in them reported at its path.

use opscope_model::config::FieldError;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The `type` part of a `type/name` component key.
pub fn component_type(id: &str) -> &str {
    id.split_once('/').map_or(id, |(kind, _)| kind)
}

/// Checks the shape of a component key: a type, optionally `/` and a name.
pub fn check_id(id: &str) -> Result<(), String> {
    let (kind, name) = match id.split_once('/') {
        Some((kind, name)) => (kind, Some(name)),
        None => (id, None),
    };
    if kind.is_empty() || name.is_some_and(str::is_empty) {
        return Err(format!(
            "invalid component id \"{id}\"; write type or type/name"
        ));
    }
    Ok(())
}

/// Most problems reported for one component: each costs a new pass over its settings.
const MAX_ERRORS_PER_COMPONENT: usize = 32;

/// Reads a component's settings and validates them, reporting every problem rather
/// than the first: a setting found wrong (an unknown key, a wrong type, a value its
/// validation refuses) is reported, taken out so the setting falls back to its
/// default, and the settings read again. An empty section (`debug:`) means all
/// defaults.
pub(super) fn read<C: DeserializeOwned>(
    value: Value,
    path: &str,
    validate: impl Fn(&C) -> Result<(), FieldError>,
) -> Result<C, Vec<FieldError>> {
    let mut value = if value.is_null() {
        Value::Object(Default::default())
    } else {
        value
    };
    let mut errors: Vec<FieldError> = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    while errors.len() < MAX_ERRORS_PER_COMPONENT {
        let (field, message) = match serde_path_to_error::deserialize::<_, C>(value.clone()) {
            Ok(config) => match validate(&config) {
                Ok(()) if errors.is_empty() => return Ok(config),
                Ok(()) => break,
                Err(error) => (error.field, error.message),
            },
            Err(error) => (serde_field(error.path()), error.into_inner().to_string()),
        };
        // A required setting taken out for an earlier problem is now missing: that
        // was already said.
        if removed
            .iter()
            .any(|key| message == format!("missing field `{}`", last_key(key)))
        {
            break;
        }
        let at = if field.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{field}")
        };
        if errors.iter().any(|known| known.field == at) {
            break;
        }
        errors.push(FieldError::new(at, message));
        if !remove_setting(&mut value, &field) {
            break;
        }
        removed.push(field);
    }
    Err(errors)
}

/// The dotted path (`tls.ca_file`, `targets[1]`) of a deserialization error; empty
/// for the component itself.
fn serde_field(path: &serde_path_to_error::Path) -> String {
    let text = path.to_string();
    if text == "." { String::new() } else { text }
}

fn last_key(field: &str) -> &str {
    field.rsplit('.').next().unwrap_or(field)
}

/// Takes the setting at a dotted path out of the settings; false when there is no
/// such mapping key (or the path names a list element, whose removal would shift the
/// paths of the problems after it).
fn remove_setting(value: &mut Value, field: &str) -> bool {
    let mut keys = field.split('.').peekable();
    let mut current = value;
    while let Some(key) = keys.next() {
        if key.is_empty() || key.contains('[') {
            return false;
        }
        let Value::Object(map) = current else {
            return false;
        };
        if keys.peek().is_none() {
            return map.remove(key).is_some();
        }
        match map.get_mut(key) {
            Some(next) => current = next,
            None => return false,
        }
    }
    false
}

/// The problem of a component whose type is none of the `known` ones of its kind.
pub(super) fn unknown(what: &str, kind: &str, known: &[&str], path: &str) -> FieldError {
    FieldError::new(
        path,
        format!(
            "unknown {what} type \"{kind}\" (known: {})",
            known.join(", ")
        ),
    )
}
