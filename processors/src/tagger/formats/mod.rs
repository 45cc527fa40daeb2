//! Operator log lines and structured log records, read into what they say about
//! reconciles and objects: one file per format, tried in turn, plain text last.

mod ansi;
mod continuation;
mod controller_runtime;
mod deletion;
mod fields;
#[cfg(test)]
mod fixtures;
mod go_duration;
mod json_join;
mod json_line;
mod klog;
mod kube_rs;
mod kv;
mod level;
mod logfmt;
mod message_object;
mod outcome;
mod status_write;
mod timestamped_text;
mod tooling_prefix;
mod user_defined;

pub use continuation::is_continuation;
pub use deletion::DeletionNote;
pub use fields::{FieldValue, facts_from_fields};
pub use go_duration::parse_go_duration;
pub use json_join::{OpenJson, joined_is_object};
pub use level::Level;
pub use message_object::namespace_phrase;
pub use opscope_model::timestamp::{parse_rfc3339, parse_timestamp};
pub use outcome::LogOutcome;
pub use user_defined::{JsonKeys, LogFormatConfig, UserFormats};

use json_line::JsonObject;

/// The shape a log line was recognised as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// controller-runtime's zap JSON encoder, and any other JSON object line.
    ControllerRuntimeJson,
    /// controller-runtime's zap console encoder (`ts<TAB>LEVEL<TAB>[logger<TAB>]msg<TAB>{json}`).
    ControllerRuntimeConsole,
    /// kube-rs `tracing` output, text (the default `fmt` format) or JSON.
    KubeRs,
    /// klog text (`I0501 12:00:00.000000 1 file.go:123] msg k=v`).
    Klog,
    /// logfmt (`time=.. level=info msg=".." k=v`).
    Logfmt,
    /// A timestamp, a level and text: log4j/logback, kopf, Strimzi, `flux logs`, zap
    /// console copied with spaces for tabs.
    TimestampedText,
    /// A format of the config (`operator_tagger.log_formats`), by its index there.
    UserDefined(u16),
    /// Anything else: the whole line is the message.
    #[default]
    Plain,
}

/// What a log line or structured log record says about reconciles and objects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogFacts {
    pub format: LogFormat,
    pub time_unix_nano: Option<u64>,
    pub level: Option<Level>,
    pub logger: Option<String>,
    /// The human message (`msg`).
    pub message: String,
    pub reconcile_id: Option<String>,
    pub controller: Option<String>,
    /// The object's API group (`controllerGroup`, `reconciler group`).
    pub group: Option<String>,
    /// The object's Kind (`controllerKind`, `reconciler kind`).
    pub kind: Option<String>,
    /// The object's namespace.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: Option<String>,
    /// The `error` field, or the error text of an unstructured line.
    pub error: Option<String>,
    pub outcome: Option<LogOutcome>,
    /// The message is the first line of a reconcile (`Reconciling …`).
    pub starts_reconcile: bool,
    /// The record's time was written without a zone (log4j's default): it is read as
    /// UTC, or in `operator_tagger.default_timezone`.
    pub zoneless_time: bool,
    /// What the message says of its object's deletion.
    pub deletion: Option<DeletionNote>,
    /// The HTTP status of an API call the record reports (a user format's `code`).
    pub api_code: Option<u16>,
    /// The verb of an API call the record reports (a user format's `verb`).
    pub api_verb: Option<String>,
    /// The message tells that the object's status was written.
    pub status_write: bool,
}

impl LogFacts {
    fn of_format(format: LogFormat) -> Self {
        LogFacts {
            format,
            ..LogFacts::default()
        }
    }

