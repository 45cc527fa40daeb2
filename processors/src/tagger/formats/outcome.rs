//! How a reconcile ended, as log records say it: controller-runtime's `Reconciler error`,
//! `Reconcile done, requeueing after 5s` and `Reconcile successful`, and common variants.

use std::time::Duration;

use super::go_duration::parse_go_duration;

/// How a reconcile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOutcome {
    Error,
    Requeue,
    RequeueAfter(Duration),
    Ok,
}

/// Message starts (any case) that report a failed reconcile.
const ERROR_STARTS: &[&str] = &[
    "reconciler error",
    "reconcile failed",
    "reconciler failed",
    "reconciliation failed",
    "reconcile error",
    "reconciling err",
    "error reconciling",
    "failed to reconcile",
    "error syncing",
];
/// Phrases (lowercase) anywhere in a message that report a failed reconcile:
/// cert-manager's `re-queuing item … due to error`, kopf's `Handler 'x' failed`.
const ERROR_PHRASES: &[&str] = &[
    "re-queuing item",
    "' failed temporarily",
    "' failed permanently",
    "' failed with an exception",
];
/// Message starts (any case) that report a successful reconcile.
const OK_STARTS: &[&str] = &[
    "reconcile successful",
    "successfully reconciled",
    "reconciled successfully",
    "successfully synced",
    "reconcile succeeded",
    "reconciliation completed",
    "reconciliation finished",
    "reconciliation done",
    "reconciled release",
    "reconcile done",
];
/// Phrases (lowercase) anywhere in a message that report a finished reconcile:
/// `<== Reconciled Component`, Strimzi's `Kafka(ns/name): reconciled`, kopf's
/// `Handler 'x' succeeded`, JOSDK's `--- Reconciliation finished successfully`.
const OK_PHRASES: &[&str] = &[
    "<== reconciled",
    "): reconciled",
    "' succeeded",
    "reconciliation finished successfully",
    "successfully reconciled",
];
/// Message starts (lowercase, after `==> ` and the like) of a reconcile's first line.
const START_STARTS: &[&str] = &[
    "reconciling",
    "syncing item",
    "starting reconcil",
    "reconcile started",
    "start reconcil",
];
/// Phrases (lowercase) of a reconcile's first line: kopf's `Handler 'x' is invoked`.
const START_PHRASES: &[&str] = &["' is invoked"];
/// Phrases (lowercase: messages are compared lowercased) followed by a Go duration:
/// a requeue after a delay.
const REQUEUE_AFTER_PHRASES: &[&str] = &[
    "requeueing after ",
    "requeuing after ",
    "requeue after ",
    // Flux: `Reconciliation finished in 1.2s, next run in 10m0s`.
    "next run in ",
];
/// Words (lowercase) that report a requeue without a delay.
const REQUEUE_WORDS: &[&str] = &["requeueing", "requeuing"];

impl LogOutcome {
    /// The outcome a log message reports, if it reports one.
    pub fn from_message(message: &str) -> Option<LogOutcome> {
        if starts_with_any(message, ERROR_STARTS) {
            return Some(LogOutcome::Error);
        }
        let lowercase = message.to_ascii_lowercase();
        if ERROR_PHRASES
            .iter()
            .any(|phrase| lowercase.contains(phrase))
        {
            return Some(LogOutcome::Error);
        }
        if let Some(delay) = requeue_delay(&lowercase) {
            return Some(LogOutcome::RequeueAfter(delay));
        }
        if REQUEUE_WORDS.iter().any(|word| lowercase.contains(word)) {
            return Some(LogOutcome::Requeue);
        }
        (starts_with_any(message, OK_STARTS)
            || OK_PHRASES.iter().any(|phrase| lowercase.contains(phrase))
            || is_short_reconciled(&lowercase))
        .then_some(LogOutcome::Ok)
    }

    /// Whether the message is the first line of a reconcile (`Reconciling …`).
    pub fn is_start(message: &str) -> bool {
        let bare = message.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
        if starts_with_any(bare, START_STARTS) {
            return true;
        }
        let lowercase = message.to_ascii_lowercase();
        START_PHRASES
            .iter()
            .any(|phrase| lowercase.contains(phrase))
    }

    /// opscope's own `reconcile.result` (`ok`, `error`, `requeue`, `requeue_after`) with
    /// `reconcile.requeue_after` in seconds.
    pub fn from_result(result: &str, requeue_after_seconds: Option<f64>) -> Option<LogOutcome> {
        match result {
            "ok" => Some(LogOutcome::Ok),
            "error" => Some(LogOutcome::Error),
            "requeue" => Some(LogOutcome::Requeue),
            "requeue_after" => requeue_after_seconds
                .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
                .map(LogOutcome::RequeueAfter),
            _ => None,
        }
    }
}

