//! Text lines that start with a timestamp and a level, the shape most logging
//! libraries default to: log4j and logback (`2024-05-30 11:37:18,581 INFO  [thread]
//! logger - msg`, no zone), Python's logging as kopf writes it (`[2021-08-18
//! 20:15:46,545] kopf.objects [INFO    ] [ns/name] msg`), Strimzi (`2021-02-26 06:43:06
//! INFO  AbstractOperator:318 - msg`), the `flux logs` CLI, and zap console lines whose
//! tabs became spaces when they were copied out of a terminal (`ts  LEVEL  logger
//! msg {json}`).

use super::fields::json_fields;
use super::json_line::JsonObject;
use super::{Level, LogFacts, LogFormat, facts_from_fields};
use opscope_model::timestamp::{has_zone, parse_timestamp};

/// Words between the timestamp and the level at most (a logger, a thread).
const MAX_WORDS_BEFORE_LEVEL: usize = 2;

/// The facts of a zap console line whose tabs became spaces: a timestamped text line
/// that ends with a JSON context. Tried before kube-rs text, which reads the same start.
pub fn recognize_spaced_console(line: &str) -> Option<LogFacts> {
    if !line.trim_end().ends_with('}') || line.contains('\t') {
        return None;
    }
    let facts = recognize(line)?;
    facts.has_context.then_some(facts.facts)
}

/// The facts of a timestamped text line; `None` unless the line starts with a
/// timestamp (optionally in brackets) and a level word follows within two words.
pub fn recognize(line: &str) -> Option<Recognized> {
    let (time, zoned, after_time) = leading_timestamp(line)?;
    let (logger, level, after_level) = level_word(after_time)?;
    let (text, context) = split_context(after_level);
    let (column_logger, message) = message_of(text);
    // `flux logs` writes the object where log4j writes the logger: keep it in the text.
    let (column_logger, message) = match column_logger {
        Some(subject) if subject.contains('/') => (None, text.trim()),
        other => (other, message),
    };
    let mut facts = LogFacts {
        time_unix_nano: time,
        level: Some(level),
        logger: logger.or(column_logger).map(str::to_string),
        message: message.to_string(),
        zoneless_time: time.is_some() && !zoned,
        ..LogFacts::of_format(LogFormat::TimestampedText)
    };
    let has_context = context.is_some();
    if let Some(context) = context {
        facts_from_fields(json_fields(&context), &mut facts);
    }
    Some(Recognized { facts, has_context })
}

/// A timestamped text line read, and whether it ended with a JSON context.
pub struct Recognized {
    pub facts: LogFacts,
    has_context: bool,
}

/// The time of a leading `2024-05-30 11:37:18,581`, `2024-05-30T11:37:18Z` or either
/// in brackets, and what follows it.
fn leading_timestamp(line: &str) -> Option<(Option<u64>, bool, &str)> {
    let (bracketed, text) = match line.strip_prefix('[') {
        Some(inner) => (true, inner),
        None => (false, line),
    };
    let first_end = text.find([' ', ']', '\t']).unwrap_or(text.len());
    let first = text.get(..first_end)?;
    // A date alone is the first half of `date time`.
    let (stamp, rest) = if first.len() == 10 {
        let after_date = text.get(first_end + 1..)?;
        let time_end = after_date
            .find([' ', ']', '\t'])
            .unwrap_or(after_date.len());
        let end = first_end + 1 + time_end;
        (text.get(..end)?, text.get(end..)?)
    } else {
        (first, text.get(first_end..)?)
    };
    let time = match parse_timestamp(stamp) {
        Some(time) => Some(time),
        // A time of day alone (`17:56:00`, as some terminals print it): the line's
        // shape, but no time to correlate it by.
        None if is_time_of_day(stamp) => None,
        None => return None,
    };
    let rest = if bracketed {
        rest.strip_prefix(']')?
    } else {
        rest
    };
    Some((time, has_zone(stamp), rest.trim_start()))
}

