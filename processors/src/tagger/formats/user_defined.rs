//! Log formats a user teaches the tagger in its config (`operator_tagger.log_formats`):
//! a regular expression whose named groups say what each part of a line is, or, for
//! JSON lines, which key holds what. Tried before the built-in formats.

use std::time::Duration;

use regex::Regex;
use serde::Deserialize;
use time::PrimitiveDateTime;
use time::format_description::OwnedFormatItem;

use super::fields::{FieldValue, json_fields, split_namespaced};
use super::go_duration::parse_go_duration;
use super::json_line::JsonObject;
use super::{Level, LogFacts, LogFormat, LogOutcome};
use opscope_model::config::FieldError;
use opscope_model::timestamp::{parse_epoch_seconds, parse_timestamp};

/// The named groups (and JSON keys) a format may give.
pub const PARTS: &[&str] = &[
    "ts",
    "level",
    "msg",
    "controller",
    "group",
    "kind",
    "namespace",
    "name",
    "object",
    "reconcile_id",
    "outcome",
    "requeue_after",
    "error",
    "code",
    "verb",
];

/// Longest pattern accepted, and the compiled size allowed: a config is input too.
const MAX_PATTERN_LEN: usize = 4096;
const MAX_COMPILED_BYTES: usize = 1 << 20;
/// Formats a config may define.
pub const MAX_FORMATS: usize = 64;

/// One format as the config writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogFormatConfig {
    pub name: String,
    /// A Rust `regex` with named groups from [`PARTS`].
    #[serde(rename = "match", default)]
    pub pattern: Option<String>,
    /// For JSON lines: the key of each part.
    #[serde(default)]
    pub json: Option<JsonKeys>,
    /// How `ts` is written: `rfc3339` (the default; also any zone-less ISO 8601),
    /// `epoch_seconds`, `epoch_millis`, or a strftime pattern (`%d/%m/%Y %H:%M:%S`, read
    /// as UTC).
    #[serde(default)]
    pub ts_format: Option<String>,
}

/// The JSON key of each part; unset parts are not read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonKeys {
    pub ts: Option<String>,
    pub level: Option<String>,
    pub msg: Option<String>,
    pub controller: Option<String>,
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub object: Option<String>,
    pub reconcile_id: Option<String>,
    pub outcome: Option<String>,
    pub requeue_after: Option<String>,
    pub error: Option<String>,
    pub code: Option<String>,
    pub verb: Option<String>,
}

