//! controller-runtime's zap output, both encoders: JSON lines (`{"level":..,"ts":..,
//! "msg":..,"controller":..}`) and console lines (`ts<TAB>LEVEL<TAB>[logger<TAB>]msg<TAB>{json}`).

use super::continuation::is_go_source_position;
use super::fields::json_fields;
use super::json_join::close_cut_object;
use super::json_line::JsonObject;
use super::{Level, LogFacts, LogFormat, facts_from_fields};
use opscope_model::timestamp::{has_zone, parse_timestamp};

/// The facts of a zap JSON line (or any JSON object line, read with the same keys).
pub fn recognize_json(object: &JsonObject) -> LogFacts {
    let mut facts = LogFacts::of_format(LogFormat::ControllerRuntimeJson);
    facts_from_fields(json_fields(object), &mut facts);
    facts
}

/// The facts of a zap console line: a timestamp (RFC 3339 or epoch seconds) and a
/// level in the first two tab-separated columns, then an optional logger, an optional
/// caller (`file.go:42`), the message and an optional JSON context.
pub fn recognize_console(line: &str) -> Option<LogFacts> {
    let mut columns = line.splitn(3, '\t');
    let stamp = columns.next()?;
    let time = parse_timestamp(stamp)?;
    let level = Level::parse(columns.next()?.trim())?;
    let rest = columns.next().unwrap_or_default();
    let (text, context) = split_context(rest);
    // A context an excerpt cut: its complete members.
    let cut = context
        .is_none()
        .then(|| rest.rsplit_once('\t'))
        .flatten()
        .and_then(|(text, last)| Some((text, close_cut_object(last)?)));
    let text = cut.as_ref().map_or(text, |(text, _)| text);
    let (logger, message) = logger_and_message(text);
    let mut facts = LogFacts {
        time_unix_nano: Some(time),
        zoneless_time: !has_zone(stamp),
        level: Some(level),
        logger: logger.map(str::to_string),
        message: message.to_string(),
        ..LogFacts::of_format(LogFormat::ControllerRuntimeConsole)
    };
    if let Some(context) = context {
        facts_from_fields(json_fields(&context), &mut facts);
    } else if let Some((_, closed)) = &cut
        && let Some(context) = JsonObject::parse(closed)
    {
        facts_from_fields(json_fields(&context), &mut facts);
    }
    Some(facts)
}

/// The text columns and the trailing `{json}` context, when the last column is one.
fn split_context(columns: &str) -> (&str, Option<JsonObject<'_>>) {
    let (text, last) = columns.rsplit_once('\t').unwrap_or(("", columns));
    if last.starts_with('{')
        && let Some(context) = JsonObject::parse(last)
    {
        return (text, Some(context));
    }
    (columns, None)
}

