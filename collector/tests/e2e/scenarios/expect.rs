//! Reading what opscope said: a signal's kind, cause, figures and evidence, and
//! waiting for the change a scenario expects.

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::rig::Rig;

/// Whether `signal` is a change to `state` of signal `kind` about Widget `name`.
pub(super) fn is(signal: &Value, kind: &str, name: &str, state: &str) -> bool {
    signal["signal"] == kind && signal["object"]["name"] == name && signal["state"] == state
}

pub(super) fn cause(signal: &Value) -> &str {
    signal["cause"].as_str().unwrap_or_default()
}

pub(super) fn figure(signal: &Value, name: &str) -> f64 {
    signal["figures"][name].as_f64().unwrap_or(f64::NAN)
}

/// The evidence references of `signal` that start with `kind` (`trace`, `audit`).
pub(super) fn evidence<'a>(signal: &'a Value, kind: &str) -> Vec<&'a str> {
    signal["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|reference| reference.starts_with(kind))
        .collect()
}

/// Runs `probe` every 250 ms until it answers `Some` or `limit` has passed.
pub(super) async fn poll<T, F: Future<Output = Option<T>>>(
    limit: Duration,
    mut probe: impl FnMut() -> F,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = probe().await {
            return Some(found);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits up to `limit` for signal `kind` firing on Widget w1 of `namespace` with one
/// of `causes`: a signal first fired on partial evidence is sent again as soon as its
/// cause is known.
pub(super) async fn expect_firing(
    rig: &Rig,
    namespace: &str,
    limit: Duration,
    kind: &str,
    causes: &[&str],
) -> Result<Value, String> {
    rig.wait_for_signal(namespace, limit, |s| {
        is(s, kind, "w1", "firing") && causes.contains(&cause(s))
    })
    .await
    .ok_or_else(|| {
        format!(
            "no {kind} {causes:?} within {limit:?}; signals of {namespace}: {:?}",
            rig.signals_in(namespace)
                .iter()
                .map(|s| format!(
                    "{} {} {} {}",
                    s["signal"], s["state"], s["object"]["name"], s["cause"]
                ))
                .collect::<Vec<_>>()
        )
    })
}

pub(super) async fn expect_resolved(
    rig: &Rig,
    namespace: &str,
    limit: Duration,
    kind: &str,
) -> Result<(), String> {
    rig.wait_for_signal(namespace, limit, |s| is(s, kind, "w1", "resolved"))
        .await
        .map(drop)
        .ok_or_else(|| format!("{kind} of {namespace}/w1 not resolved within {limit:?}"))
}

/// The API server's rate of Widget status requests over `span` (all namespaces).
pub(super) async fn status_rate(rig: &Rig, span: Duration) -> f64 {
    let before = rig.status_requests().await;
    tokio::time::sleep(span).await;
    (rig.status_requests().await - before) / span.as_secs_f64()
}