impl JsonKeys {
    fn pairs(&self) -> [(&'static str, Option<&str>); 15] {
        [
            ("ts", self.ts.as_deref()),
            ("level", self.level.as_deref()),
            ("msg", self.msg.as_deref()),
            ("controller", self.controller.as_deref()),
            ("group", self.group.as_deref()),
            ("kind", self.kind.as_deref()),
            ("namespace", self.namespace.as_deref()),
            ("name", self.name.as_deref()),
            ("object", self.object.as_deref()),
            ("reconcile_id", self.reconcile_id.as_deref()),
            ("outcome", self.outcome.as_deref()),
            ("requeue_after", self.requeue_after.as_deref()),
            ("error", self.error.as_deref()),
            ("code", self.code.as_deref()),
            ("verb", self.verb.as_deref()),
        ]
    }
}

#[derive(Debug, Clone)]
enum Matcher {
    Pattern(Regex),
    Json(Box<JsonKeys>),
}

#[derive(Debug, Clone)]
enum TimeFormat {
    Rfc3339,
    EpochSeconds,
    EpochMillis,
    Strftime(OwnedFormatItem),
}

#[derive(Debug, Clone)]
struct Format {
    matcher: Matcher,
    time: TimeFormat,
}

/// The compiled formats of a config, tried in order.
#[derive(Debug, Clone, Default)]
pub struct UserFormats {
    formats: Vec<(Box<str>, Format)>,
}

impl UserFormats {
    /// Compiles the formats; an error names the setting (`[1].match`) and what is
    /// wrong with it.
    pub fn compile(configs: &[LogFormatConfig]) -> Result<Self, FieldError> {
        if configs.len() > MAX_FORMATS {
            return Err(FieldError::new(
                "",
                format!("at most {MAX_FORMATS} formats, not {}", configs.len()),
            ));
        }
        let mut formats: Vec<(Box<str>, Format)> = Vec::with_capacity(configs.len());
        for (index, config) in configs.iter().enumerate() {
            let at = |field: &str| format!("[{index}].{field}");
            if config.name.trim().is_empty() {
                return Err(FieldError::new(at("name"), "must not be empty"));
            }
            if formats.iter().any(|(name, _)| **name == *config.name) {
                return Err(FieldError::new(
                    at("name"),
                    "is already used by another format",
                ));
            }
            let matcher = match (&config.pattern, &config.json) {
                (Some(pattern), None) => Matcher::Pattern(
                    compile_pattern(pattern).map_err(|m| FieldError::new(at("match"), m))?,
                ),
                (None, Some(keys)) => {
                    if keys.pairs().iter().all(|(_, key)| key.is_none()) {
                        return Err(FieldError::new(
                            at("json"),
                            "name the key of at least one part",
                        ));
                    }
                    Matcher::Json(Box::new(keys.clone()))
                }
                _ => {
                    return Err(FieldError::new(
                        at("match"),
                        "set either match (a regex) or json (keys), not both or neither",
                    ));
                }
            };
            let time = time_format(config.ts_format.as_deref())
                .map_err(|m| FieldError::new(at("ts_format"), m))?;
            formats.push((config.name.as_str().into(), Format { matcher, time }));
        }
        Ok(Self { formats })
    }

    pub fn is_empty(&self) -> bool {
        self.formats.is_empty()
    }

    /// The name of the format at `index` (as `LogFormat::UserDefined` gives it).
    pub fn name(&self, index: u16) -> Option<&str> {
        self.formats
            .get(usize::from(index))
            .map(|(name, _)| &**name)
    }

    /// The facts of the first format that reads the line.
    pub fn recognize(&self, line: &str) -> Option<LogFacts> {
        self.formats
            .iter()
            .enumerate()
            .find_map(|(index, (_, format))| {
                let index = u16::try_from(index).ok()?;
                let mut facts = LogFacts::of_format(LogFormat::UserDefined(index));
                let found = match &format.matcher {
                    Matcher::Pattern(regex) => {
                        let captures = regex.captures(line)?;
                        let parts = PARTS
                            .iter()
                            .filter_map(|part| Some((*part, captures.name(part)?.as_str())));
                        fill(&mut facts, parts, &format.time)
                    }
                    Matcher::Json(keys) => {
                        let object = JsonObject::parse(line.trim())?;
                        let fields: Vec<(&str, FieldValue)> = json_fields(&object).collect();
                        let parts = keys.pairs().into_iter().filter_map(|(part, key)| {
                            let key = key?;
                            let value = fields.iter().find(|(name, _)| *name == key)?;
                            Some((part, field_text(&value.1)?))
                        });
                        let owned: Vec<(&str, String)> = parts.collect();
                        fill(
                            &mut facts,
                            owned.iter().map(|(part, value)| (*part, value.as_str())),
                            &format.time,
                        )
                    }
                };
                found.then_some(facts)
            })
    }
}

fn compile_pattern(pattern: &str) -> Result<Regex, String> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!("longer than {MAX_PATTERN_LEN} characters"));
    }
    let regex = regex::RegexBuilder::new(pattern)
        .size_limit(MAX_COMPILED_BYTES)
        .build()
        .map_err(|err| format!("not a valid regex: {err}"))?;
    let names: Vec<&str> = regex.capture_names().flatten().collect();
    if let Some(unknown) = names.iter().find(|name| !PARTS.contains(name)) {
        return Err(format!(
            "unknown group name \"{unknown}\" (known: {})",
            PARTS.join(", ")
        ));
    }
    if names.is_empty() {
        return Err("name at least one group, such as (?P<msg>.*)".to_string());
    }
    Ok(regex)
}