    /// Takes the object from the message when no field named one.
    /// An object the message names is taken when the fields named none, or named the
    /// same one without its Kind.
    pub fn find_object_in_message(&mut self) {
        if self.name.is_some() && self.kind.is_some() {
            return;
        }
        // An error names the object when the message does not.
        let found = message_object::find(&self.message).or_else(|| {
            self.name
                .is_none()
                .then(|| message_object::find(self.error.as_deref()?))
                .flatten()
        });
        if let Some(object) = found
            && self.name.as_deref().is_none_or(|name| name == object.name)
        {
            self.name = Some(object.name.to_string());
            if self.namespace.is_none() {
                self.namespace = object.namespace.map(str::to_string);
            }
            if self.kind.is_none() {
                self.kind = object.kind.map(str::to_string);
            }
        }
        if self.kind.is_none()
            && let Some(name) = self.name.as_deref()
            && let Some(kind) = message_object::kind_of_named(&self.message, name)
        {
            self.kind = Some(kind.to_string());
        }
        if self.kind.is_none()
            && self.name.is_some()
            && let Some(kind) = message_object::stated_type(&self.message)
        {
            self.kind = Some(kind.to_string());
        }
        if self.controller.is_none()
            && self.name.is_some()
            && let Some(controller) = message_object::named_controller(&self.message)
        {
            self.controller = Some(controller.to_string());
        }
        if self.name.is_some()
            && self.namespace.is_none()
            && let Some(namespace) = message_object::namespace_phrase(&self.message)
        {
            self.namespace = Some(namespace.to_string());
        }
        if self.kind.is_none()
            && let Some((resource, name)) = message_object::api_error_object(&self.message)
            && self.name.as_deref().is_none_or(|known| known == name)
        {
            self.kind = Some(opscope_model::kubernetes::kinds::singular_of_resource(
                resource,
            ));
            self.name = Some(name.to_string());
        }
    }

    /// Derives the outcome from the message when nothing stated it yet; call it again
    /// after setting the message of a structured record from its body.
    pub fn infer_outcome(&mut self) {
        if self.outcome.is_none() {
            self.outcome = LogOutcome::from_message(&self.message);
        }
        self.starts_reconcile = self.outcome.is_none() && LogOutcome::is_start(&self.message);
        self.status_write = status_write::tells_status_write(&self.message);
        let error = self.error.as_deref().unwrap_or_default();
        self.deletion =
            DeletionNote::from_message(&self.message).or_else(|| DeletionNote::from_message(error));
    }
}