/// `17:56:00`, `17:56:00.123`.
fn is_time_of_day(stamp: &str) -> bool {
    let (clock, fraction) = stamp.split_once(['.', ',']).unwrap_or((stamp, "0"));
    let parts: Vec<&str> = clock.split(':').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|part| part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit()))
        && !fraction.is_empty()
        && fraction.bytes().all(|b| b.is_ascii_digit())
}

/// A level word (`INFO`, `[INFO    ]`) among the first words, the word before it (a
/// logger) if any, and what follows the level.
fn level_word(text: &str) -> Option<(Option<&str>, Level, &str)> {
    let mut rest = text;
    let mut before = None;
    for _ in 0..=MAX_WORDS_BEFORE_LEVEL {
        let (word, after) = next_word(rest)?;
        let bare = word.trim_start_matches('[').trim_end_matches([']', ':']);
        if let Some(level) = Level::parse(bare.trim()) {
            return Some((before, level, after.trim_start()));
        }
        before = Some(word);
        rest = after.trim_start();
    }
    None
}

/// The next word; a bracketed word keeps its padding (`[INFO    ]`).
fn next_word(text: &str) -> Option<(&str, &str)> {
    if text.is_empty() {
        return None;
    }
    let space = text.find([' ', '\t']).unwrap_or(text.len());
    // A bracket a paste left open (`[ERROR Error during …`) ends at the space.
    let bracketed = |close: usize| {
        text.starts_with('[')
            && text
                .get(1..close)
                .is_some_and(|inside| !inside.trim().contains(char::is_whitespace))
    };
    let end = match text.find(']') {
        Some(close) if bracketed(close) => close + 1,
        _ => space,
    };
    Some((text.get(..end)?, text.get(end..)?))
}

/// The text and a trailing `{json}` context, as the zap console encoder ends lines.
fn split_context(text: &str) -> (&str, Option<JsonObject<'_>>) {
    let trimmed = text.trim_end();
    if trimmed.ends_with('}') {
        for (at, _) in trimmed.match_indices(" {") {
            if let Some(context) = trimmed.get(at + 1..).and_then(JsonObject::parse) {
                return (trimmed.get(..at).unwrap_or_default(), Some(context));
            }
        }
    }
    (trimmed, None)
}