/// The Go duration after a requeue phrase in a lowercased message (`requeueing after
/// 1m30s,` → 90 s).
fn requeue_delay(lowercase: &str) -> Option<Duration> {
    REQUEUE_AFTER_PHRASES.iter().find_map(|phrase| {
        let (_, after) = lowercase.split_once(phrase)?;
        let token = after
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ')'))
            .next()?;
        parse_go_duration(token.trim_end_matches('.'))
    })
}

fn starts_with_any(message: &str, starts: &[&str]) -> bool {
    starts.iter().any(|start| {
        message
            .as_bytes()
            .get(..start.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(start.as_bytes()))
    })
}

/// `Reconciled`, `Reconciled NifiCluster`: a short message that starts with the word
/// (nifikop ends each reconcile so), where a longer one may only mention it.
fn is_short_reconciled(lowercase: &str) -> bool {
    let mut words = lowercase.split_whitespace();
    words.next() == Some("reconciled") && words.count() <= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(message: &str) -> Option<LogOutcome> {
        LogOutcome::from_message(message)
    }

    #[test]
    fn controller_runtime_messages() {
        assert_eq!(outcome("Reconciler error"), Some(LogOutcome::Error));
        assert_eq!(
            outcome("Reconcile done, requeueing after 1m30s"),
            Some(LogOutcome::RequeueAfter(Duration::from_secs(90)))
        );
        assert_eq!(
            outcome("Reconcile done, requeueing"),
            Some(LogOutcome::Requeue)
        );
        assert_eq!(outcome("Reconcile successful"), Some(LogOutcome::Ok));
        assert_eq!(outcome("Successfully Reconciled"), Some(LogOutcome::Ok));
    }

    #[test]
    fn variants_and_punctuation() {
        assert_eq!(
            outcome("Requeue after 500ms."),
            Some(LogOutcome::RequeueAfter(Duration::from_millis(500)))
        );
        assert_eq!(
            outcome("cluster not ready (requeuing after 10s)"),
            Some(LogOutcome::RequeueAfter(Duration::from_secs(10)))
        );
        assert_eq!(
            outcome("reconcile failed: timeout, requeueing after 5s"),
            Some(LogOutcome::Error)
        );
        assert_eq!(outcome("requeueing after soon"), Some(LogOutcome::Requeue));
    }

    #[test]
    fn phrases_of_other_frameworks() {
        assert_eq!(
            outcome("Reconcile succeeded. Time taken: 5.8ms."),
            Some(LogOutcome::Ok)
        );
        assert_eq!(
            outcome("Reconciliation finished in 1.226658581s, next run in 10m0s"),
            Some(LogOutcome::RequeueAfter(Duration::from_secs(600)))
        );
        assert_eq!(outcome("<== Reconciled Component"), Some(LogOutcome::Ok));
        // https://github.com/sieve-project/sieve (nifikop's log, committed whole)
        assert_eq!(outcome("Reconciled"), Some(LogOutcome::Ok));
        assert_eq!(
            outcome("Reconciled objects are listed below for the audit"),
            None
        );
        assert_eq!(
            outcome("Reconciliation #4854(timer) Kafka(default/tom-kafka): reconciled"),
            Some(LogOutcome::Ok)
        );
        assert_eq!(
            outcome("Handler 'delete_lease' succeeded."),
            Some(LogOutcome::Ok)
        );
        assert_eq!(
            outcome("Handler 'create' failed temporarily: retry"),
            Some(LogOutcome::Error)
        );
        assert_eq!(
            outcome(
                "ingress-shim controller: Re-queuing item \"default/example\" due to error processing"
            ),
            Some(LogOutcome::Error)
        );
        assert_eq!(
            outcome("reconciling err: not found"),
            Some(LogOutcome::Error)
        );
        assert!(LogOutcome::is_start("==> Reconciling Component"));
        assert!(LogOutcome::is_start("Reconciling IstioOperator"));
        assert!(LogOutcome::is_start("Handler 'created1' is invoked."));
        assert!(!LogOutcome::is_start("Starting workers"));
    }

    #[test]
    fn other_messages_say_nothing() {
        assert_eq!(outcome("Starting workers"), None);
        assert_eq!(outcome(""), None);
        assert_eq!(outcome("é"), None);
        assert_eq!(outcome("an error: reconciler error"), None);
    }

    #[test]
    fn own_result_attribute() {
        assert_eq!(LogOutcome::from_result("ok", None), Some(LogOutcome::Ok));
        assert_eq!(
            LogOutcome::from_result("requeue_after", Some(5.0)),
            Some(LogOutcome::RequeueAfter(Duration::from_secs(5)))
        );
        assert_eq!(LogOutcome::from_result("requeue_after", Some(-1.0)), None);
        assert_eq!(LogOutcome::from_result("requeue_after", None), None);
        assert_eq!(LogOutcome::from_result("maybe", None), None);
    }
}