/// Whether `text` holds `needle` (ASCII), in any case, without a lowercase copy.
fn contains_ignore_case(text: &str, needle: &str) -> bool {
    !needle.is_empty()
        && text
            .as_bytes()
            .windows(needle.len())
            .any(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Reads one log line with the user's formats first, then the built-in ones.
pub fn recognize_line_with(line: &str, formats: &UserFormats) -> LogFacts {
    if !formats.is_empty() {
        let without_colours = ansi::strip_ansi(line);
        let text = tooling_prefix::strip_borders(&without_colours);
        if let Some(mut facts) = formats.recognize(text) {
            facts.infer_outcome();
            facts.find_object_in_message();
            return facts;
        }
    }
    recognize_line(line)
}

/// Reads one log line in whichever recognised format it is written; a line in no
/// known format is `Plain`, its trimmed text the message. Never fails.
pub fn recognize_line(line: &str) -> LogFacts {
    let without_colours = ansi::strip_ansi(line);
    let text = tooling_prefix::strip_borders(&without_colours);
    let mut facts = recognize_copied(text, tooling_prefix::MAX_PREFIXES);
    facts.infer_outcome();
    facts.find_object_in_message();
    facts
}

/// Reads a line that may carry prefixes of log tooling (`kubectl logs --timestamps`,
/// stern, log store exports): the line as it is first, then without each prefix in
/// turn. A plain line keeps the time of a timestamp prefix.
fn recognize_copied(line: &str, prefixes_left: usize) -> LogFacts {
    let facts = recognize_trimmed(line);
    if facts.format != LogFormat::Plain || prefixes_left == 0 {
        return facts;
    }
    let mut timed_plain = None;
    for stripped in tooling_prefix::candidates(line) {
        let mut inner = recognize_copied(stripped.rest, prefixes_left - 1);
        if inner.time_unix_nano.is_none() {
            inner.time_unix_nano = stripped.time;
        }
        if inner.format != LogFormat::Plain {
            return inner;
        }
        if timed_plain.is_none() && stripped.time.is_some() {
            timed_plain = Some(inner);
        }
    }
    timed_plain.unwrap_or(facts)
}

fn recognize_trimmed(line: &str) -> LogFacts {
    if let Some(object) = json_object(line) {
        return recognize_json(&object);
    }
    if let Some(facts) = salvaged_json(line) {
        return facts;
    }
    controller_runtime::recognize_console(line)
        .or_else(|| timestamped_text::recognize_spaced_console(line))
        .or_else(|| kube_rs::recognize_text(line))
        .or_else(|| klog::recognize(line))
        .or_else(|| logfmt::recognize(line))
        .or_else(|| timestamped_text::recognize(line).map(|read| read.facts))
        .unwrap_or_else(|| plain(line))
}

fn json_object(line: &str) -> Option<JsonObject<'_>> {
    if !line.starts_with('{') {
        return None;
    }
    JsonObject::parse(line)
}

/// A JSON line a paste damaged: followed by a wrapped line's prefix, or cut by the
/// excerpt (its complete members). Read when what is left holds the message.
fn salvaged_json(line: &str) -> Option<LogFacts> {
    if !line.starts_with('{') {
        return None;
    }
    let facts = match JsonObject::parse_before_words(line) {
        Some(object) => recognize_json(&object),
        None => recognize_json(&JsonObject::parse(&json_join::close_cut_object(line)?)?),
    };
    (!facts.message.is_empty()).then_some(facts)
}

fn recognize_json(object: &JsonObject) -> LogFacts {
    if kube_rs::is_tracing_json(object) {
        kube_rs::recognize_json(object)
    } else {
        controller_runtime::recognize_json(object)
    }
}

fn plain(line: &str) -> LogFacts {
    LogFacts {
        message: line.to_string(),
        ..LogFacts::of_format(LogFormat::Plain)
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{
        CONTROLLER_RUNTIME_CONSOLE, CONTROLLER_RUNTIME_JSON, KLOG, KUBE_RS, LOGFMT, PLAIN,
    };
    use super::*;

    const ALL_FIXTURES: [&str; 6] = [
        CONTROLLER_RUNTIME_JSON,
        CONTROLLER_RUNTIME_CONSOLE,
        KUBE_RS,
        KLOG,
        LOGFMT,
        PLAIN,
    ];

    #[test]
    fn unrecognised_lines_are_plain_with_the_trimmed_line_as_message() {
        for text in PLAIN.lines() {
            // A plain line after a timestamp (as `kubectl logs --timestamps` writes
            // it) keeps the time, and the message is what follows it.
            let (time, message) = match text.split_once(['\t', ' ']) {
                Some((column, rest)) if parse_timestamp(column).is_some() => {
                    (parse_timestamp(column), rest.trim())
                }
                _ => (None, text.trim()),
            };
            let expected = LogFacts {
                time_unix_nano: time,
                message: message.to_string(),
                ..LogFacts::default()
            };
            assert_eq!(recognize_line(text), expected, "{text}");
        }
    }

    #[test]
    fn lines_copied_with_tooling_prefixes_are_read_as_the_line_itself() {
        let json = r#"{"level":"info","ts":"2024-05-01T12:00:00Z","msg":"Reconciling","controller":"rayjob","namespace":"ml","name":"train"}"#;
        let direct = recognize_line(json);
        for copied in [
            format!("2024-05-01T12:00:00.123456789Z {json}"),
            format!("kuberay-operator-5f9d-x2 manager {json}"),
            format!("[pod/kuberay-operator-5f9d-x2/manager] {json}"),
            format!("1714564800123\t2024-05-01T12:00:00.123Z\t{json}"),
            format!("│ {json} │"),
            format!("op-1 manager 2024-05-01T12:00:00.123456789Z {json}"),
        ] {
            assert_eq!(recognize_line(&copied), direct, "{copied}");
        }
        let klog =
            "I0501 12:00:00.000000       1 controller.go:42] \"Reconciling\" key=\"ml/train\"";
        let prefixed = recognize_line(&format!("2024-05-01T12:00:00.5Z {klog}"));
        assert_eq!(prefixed.format, LogFormat::Klog);
        assert_eq!(prefixed.name.as_deref(), Some("train"));
    }

    #[test]
    fn empty_and_blank_lines() {
        assert_eq!(recognize_line(""), LogFacts::default());
        assert_eq!(recognize_line(" \t\r\n"), LogFacts::default());
    }

    #[test]
    fn plain_text_still_reports_an_outcome() {
        let facts = recognize_line("Reconcile successful");
        assert_eq!(facts.format, LogFormat::Plain);
        assert_eq!(facts.outcome, Some(LogOutcome::Ok));
    }

    #[test]
    fn a_json_line_followed_by_a_wrapped_prefix_is_read() {
        // https://github.com/banzaicloud/koperator/issues/262 (stern output, wrapped)
        let facts = recognize_line(
            r#"{"level":"info","ts":1579893801.1523893,"logger":"controllers.KafkaCluster","msg":"Ensuring all topics have finished cleaning up","kafkacluster":"kafka/kafka","Request.Name":"kafka"}               manager "#,
        );
        assert_eq!(facts.format, LogFormat::ControllerRuntimeJson);
        assert_eq!(facts.kind.as_deref(), Some("KafkaCluster"));
        assert_eq!(facts.namespace.as_deref(), Some("kafka"));
        let quoted_after = recognize_line(r#"{"msg":"x"} and "more""#);
        assert_eq!(quoted_after.format, LogFormat::Plain);
        let no_message = recognize_line(r#"{"a":1} trailing"#);
        assert_eq!(no_message.format, LogFormat::Plain);
    }

    #[test]
    fn json_objects_of_other_loggers_are_read_with_the_same_keys() {
        let facts = recognize_line(
            r#"{"time":"2024-05-01T12:00:00Z","level":"warning","message":"slow","namespace":"ns"}"#,
        );
        assert_eq!(facts.format, LogFormat::ControllerRuntimeJson);
        assert_eq!(facts.level, Some(Level::Warn));
        assert_eq!(facts.message, "slow");
        assert_eq!(facts.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn json_that_is_not_an_object_is_plain() {
        for text in [
            "[1,2]",
            "{\"a\":1} trailing",
            "{\"a\":[1,2}",
            "{\"ts\":1e999}",
        ] {
            assert_eq!(recognize_line(text).format, LogFormat::Plain, "{text}");
        }
    }

    #[test]
    fn every_truncation_of_every_fixture_line_is_read_without_panic() {
        for text in ALL_FIXTURES.iter().flat_map(|fixture| fixture.lines()) {
            for (end, _) in text.char_indices() {
                let prefix = text.get(..end).unwrap_or_default();
                recognize_line(prefix);
                is_continuation(prefix);
            }
        }
    }

    #[test]
    fn binary_garbage_is_read_without_panic() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2_000 {
            let bytes: Vec<u8> = (0..97)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state.to_le_bytes()[0]
                })
                .collect();
            let text = String::from_utf8_lossy(&bytes);
            recognize_line(&text);
            is_continuation(&text);
        }
        recognize_line("\u{0}\u{1b}[\u{ffff}\u{1b}\t\u{1b}[9");
    }

    #[test]
    fn megabyte_lines_take_linear_work() {
        let mebibyte = 1 << 20;
        let repeated = |unit: &str| unit.repeat(mebibyte / unit.len());
        let lines = [
            format!("{{\"msg\":\"{}\"}}", repeated("x")),
            format!("2024-05-01T12:00:00Z\tINFO\t{}", repeated("a\t")),
            format!("2024-05-01T12:00:00Z INFO {}", repeated("{")),
            format!("2024-05-01T12:00:00Z INFO t: m {}", repeated("a=b ")),
            format!("2024-05-01T12:00:00Z INFO t: m {}", repeated("a. ")),
            format!(
                "I0501 12:00:00.000000 1 f.go:1] \"m\" {}",
                repeated("k=\"v\\\" ")
            ),
            format!("msg=m {}", repeated("k=v ")),
            repeated("requeueing aft"),
            repeated("\u{1b}[1"),
            format!("\t{}.go:1", repeated("/")),
            repeated("pkg.(*T)"),
        ];
        for text in &lines {
            recognize_line(text);
            is_continuation(text);
        }
    }
}