fn time_format(text: Option<&str>) -> Result<TimeFormat, String> {
    Ok(match text.unwrap_or("rfc3339") {
        "rfc3339" => TimeFormat::Rfc3339,
        "epoch_seconds" => TimeFormat::EpochSeconds,
        "epoch_millis" => TimeFormat::EpochMillis,
        pattern => TimeFormat::Strftime(
            time::format_description::parse_strftime_owned(pattern).map_err(|err| {
                format!("not rfc3339, epoch_seconds, epoch_millis or a strftime pattern: {err}")
            })?,
        ),
    })
}

/// A JSON value as the text a part is read from.
fn field_text(value: &FieldValue<'_>) -> Option<String> {
    match value {
        FieldValue::Str(text) => Some((*text).to_string()),
        FieldValue::Int(int) => Some(int.to_string()),
        FieldValue::Float(float) => Some(float.to_string()),
        FieldValue::Bool(flag) => Some(flag.to_string()),
        FieldValue::Object(_) => None,
    }
}

/// Sets the facts from the parts found; false when no part was found.
fn fill<'a>(
    facts: &mut LogFacts,
    parts: impl Iterator<Item = (&'a str, &'a str)>,
    time: &TimeFormat,
) -> bool {
    let mut any = false;
    let mut requeue_after = None;
    let mut outcome = None;
    for (part, value) in parts {
        any = true;
        let text = Some(value.to_string());
        match part {
            "ts" => facts.time_unix_nano = parse_time(value, time),
            "level" => facts.level = Level::parse(value),
            "msg" => facts.message = value.to_string(),
            "controller" => facts.controller = text,
            "group" => facts.group = text,
            "kind" => facts.kind = text,
            "namespace" => facts.namespace = text,
            "name" => facts.name = text,
            "object" => {
                if let Some((namespace, name)) = split_namespaced(value) {
                    facts.namespace = namespace.map(str::to_string).or(facts.namespace.take());
                    facts.name = Some(name.to_string());
                }
            }
            "reconcile_id" => facts.reconcile_id = text,
            "outcome" => outcome = Some(value.to_ascii_lowercase()),
            "requeue_after" => requeue_after = parse_delay(value),
            "error" => facts.error = text,
            "code" => facts.api_code = value.trim().parse().ok(),
            "verb" => facts.api_verb = Some(value.to_ascii_lowercase()),
            _ => {}
        }
    }
    if let Some(outcome) = outcome {
        facts.outcome = match outcome.as_str() {
            "requeue_after" => requeue_after.map(LogOutcome::RequeueAfter),
            other => LogOutcome::from_result(other, None),
        };
    }
    any
}

fn parse_delay(text: &str) -> Option<Duration> {
    parse_go_duration(text).or_else(|| {
        text.trim()
            .parse::<f64>()
            .ok()
            .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
    })
}

