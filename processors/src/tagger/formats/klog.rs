//! klog text lines (`I0501 12:00:00.000000 1 file.go:123] msg`): structured (`"msg"
//! k="v"`), old klogr (`logger "msg"="m" "k"="v"`) and printf-style messages.

use std::borrow::Cow;

use super::continuation::is_go_source_position;
use super::fields::{FieldValue, split_namespaced};
use super::kv::{Token, read_quoted, tokens};
use super::{Level, LogFacts, LogFormat, facts_from_fields};
use opscope_model::timestamp::{format_rfc3339, now_unix_nanos, parse_rfc3339};

/// The facts of a klog line. klog prints no year: the line is taken to be from the
/// last twelve months (this year, or last year for a date ahead of today), in UTC as
/// containers run.
pub fn recognize(line: &str) -> Option<LogFacts> {
    let level = header_level(line.get(..5)?)?;
    let (header, body) = line.split_once(']')?;
    if !is_header(header) {
        return None;
    }
    let mut facts = LogFacts {
        level: Some(level),
        time_unix_nano: header_time(header, now_unix_nanos()),
        ..LogFacts::of_format(LogFormat::Klog)
    };
    read_body(body.trim(), &mut facts);
    Some(facts)
}

/// The level of a header's `Lmmdd`.
fn header_level(severity_and_date: &str) -> Option<Level> {
    let mut chars = severity_and_date.chars();
    let level = Level::from_klog_letter(chars.next()?)?;
    chars.all(|c| c.is_ascii_digit()).then_some(level)
}

/// The time of a header `Lmmdd hh:mm:ss.uuuuuu`, in the year that puts it at most a
/// day after `now`.
fn header_time(header: &str, now: u64) -> Option<u64> {
    let date = header.get(1..5)?;
    let time = header.split_whitespace().nth(1)?;
    let (month, day) = (date.get(..2)?, date.get(2..)?);
    let this_year = current_year(now)?;
    let at = |year: i64| parse_rfc3339(&format!("{year}-{month}-{day}T{time}Z"));
    let candidate = at(this_year)?;
    const DAY: u64 = 86_400 * 1_000_000_000;
    if candidate > now.saturating_add(DAY) {
        at(this_year - 1)
    } else {
        Some(candidate)
    }
}

/// The UTC year of a time.
fn current_year(unix_nanos: u64) -> Option<i64> {
    format_rfc3339(unix_nanos).get(..4)?.parse().ok()
}

/// `Lmmdd hh:mm:ss.uuuuuu threadid file:line`.
fn is_header(header: &str) -> bool {
    let words: Vec<&str> = header.split_whitespace().take(5).collect();
    let [_, time, thread, source] = words.as_slice() else {
        return false;
    };
    time.len() >= 8
        && time
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b':' || b == b'.')
        && thread.bytes().all(|b| b.is_ascii_digit())
        && is_source_position(source)
}

/// `file.go:123`, or any `file:line` for non-Go sources.
fn is_source_position(source: &str) -> bool {
    is_go_source_position(source)
        || source
            .rsplit_once(':')
            .is_some_and(|(file, line)| !file.is_empty() && line.parse::<u32>().is_ok())
}

fn read_body(body: &str, facts: &mut LogFacts) {
    if let Some(quoted) = body.strip_prefix('"') {
        let (message, pairs) = read_quoted(quoted);
        facts.message = message.into_owned();
        read_pairs(pairs, facts);
    } else if let Some(start) = body.find("\"msg\"=") {
        let (logger, pairs) = body.split_at_checked(start).unwrap_or(("", body));
        facts.logger = Some(logger.trim())
            .filter(|logger| !logger.is_empty())
            .map(str::to_string);
        read_pairs(pairs, facts);
    } else if let Some(start) = first_quoted_pair(body) {
        // klogr's `message "key"="value", "key2"="value2"`, the message unquoted.
        let (message, pairs) = body.split_at_checked(start).unwrap_or((body, ""));
        facts.message = message.trim().to_string();
        read_pairs(pairs, facts);
    } else {
        facts.message = body.to_string();
        read_sync_message(body, facts);
    }
}