/// The logger column and the message: log4j's `[thread] logger - message` and
/// Strimzi's `Class:line - message` end the logger at ` - `; zap's copied console
/// columns are runs of two or more spaces.
fn message_of(text: &str) -> (Option<&str>, &str) {
    // Quarkus: `[logger] (thread) message`.
    if let Some((logger, rest)) = text.strip_prefix('[').and_then(|t| t.split_once("] ("))
        && !logger.contains(' ')
        && let Some((_thread, message)) = rest.split_once(") ")
    {
        return (Some(logger), message.trim());
    }
    if let Some((head, message)) = text.split_once(" - ")
        && head.len() <= 160
        && !head.contains(": ")
    {
        return (head.rsplit(' ').next(), message.trim());
    }
    if let Some((logger, message)) = text.split_once("  ")
        && !logger.contains(' ')
        && !message.trim().is_empty()
    {
        return (Some(logger), message.trim());
    }
    (None, text.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_of_day_alone() {
        // https://github.com/crossplane/crossplane/issues/3540
        let facts = recognize_spaced_console(
            r#"17:56:00 DEBUG    crossplane    Reconciling    {"controller": "packages/provider.pkg.crossplane.io", "request": "/aws"}"#,
        )
        .unwrap();
        assert_eq!(facts.time_unix_nano, None);
        assert_eq!(facts.message, "Reconciling");
        assert_eq!(facts.name.as_deref(), Some("aws"));
        assert!(recognize("17:56 DEBUG x").is_none());
        assert!(recognize("17:56:00 nothing here").is_none());
    }

    #[test]
    fn quarkus_logger_in_brackets() {
        // https://github.com/microcks/microcks-operator/blob/089dd9c221ece39c66f638e2eccd402c42ead13d/README.md
        let facts = recognize(
            "2024-07-31 14:12:18,732 INFO  [io.git.mic.ope.MicrocksReconciler] (ReconcilerExecutor-microcksreconciler-391) Starting reconcile operation for 'microcks'",
        )
        .unwrap()
        .facts;
        assert_eq!(
            facts.logger.as_deref(),
            Some("io.git.mic.ope.MicrocksReconciler")
        );
        assert_eq!(facts.message, "Starting reconcile operation for 'microcks'");
    }

    #[test]
    fn log4j_and_strimzi() {
        let facts = recognize(
            "2021-02-26 06:43:06 INFO  AbstractOperator:318 - Reconciliation #4854(timer) Kafka(default/tom-kafka): reconciled",
        )
        .unwrap()
        .facts;
        assert_eq!(facts.level, Some(Level::Info));
        assert_eq!(facts.logger.as_deref(), Some("AbstractOperator:318"));
        assert_eq!(
            facts.message,
            "Reconciliation #4854(timer) Kafka(default/tom-kafka): reconciled"
        );
        assert_eq!(
            facts.time_unix_nano,
            parse_timestamp("2021-02-26T06:43:06Z")
        );
        let quarkus = recognize("2024-05-30 11:37:18,581 INFO  [org.key.ope.con.KeycloakDeployment] (ReconcilerExecutor-keycloakcontroller-61) Trying to fetch existing Deployment from the API").unwrap().facts;
        assert_eq!(quarkus.level, Some(Level::Info));
        assert!(
            quarkus
                .message
                .ends_with("Trying to fetch existing Deployment from the API")
        );
    }

    #[test]
    fn kopf() {
        let facts = recognize("[2026-04-20 15:15:42,659] kopf.objects         [INFO    ] [tenant1/platform1] Handler 'delete_lease' succeeded.").unwrap().facts;
        assert_eq!(facts.logger.as_deref(), Some("kopf.objects"));
        assert_eq!(facts.level, Some(Level::Info));
        assert_eq!(
            facts.message,
            "[tenant1/platform1] Handler 'delete_lease' succeeded."
        );
    }

    #[test]
    fn zap_console_copied_with_spaces() {
        let facts = recognize("2020-07-22T11:48:27.994+0200    DEBUG   controller-runtime.controller   Successfully Reconciled {\"controller\": \"endpoints\", \"request\": \"kube-system/kube-scheduler\"}").unwrap().facts;
        assert_eq!(
            facts.logger.as_deref(),
            Some("controller-runtime.controller")
        );
        assert_eq!(facts.message, "Successfully Reconciled");
        assert_eq!(facts.controller.as_deref(), Some("endpoints"));
        assert_eq!(facts.name.as_deref(), Some("kube-scheduler"));
        let crossplane = r#"2020-01-26T19:41:59.183-0800    DEBUG   stack-gcp       Reconciling     {"controller": "claimscheduling/postgresqlinstance", "request": "default/app-postgresql"}"#;
        let facts = recognize_spaced_console(crossplane).unwrap();
        assert_eq!(
            facts.controller.as_deref(),
            Some("claimscheduling/postgresqlinstance")
        );
        assert_eq!(facts.namespace.as_deref(), Some("default"));
        assert_eq!(facts.name.as_deref(), Some("app-postgresql"));
        assert!(
            recognize_spaced_console(
                "2024-05-01T12:00:00Z  INFO reconciling object{object.ref=a}: x: y"
            )
            .is_none()
        );
    }

    #[test]
    fn not_text_lines() {
        assert!(recognize("Starting manager").is_none());
        assert!(recognize("2024-05-01T12:00:00Z").is_none());
        assert!(recognize("2024-05-01T12:00:00Z LOUD not a level").is_none());
        assert!(recognize("[2024-05-01 12:00:00").is_none());
    }
}
