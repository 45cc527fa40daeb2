//! logfmt lines (`time=2024-05-01T12:00:00Z level=info msg="..." controller=foo`):
//! every word a `key=value` pair, read with the shared field rules.

use std::borrow::Cow;

use super::fields::FieldValue;
use super::kv::{Token, tokens};
use super::{LogFacts, LogFormat, facts_from_fields};

/// Keys of which a logfmt line must have at least one, so prose with an `=` in it
/// stays plain text.
const RECORD_KEYS: &[&str] = &["msg", "level", "lvl"];

/// The facts of a logfmt line; `None` unless every word is a pair and a record key
/// (`msg`, `level`) is among them.
pub fn recognize(line: &str) -> Option<LogFacts> {
    let pairs = pairs(line)?;
    if !pairs
        .iter()
        .any(|(key, _)| RECORD_KEYS.contains(&key.as_ref()))
    {
        return None;
    }
    let mut facts = LogFacts::of_format(LogFormat::Logfmt);
    facts_from_fields(
        pairs
            .iter()
            .map(|(key, value)| (key.as_ref(), FieldValue::Str(value))),
        &mut facts,
    );
    Some(facts)
}

/// All pairs of the line, or `None` at the first word that is not one.
fn pairs(line: &str) -> Option<Vec<(Cow<'_, str>, Cow<'_, str>)>> {
    tokens(line)
        .map(|token| match token {
            Token::Pair(key, value) => Some((key, value)),
            Token::Word(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fixtures::{LOGFMT, at, line, some};
    use super::super::{Level, LogOutcome, recognize_line};
    use super::*;

    fn logfmt_line(index: usize) -> LogFacts {
        recognize_line(line(LOGFMT, index))
    }

    /// The object facts of the Widget `ns/x`.
    fn widget() -> LogFacts {
        LogFacts {
            format: LogFormat::Logfmt,
            controller: some("widget"),
            namespace: some("ns"),
            name: some("x"),
            ..LogFacts::default()
        }
    }

    #[test]
    fn bare_values() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_800, 0),
            level: Some(Level::Info),
            message: "Reconciling".into(),
            starts_reconcile: true,
            reconcile_id: some("0b9e4f8a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"),
            ..widget()
        };
        assert_eq!(logfmt_line(0), expected);
    }

    #[test]
    fn reconciler_error_with_escaped_conflict() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_801, 500_000_000),
            level: Some(Level::Error),
            message: "Reconciler error".into(),
            reconcile_id: some("0b9e4f8a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"),
            group: some("example.com"),
            kind: some("Widget"),
            error: some(
                "Operation cannot be fulfilled on widgets.example.com \"x\": the object has \
                 been modified; please apply your changes to the latest version and try again",
            ),
            outcome: Some(LogOutcome::Error),
            ..widget()
        };
        assert_eq!(logfmt_line(1), expected);
    }

    #[test]
    fn requeue_after_compound_duration() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_802, 0),
            level: Some(Level::Debug),
            message: "Reconcile done, requeueing after 1h2m3.5s".into(),
            outcome: Some(LogOutcome::RequeueAfter(Duration::from_millis(3_723_500))),
            ..widget()
        };
        assert_eq!(logfmt_line(2), expected);
    }

    #[test]
    fn escapes_quoted_time_and_request_key() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_803, 0),
            level: Some(Level::Warn),
            message: "status \"Ready\" flapping\nsee events".into(),
            ..widget()
        };
        assert_eq!(logfmt_line(3), expected);
    }

    #[test]
    fn cluster_scoped_request_without_time() {
        let expected = LogFacts {
            format: LogFormat::Logfmt,
            level: Some(Level::Info),
            message: "Successfully Reconciled".into(),
            controller: some("settings"),
            name: some("cluster-wide-config"),
            outcome: Some(LogOutcome::Ok),
            ..LogFacts::default()
        };
        assert_eq!(logfmt_line(4), expected);
    }

    #[test]
    fn lvl_key_and_object_path() {
        let facts = logfmt_line(5);
        assert_eq!(facts.level, Some(Level::Info));
        assert_eq!(facts.namespace.as_deref(), Some("ns"));
        assert_eq!(facts.name.as_deref(), Some("y"));
    }

    #[test]
    fn every_line_is_recognised() {
        for text in LOGFMT.lines() {
            assert_eq!(recognize_line(text).format, LogFormat::Logfmt, "{text}");
        }
    }

    #[test]
    fn pairs_without_record_keys_or_with_prose_are_not_logfmt() {
        assert!(recognize("a=1 b=2").is_none());
        assert!(recognize("msg=hello and goodbye").is_none());
        assert!(recognize("").is_none());
    }
}