/// Where the first `"key"=` of a text begins: a quoted word, after a space, that an
/// `=` follows.
fn first_quoted_pair(text: &str) -> Option<usize> {
    text.match_indices(" \"").find_map(|(at, _)| {
        let (key, rest) = read_quoted(text.get(at + 2..)?);
        let is_key = !key.is_empty() && !key.contains(char::is_whitespace);
        (is_key && rest.starts_with('=')).then_some(at + 1)
    })
}

/// The `key=value` pairs after a structured message; words without `=` (klog does not
/// quote keys with spaces) are skipped.
fn read_pairs(text: &str, facts: &mut LogFacts) {
    let pairs: Vec<(Cow<'_, str>, Cow<'_, str>)> = tokens(text)
        .filter_map(|token| match token {
            Token::Pair(key, value) => Some((key, value)),
            Token::Word(_) => None,
        })
        .collect();
    facts_from_fields(
        pairs
            .iter()
            .map(|(key, value)| (key.as_ref(), FieldValue::Str(value))),
        facts,
    );
}

/// The object and error of the printf-style sync messages of workqueue controllers:
/// `error syncing 'ns/name': <error>` and `Successfully synced 'ns/name'`.
fn read_sync_message(message: &str, facts: &mut LogFacts) {
    let quoted_key = ["error syncing '", "Successfully synced '"]
        .iter()
        .find_map(|start| message.strip_prefix(start));
    let Some((key, rest)) = quoted_key.and_then(|text| text.split_once('\'')) else {
        return;
    };
    if let Some((namespace, name)) = split_namespaced(key) {
        facts.namespace = namespace.map(str::to_string);
        facts.name = Some(name.to_string());
    }
    facts.error = rest.strip_prefix(": ").map(str::to_string);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fixtures::{KLOG, RAYJOB_CONFLICT, line, rayjob_train, some};
    use super::super::{LogOutcome, recognize_line};
    use super::*;

    /// The facts of a fixture line, its time left out: the year depends on today,
    /// and `header_time` has its own tests.
    fn klog_line(index: usize) -> LogFacts {
        let facts = recognize_line(line(KLOG, index));
        assert!(facts.time_unix_nano.is_some(), "line {index} has a time");
        LogFacts {
            time_unix_nano: None,
            ..facts
        }
    }

    #[test]
    fn the_year_is_the_one_that_puts_the_line_in_the_past() {
        let now = parse_rfc3339("2026-11-29T08:00:00Z").expect("a time");
        let header = "I1129 07:59:58.250000       1 controller.go:118";
        assert_eq!(
            header_time(header, now),
            parse_rfc3339("2026-11-29T07:59:58.25Z")
        );
        let december = "E1231 23:00:00.000000       1 controller.go:118";
        assert_eq!(
            header_time(december, now),
            parse_rfc3339("2025-12-31T23:00:00Z")
        );
        assert_eq!(header_time("I1399 00:00:00.000000 1 a.go:1", now), None);
    }

    fn klog(facts: LogFacts) -> LogFacts {
        LogFacts {
            format: LogFormat::Klog,
            ..facts
        }
    }

    #[test]
    fn klogr_pairs_after_an_unquoted_message() {
        // https://github.com/GoogleContainerTools/config-sync/pull/1049
        let facts = recognize_line(
            r#"I1117 14:10:13.889507       1 delete.go:155] Deleting object "object"="config-management-system/root-reconciler", "objectKind"="Deployment""#,
        );
        assert_eq!(facts.message, "Deleting object");
        assert_eq!(facts.kind.as_deref(), Some("Deployment"));
        assert_eq!(facts.namespace.as_deref(), Some("config-management-system"));
        assert_eq!(facts.name.as_deref(), Some("root-reconciler"));
        let printf = recognize_line(r#"I1117 14:10:13.889507 1 a.go:1] said "hello" twice"#);
        assert_eq!(printf.message, r#"said "hello" twice"#);
    }

    #[test]
    fn structured_without_an_object_and_with_an_unquoted_key() {
        let expected = LogFacts {
            level: Some(Level::Info),
            message: "Starting workers".into(),
            reconcile_id: None,
            namespace: None,
            name: None,
            ..rayjob_train("")
        };
        assert_eq!(klog_line(0), klog(expected));
    }

    #[test]
    fn structured_with_kind_keyed_object() {
        let expected = LogFacts {
            level: Some(Level::Info),
            message: "Reconcile".into(),
            ..rayjob_train("a0c1f2e3-4b5c-4d6e-8f70-8192a3b4c5d6")
        };
        assert_eq!(klog_line(1), klog(expected));
    }

    #[test]
    fn structured_reconciler_error_with_conflict() {
        let expected = LogFacts {
            level: Some(Level::Error),
            message: "Reconciler error".into(),
            error: some(RAYJOB_CONFLICT),
            outcome: Some(LogOutcome::Error),
            ..rayjob_train("a0c1f2e3-4b5c-4d6e-8f70-8192a3b4c5d6")
        };
        assert_eq!(klog_line(2), klog(expected));
    }

    #[test]
    fn unstructured_error_syncing() {
        let expected = LogFacts {
            level: Some(Level::Error),
            message: "error syncing 'default/example-foo': deployments.apps \"example-foo\" \
                      already exists, requeuing"
                .into(),
            namespace: some("default"),
            name: some("example-foo"),
            error: some("deployments.apps \"example-foo\" already exists, requeuing"),
            outcome: Some(LogOutcome::Error),
            ..LogFacts::default()
        };
        assert_eq!(klog_line(3), klog(expected));
    }

    #[test]
    fn unstructured_successfully_synced() {
        let expected = LogFacts {
            level: Some(Level::Info),
            message: "Successfully synced 'default/example-foo'".into(),
            namespace: some("default"),
            name: some("example-foo"),
            outcome: Some(LogOutcome::Ok),
            ..LogFacts::default()
        };
        assert_eq!(klog_line(4), klog(expected));
    }

    #[test]
    fn structured_object_key() {
        let expected = LogFacts {
            level: Some(Level::Info),
            message: "Reconcile".into(),
            reconcile_id: some("9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"),
            controller: some("foo"),
            namespace: some("ns"),
            name: some("name"),
            ..LogFacts::default()
        };
        assert_eq!(klog_line(5), klog(expected));
    }

    #[test]
    fn unstructured_warning() {
        let facts = klog_line(6);
        assert_eq!(facts.level, Some(Level::Warn));
        assert!(
            facts
                .message
                .starts_with("k8s.io/client-go/tools/cache/reflector.go:229: ")
        );
        assert_eq!(facts.name, None);
    }

    #[test]
    fn old_klogr_pairs_with_logger_prefix() {
        let expected = LogFacts {
            level: Some(Level::Info),
            logger: some("controller/dockercluster"),
            message: "Reconciling".into(),
            starts_reconcile: true,
            group: some("infrastructure.cluster.x-k8s.io"),
            kind: some("DockerCluster"),
            namespace: some("default"),
            name: some("bmo"),
            ..LogFacts::default()
        };
        assert_eq!(klog_line(7), klog(expected));
    }

    #[test]
    fn structured_requeue_after() {
        let facts = klog_line(8);
        assert_eq!(
            facts.outcome,
            Some(LogOutcome::RequeueAfter(Duration::from_secs(5)))
        );
        assert_eq!(facts.name.as_deref(), Some("train"));
    }

    #[test]
    fn fatal_is_an_error() {
        let facts = klog_line(9);
        assert_eq!(facts.level, Some(Level::Error));
    }

    #[test]
    fn every_line_is_recognised() {
        for text in KLOG.lines() {
            assert_eq!(recognize_line(text).format, LogFormat::Klog, "{text}");
        }
    }

    #[test]
    fn headers() {
        assert!(recognize("I0501 12:00:00.000000 1 main.go:1]").is_some());
        assert!(recognize("I0501 12:00:00.000000 1 main.py:1] python").is_some());
        assert!(recognize("X0501 12:00:00.000000 1 main.go:1] x").is_none());
        assert!(recognize("I05é1 12:00:00.000000 1 main.go:1] x").is_none());
        assert!(recognize("I0501 12:00:00.000000 1 main.go:1 extra] x").is_none());
        assert!(recognize("I0501 12:00:00.000000 1 main.go] x").is_none());
        assert!(recognize("I0501").is_none());
    }
}