/// The logger (the first of several columns) and the message (the last), skipping a
/// caller column.
fn logger_and_message(text: &str) -> (Option<&str>, &str) {
    let mut columns = text
        .split('\t')
        .filter(|column| !is_go_source_position(column));
    let first = columns.next().unwrap_or_default();
    match columns.next_back() {
        Some(message) => (Some(first), message),
        None => (None, first),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fixtures::{
        CONTROLLER_RUNTIME_CONSOLE, CONTROLLER_RUNTIME_JSON, RAYJOB_CONFLICT, at, line,
        rayjob_train, some,
    };
    use super::super::{LogOutcome, is_continuation, recognize_line};
    use super::*;

    const FIRST_RECONCILE: &str = "a0c1f2e3-4b5c-4d6e-8f70-8192a3b4c5d6";
    const SECOND_RECONCILE: &str = "7d2b9e41-0f3a-4c8d-9b6e-2a5f8c1d3e70";
    const THIRD_RECONCILE: &str = "c3e8a1f0-5b7d-4e29-a6c4-91d0f2b8e357";
    const ES_CONFLICT: &str = "Operation cannot be fulfilled on \
        elasticsearches.elasticsearch.k8s.elastic.co \"logs\": the object has been modified; \
        please apply your changes to the latest version and try again";

    fn json_line(index: usize) -> LogFacts {
        recognize_line(line(CONTROLLER_RUNTIME_JSON, index))
    }

    fn console_line(index: usize) -> LogFacts {
        recognize_line(line(CONTROLLER_RUNTIME_CONSOLE, index))
    }

    fn json(facts: LogFacts) -> LogFacts {
        LogFacts {
            format: LogFormat::ControllerRuntimeJson,
            ..facts
        }
    }

    fn console(facts: LogFacts) -> LogFacts {
        LogFacts {
            format: LogFormat::ControllerRuntimeConsole,
            ..facts
        }
    }

    #[test]
    fn json_rfc3339_ts_without_an_object() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_800, 123_000_000),
            level: Some(Level::Info),
            logger: some("controller-runtime.controller"),
            message: "Starting workers".into(),
            reconcile_id: None,
            namespace: None,
            name: None,
            ..rayjob_train("")
        };
        assert_eq!(json_line(0), json(expected));
    }

    #[test]
    fn json_new_keys_reconciler_error_with_conflict() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_801, 456_000_000),
            level: Some(Level::Error),
            message: "Reconciler error".into(),
            error: some(RAYJOB_CONFLICT),
            outcome: Some(LogOutcome::Error),
            ..rayjob_train(FIRST_RECONCILE)
        };
        assert_eq!(json_line(1), json(expected));
    }

    #[test]
    fn json_epoch_float_ts_and_kind_keyed_object_without_controller_kind() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_801, 500_000_000),
            level: Some(Level::Info),
            logger: some("controllers.RayJob"),
            message: "reconciling RayJob".into(),
            starts_reconcile: true,
            controller: None,
            group: None,
            ..rayjob_train(SECOND_RECONCILE)
        };
        assert_eq!(json_line(2), json(expected));
    }

    #[test]
    fn json_requeue_after() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_802, 1_234_000),
            level: Some(Level::Trace),
            message: "Reconcile done, requeueing after 1m30s".into(),
            outcome: Some(LogOutcome::RequeueAfter(Duration::from_secs(90))),
            ..rayjob_train(SECOND_RECONCILE)
        };
        assert_eq!(json_line(3), json(expected));
    }

    #[test]
    fn json_reconcile_successful() {
        let facts = json_line(4);
        assert_eq!(facts.time_unix_nano, at(1_714_564_802, 1_500_000));
        assert_eq!(facts.outcome, Some(LogOutcome::Ok));
        assert_eq!(facts.reconcile_id.as_deref(), Some(THIRD_RECONCILE));
    }

    #[test]
    fn json_object_key_of_plain_controller_new() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_803, 0),
            level: Some(Level::Info),
            logger: some("cert-rotator"),
            message: "Reconciling".into(),
            starts_reconcile: true,
            reconcile_id: some("0f1e2d3c-4b5a-4968-8776-655443322110"),
            controller: some("cert-rotator"),
            namespace: some("system"),
            name: some("webhook-server-cert"),
            ..LogFacts::default()
        };
        assert_eq!(json_line(5), json(expected));
    }

    #[test]
    fn json_old_reconciler_group_and_kind_keys() {
        let expected = LogFacts {
            time_unix_nano: at(1_589_990_000, 123_456_000),
            level: Some(Level::Debug),
            logger: some("controller-runtime.controller"),
            message: "Successfully Reconciled".into(),
            controller: some("raycluster"),
            group: some("ray.io"),
            kind: some("RayCluster"),
            namespace: some("ml"),
            name: some("head"),
            outcome: Some(LogOutcome::Ok),
            ..LogFacts::default()
        };
        assert_eq!(json_line(6), json(expected));
    }

    #[test]
    fn json_old_request_key_with_iso8601_offset() {
        let expected = LogFacts {
            time_unix_nano: at(1_592_467_488, 756_000_000),
            level: Some(Level::Error),
            logger: some("controller-runtime.controller"),
            message: "Reconciler error".into(),
            controller: some("elasticsearch-controller"),
            namespace: some("prod"),
            name: some("logs"),
            error: some(ES_CONFLICT),
            outcome: Some(LogOutcome::Error),
            ..LogFacts::default()
        };
        assert_eq!(json_line(7), json(expected));
    }

    #[test]
    fn json_old_request_key_of_a_cluster_scoped_object() {
        let facts = json_line(8);
        assert_eq!(facts.time_unix_nano, at(1_592_467_500, 0));
        assert_eq!(facts.namespace, None);
        assert_eq!(facts.name.as_deref(), Some("cluster-admin-binding"));
        assert_eq!(facts.outcome, Some(LogOutcome::Error));
    }

    #[test]
    fn json_requeue_without_delay() {
        let facts = json_line(9);
        assert_eq!(facts.outcome, Some(LogOutcome::Requeue));
        assert_eq!(facts.name.as_deref(), Some("train"));
    }

    #[test]
    fn console_with_logger_and_no_context() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_800, 123_000_000),
            level: Some(Level::Info),
            logger: some("setup"),
            message: "starting manager".into(),
            ..LogFacts::default()
        };
        assert_eq!(console_line(0), console(expected));
    }

    #[test]
    fn console_without_logger_column() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_800, 456_000_000),
            level: Some(Level::Info),
            message: "Starting workers".into(),
            reconcile_id: None,
            namespace: None,
            name: None,
            ..rayjob_train("")
        };
        assert_eq!(console_line(1), console(expected));
    }

    #[test]
    fn console_error_with_conflict_followed_by_its_stack_trace() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_801, 789_000_000),
            level: Some(Level::Error),
            logger: some("controller-runtime.controller"),
            message: "Reconciler error".into(),
            error: some(RAYJOB_CONFLICT),
            outcome: Some(LogOutcome::Error),
            ..rayjob_train(FIRST_RECONCILE)
        };
        assert_eq!(console_line(2), console(expected));
        assert!(!is_continuation(line(CONTROLLER_RUNTIME_CONSOLE, 2)));
        for index in 3..=8 {
            assert!(
                is_continuation(line(CONTROLLER_RUNTIME_CONSOLE, index)),
                "line {index}"
            );
        }
    }

    #[test]
    fn console_epoch_float_ts_and_lowercase_kind_key() {
        let expected = LogFacts {
            time_unix_nano: at(1_683_647_419, 559_498_300),
            level: Some(Level::Error),
            message: "Reconciler error".into(),
            reconcile_id: some("e4d3c2b1-a098-4765-8432-10fedcba9876"),
            controller: some("gitrepository"),
            group: some("scm.example.com"),
            kind: some("GitRepository"),
            namespace: some("platform"),
            name: some("billing-api"),
            error: some(
                "failed to fetch repository: GET https://api.github.com/repos/acme/billing-api: \
                 401 Bad credentials []",
            ),
            outcome: Some(LogOutcome::Error),
            ..LogFacts::default()
        };
        assert_eq!(console_line(9), console(expected));
        for index in 10..=13 {
            assert!(
                is_continuation(line(CONTROLLER_RUNTIME_CONSOLE, index)),
                "line {index}"
            );
        }
    }

    #[test]
    fn console_requeue_after_at_a_verbose_level() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_802, 0),
            level: Some(Level::Trace),
            message: "Reconcile done, requeueing after 500ms".into(),
            outcome: Some(LogOutcome::RequeueAfter(Duration::from_millis(500))),
            ..rayjob_train(SECOND_RECONCILE)
        };
        assert_eq!(console_line(14), console(expected));
    }

    #[test]
    fn console_old_request_key_with_iso8601_offset() {
        let expected = LogFacts {
            time_unix_nano: at(1_592_467_488, 756_000_000),
            level: Some(Level::Error),
            logger: some("controller-runtime.controller"),
            message: "Reconciler error".into(),
            controller: some("elasticsearch-controller"),
            namespace: some("prod"),
            name: some("logs"),
            error: some(ES_CONFLICT),
            outcome: Some(LogOutcome::Error),
            ..LogFacts::default()
        };
        assert_eq!(console_line(15), console(expected));
        assert!(is_continuation(line(CONTROLLER_RUNTIME_CONSOLE, 16)));
        assert!(is_continuation(line(CONTROLLER_RUNTIME_CONSOLE, 17)));
    }

    #[test]
    fn console_with_colour_codes() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_803, 0),
            level: Some(Level::Info),
            logger: some("controllers.RayJob"),
            message: "Reconcile successful".into(),
            outcome: Some(LogOutcome::Ok),
            ..rayjob_train(THIRD_RECONCILE)
        };
        assert_eq!(console_line(18), console(expected));
    }

    #[test]
    fn console_with_caller_column() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_804, 0),
            level: Some(Level::Debug),
            logger: some("controllers.RayJob"),
            message: "reconciling RayJob".into(),
            starts_reconcile: true,
            controller: None,
            group: None,
            ..rayjob_train(THIRD_RECONCILE)
        };
        assert_eq!(console_line(19), console(expected));
    }

    #[test]
    fn console_old_reconciler_group_and_kind_keys() {
        let facts = console_line(20);
        assert_eq!(facts.time_unix_nano, at(1_614_834_367, 890_000_000));
        assert_eq!(facts.group.as_deref(), Some("ray.io"));
        assert_eq!(facts.kind.as_deref(), Some("RayCluster"));
        assert_eq!(facts.namespace.as_deref(), Some("ml"));
        assert_eq!(facts.name.as_deref(), Some("head"));
        assert_eq!(facts.outcome, Some(LogOutcome::Ok));
    }

    #[test]
    fn console_object_key() {
        let facts = console_line(21);
        assert_eq!(facts.controller.as_deref(), Some("cert-rotator"));
        assert_eq!(facts.namespace.as_deref(), Some("system"));
        assert_eq!(facts.name.as_deref(), Some("webhook-server-cert"));
    }

    #[test]
    fn panic_after_a_record_is_a_new_record_then_continuations() {
        assert!(!is_continuation(line(CONTROLLER_RUNTIME_CONSOLE, 22)));
        assert_eq!(console_line(22).format, LogFormat::Plain);
        let total = CONTROLLER_RUNTIME_CONSOLE.lines().count();
        for index in 23..total {
            assert!(
                is_continuation(line(CONTROLLER_RUNTIME_CONSOLE, index)),
                "line {index}"
            );
        }
    }

    #[test]
    fn every_json_line_is_recognised() {
        for text in CONTROLLER_RUNTIME_JSON.lines() {
            assert_eq!(
                recognize_line(text).format,
                LogFormat::ControllerRuntimeJson,
                "{text}"
            );
        }
    }

    #[test]
    fn every_console_line_is_a_record_or_a_continuation() {
        for text in CONTROLLER_RUNTIME_CONSOLE.lines() {
            let is_record = recognize_line(text).format == LogFormat::ControllerRuntimeConsole;
            assert!(
                is_record != is_continuation(text) || text.starts_with("panic: "),
                "{text}"
            );
        }
    }

    #[test]
    fn console_context_that_is_not_json_stays_in_the_message() {
        let facts = recognize_line("2024-05-01T12:00:00Z\tINFO\tlogger\tmsg\t{broken");
        assert_eq!(facts.logger.as_deref(), Some("logger"));
        assert_eq!(facts.message, "{broken");
        let bare = recognize_line("2024-05-01T12:00:00Z\tWARN");
        assert_eq!(bare.format, LogFormat::ControllerRuntimeConsole);
        assert_eq!(bare.message, "");
    }
}