fn parse_time(text: &str, format: &TimeFormat) -> Option<u64> {
    match format {
        TimeFormat::Rfc3339 => parse_timestamp(text.trim()),
        TimeFormat::EpochSeconds => parse_epoch_seconds(text.trim()),
        TimeFormat::EpochMillis => text
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|millis| millis.checked_mul(1_000_000)),
        TimeFormat::Strftime(items) => {
            let parsed = PrimitiveDateTime::parse(text.trim(), items).ok()?;
            u64::try_from(parsed.assume_utc().unix_timestamp_nanos()).ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(configs: Vec<LogFormatConfig>) -> Result<UserFormats, FieldError> {
        UserFormats::compile(&configs)
    }

    fn regex_format(name: &str, pattern: &str, ts_format: Option<&str>) -> LogFormatConfig {
        LogFormatConfig {
            name: name.into(),
            pattern: Some(pattern.into()),
            json: None,
            ts_format: ts_format.map(str::to_string),
        }
    }

    #[test]
    fn a_regex_format_reads_its_groups() {
        let formats = compiled(vec![regex_format(
            "acme",
            r"^(?P<ts>\S+) (?P<level>\w+) reconcile (?P<kind>\w+) (?P<object>\S+) (?P<outcome>ok|error)",
            None,
        )])
        .unwrap();
        let facts = formats
            .recognize("2024-05-01T12:00:00Z INFO reconcile Widget shop/w1 error")
            .unwrap();
        assert_eq!(facts.format, LogFormat::UserDefined(0));
        assert_eq!(facts.time_unix_nano, Some(1_714_564_800_000_000_000));
        assert_eq!(facts.level, Some(Level::Info));
        assert_eq!(facts.kind.as_deref(), Some("Widget"));
        assert_eq!(facts.namespace.as_deref(), Some("shop"));
        assert_eq!(facts.name.as_deref(), Some("w1"));
        assert_eq!(facts.outcome, Some(LogOutcome::Error));
        assert!(formats.recognize("something else").is_none());
        assert_eq!(formats.name(0), Some("acme"));
    }

    #[test]
    fn a_json_format_reads_its_keys_and_times_in_each_format() {
        let config = LogFormatConfig {
            name: "acme-json".into(),
            pattern: None,
            json: Some(JsonKeys {
                ts: Some("time".into()),
                msg: Some("message".into()),
                object: Some("target".into()),
                kind: Some("resourceType".into()),
                code: Some("status".into()),
                ..JsonKeys::default()
            }),
            ts_format: Some("epoch_millis".into()),
        };
        let formats = compiled(vec![config]).unwrap();
        let facts = formats
            .recognize(r#"{"time":1714564800123,"message":"updated","target":"shop/w1","resourceType":"Widget","status":409}"#)
            .unwrap();
        assert_eq!(facts.time_unix_nano, Some(1_714_564_800_123_000_000));
        assert_eq!(facts.message, "updated");
        assert_eq!(facts.name.as_deref(), Some("w1"));
        assert_eq!(facts.api_code, Some(409));
        let strftime = compiled(vec![regex_format(
            "dmy",
            r"^(?P<ts>\S+ \S+) (?P<msg>.*)$",
            Some("%d/%m/%Y %H:%M:%S"),
        )])
        .unwrap();
        let facts = strftime.recognize("01/05/2024 12:00:00 hello").unwrap();
        assert_eq!(facts.time_unix_nano, Some(1_714_564_800_000_000_000));
    }

    #[test]
    fn bad_formats_name_their_setting() {
        let field = |configs| compiled(configs).unwrap_err().field;
        assert_eq!(field(vec![regex_format("a", "(", None)]), "[0].match");
        assert_eq!(
            field(vec![regex_format("a", "(?P<when>.*)", None)]),
            "[0].match"
        );
        assert_eq!(field(vec![regex_format("a", ".*", None)]), "[0].match");
        assert_eq!(
            field(vec![regex_format("a", "(?P<msg>.*)", Some("%Q nonsense"))]),
            "[0].ts_format"
        );
        assert_eq!(
            field(vec![
                regex_format("a", "(?P<msg>.*)", None),
                regex_format("a", "(?P<msg>.*)", None)
            ]),
            "[1].name"
        );
        let neither = LogFormatConfig {
            name: "n".into(),
            pattern: None,
            json: None,
            ts_format: None,
        };
        assert_eq!(field(vec![neither]), "[0].match");
        let message = compiled(vec![regex_format("a", "(?P<when>.*)", None)])
            .unwrap_err()
            .message;
        assert!(message.contains("unknown group name \"when\""), "{message}");
    }
}
