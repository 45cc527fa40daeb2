//! Shared pieces of component configuration: duration values, field errors, the
//! check every component's settings get, and the bounds settings share.

use std::ops::RangeInclusive;
use std::path::{Component, Path, PathBuf};
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

/// Checks that a duration setting lies in `range`; the message shows the bounds as a
/// config writes them.
pub fn duration_in(
    field: &str,
    value: Duration,
    range: RangeInclusive<Duration>,
) -> Result<(), FieldError> {
    if range.contains(&value) {
        return Ok(());
    }
    let written = |duration: &Duration| humantime::format_duration(*duration).to_string();
    Err(FieldError::new(
        field,
        format!(
            "must be between {} and {}, not {}",
            written(range.start()),
            written(range.end()),
            written(&value)
        ),
    ))
}

/// Checks that a count setting lies in `range`.
pub fn count_in(field: &str, value: usize, range: RangeInclusive<usize>) -> Result<(), FieldError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(FieldError::new(
        field,
        format!(
            "must be between {} and {}, not {value}",
            range.start(),
            range.end()
        ),
    ))
}

/// The kernel's own trees: `/proc` and `/sys` take no files of opscope's, so every
/// write of a store kept there fails; `/dev` holds devices and memory, which keep
/// nothing across a node's restart.
const KERNEL_TREES: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Checks a directory opscope keeps files in (a durable queue, a journal, offsets): it
/// is named, and neither it nor what it resolves to lies under `/proc`, `/sys` or
/// `/dev`.
pub fn storage_directory(field: &str, directory: &Path) -> Result<(), FieldError> {
    if directory.as_os_str().is_empty() {
        return Err(FieldError::new(field, "must name a directory"));
    }
    let resolved = std::fs::canonicalize(directory).ok();
    let written = lexically_normal(directory);
    let under = |root: &str| {
        written.starts_with(root) || resolved.as_ref().is_some_and(|path| path.starts_with(root))
    };
    match KERNEL_TREES.into_iter().find(|root| under(root)) {
        Some(root) => Err(FieldError::new(
            field,
            format!(
                "{} is under {root}, which holds no files of opscope's; name a directory on a disk (a volume)",
                directory.display()
            ),
        )),
        None => Ok(()),
    }
}

/// `path` with `.` and `..` taken out as written, without reading the file system.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
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

/// The longest duration any setting takes: a year of 365.25 days, as a config writes
/// it, `1y`. No interval, timeout or window of opscope means anything longer, and a
/// year added to an instant or to an epoch time in nanoseconds stays far from
/// overflowing: 3×10¹¹ years passed once and panicked the task that added it.
pub const MAX_DURATION: Duration = Duration::from_secs(31_557_600);

/// Reads a duration written as the OpenTelemetry Collector writes them (`200ms`,
/// `5s`, `1m30s`); a bare `0` means zero. Longer than [`MAX_DURATION`] is refused, so
/// no setting read here can overflow the arithmetic of the task that uses it.
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
    let duration = humantime::parse_duration(text)
        .map_err(|err| format!("invalid duration \"{text}\": {err} (examples: 200ms, 5s, 1m)"))?;
    if duration > MAX_DURATION {
        return Err(format!(
            "duration \"{text}\" is longer than any setting takes (at most {})",
            humantime::format_duration(MAX_DURATION)
        ));
    }
    Ok(duration)
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

    #[test]
    fn a_duration_longer_than_a_year_is_refused_when_read() {
        assert_eq!(parse(r#"{"value":"1y"}"#), Ok(MAX_DURATION));
        assert_eq!(
            parse(r#"{"value":"365days"}"#),
            Ok(Duration::from_secs(31_536_000))
        );
        let error = parse(r#"{"value":"300000000000years"}"#).unwrap_err();
        assert!(
            error.contains(
                "duration \"300000000000years\" is longer than any setting takes (at most 1year)"
            ),
            "{error}"
        );
        assert!(parse(r#"{"value":"1year 1s"}"#).is_err());
    }

    #[test]
    fn bounds_name_the_setting_and_say_the_range() {
        let range = Duration::from_millis(50)..=MAX_DURATION;
        assert_eq!(
            duration_in("check_interval", Duration::from_secs(1), range.clone()),
            Ok(())
        );
        assert_eq!(
            duration_in("check_interval", Duration::from_nanos(1), range)
                .unwrap_err()
                .to_string(),
            "check_interval: must be between 50ms and 1year, not 1ns"
        );
        assert_eq!(count_in("num_consumers", 1024, 1..=1024), Ok(()));
        assert_eq!(
            count_in("num_consumers", 1_000_000, 1..=1024)
                .unwrap_err()
                .to_string(),
            "num_consumers: must be between 1 and 1024, not 1000000"
        );
    }

    #[test]
    fn storage_is_refused_in_the_kernel_trees() {
        for path in [
            "/proc/self",
            "/sys",
            "/dev/shm/opscope",
            "/var/lib/../../proc/1/fd",
        ] {
            let error = storage_directory("storage", Path::new(path)).unwrap_err();
            assert_eq!(error.field, "storage", "{path}");
            assert!(error.message.contains("is under /"), "{path}: {error}");
        }
        assert_eq!(
            storage_directory("storage", Path::new(""))
                .unwrap_err()
                .message,
            "must name a directory"
        );
        for path in ["/var/lib/opscope", "/procedures", "state/queue", "/tmp"] {
            assert_eq!(
                storage_directory("storage", Path::new(path)),
                Ok(()),
                "{path}"
            );
        }
    }
}
