//! Shared pieces of component configuration: duration values, field errors and the
//! check every component's settings get.

use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// A problem with one setting of a component, named by its path inside the component
/// (the config loader prefixes the component's own path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error seen from the enclosing section: `section.field`.
    pub fn within(self, section: &str) -> Self {
        Self {
            field: format!("{section}.{}", self.field),
            message: self.message,
        }
    }
}

/// The check a component's settings get once read: the first problem found, named
/// by its path inside the component.
pub trait Validate {
    fn validate(&self) -> Result<(), FieldError>;
}

/// Settings kept boxed (a large section in an enum of components) check as they are.
impl<T: Validate> Validate for Box<T> {
    fn validate(&self) -> Result<(), FieldError> {
        (**self).validate()
    }
}

/// Checks a `host:port` listen address.
pub fn check_listen_address(address: &str) -> Result<(), String> {
    let port = address
        .rsplit_once(':')
        .map(|(host, port)| (host, port.parse::<u16>()));
    match port {
        Some((host, Ok(_))) if !host.is_empty() => Ok(()),
        _ => Err(format!(
            "invalid address \"{address}\"; write host:port, e.g. 127.0.0.1:4317"
        )),
    }
}

/// Checks that a duration setting is above zero.
pub fn positive(field: &str, value: Duration) -> Result<(), FieldError> {
    if value.is_zero() {
        return Err(FieldError::new(field, "must be longer than 0"));
    }
    Ok(())
}

/// Checks that a share setting lies in (0, 1].
pub fn share(field: &str, value: f64) -> Result<(), FieldError> {
    if !(value > 0.0 && value <= 1.0) {
        return Err(FieldError::new(
            field,
            format!("{value} is not a share between 0 (excluded) and 1"),
        ));
    }
    Ok(())
}

/// Reads a duration written as the OpenTelemetry Collector writes them (`200ms`,
/// `5s`, `1m30s`); a bare `0` means zero.
pub fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Number(0) => Ok(Duration::ZERO),
        Raw::Number(n) => Err(de::Error::custom(format!(
            "duration {n} has no unit; write it like \"{n}s\" or \"{n}ms\""
        ))),
        Raw::Text(text) => parse_duration(&text).map_err(de::Error::custom),
    }
}

/// As [`duration`], for a setting whose default depends on other settings: absent is
/// `None`.
pub fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text)
        .map_err(|err| format!("invalid duration \"{text}\": {err} (examples: 200ms, 5s, 1m)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "duration")]
        value: Duration,
    }

    fn parse(json: &str) -> Result<Duration, String> {
        serde_json::from_str::<Holder>(json)
            .map(|h| h.value)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn durations_in_collector_notation() {
        assert_eq!(
            parse(r#"{"value":"200ms"}"#),
            Ok(Duration::from_millis(200))
        );
        assert_eq!(parse(r#"{"value":"1m30s"}"#), Ok(Duration::from_secs(90)));
        assert_eq!(parse(r#"{"value":0}"#), Ok(Duration::ZERO));
        assert!(parse(r#"{"value":5}"#).unwrap_err().contains("has no unit"));
        assert!(
            parse(r#"{"value":"soon"}"#)
                .unwrap_err()
                .contains("invalid duration \"soon\"")
        );
    }
}
