//! Healthy operators that must get no signal: the fix under spec changes, and
//! failures backing off.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Outcome, QUIET, spec};
use crate::rig::Rig;

/// The fix alone, its Widgets' specs changed every 5 s: nothing may fire.
pub(super) async fn fixed(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let _fixed = rig.start_operator(&spec(name, &["--mode=fixed"]));
    for widget in ["w1", "w2"] {
        rig.create_widget(name, widget, json!({ "size": 0 }))
            .await?;
    }
    let started = Instant::now();
    let mut changes = 0;
    while started.elapsed() < QUIET {
        tokio::time::sleep(Duration::from_secs(5)).await;
        changes += 1;
        for widget in ["w1", "w2"] {
            rig.patch_widget(name, widget, json!({ "spec": { "size": changes } }))
                .await?;
        }
    }
    let signals = rig.signals_in(name);
    if !signals.is_empty() {
        return Err(format!("signals fired: {signals:?}"));
    }
    let observed = rig
        .widget(name, "w1")
        .await
        .and_then(|w| w["status"]["observedGeneration"].as_i64())
        .unwrap_or(0);
    Ok(format!(
        "no signal over {:.0} s and {changes} spec changes of 2 widgets (observedGeneration {observed})",
        QUIET.as_secs_f64()
    ))
}

/// Every reconcile fails, retried by the default rate limiter (exponential): not a loop.
pub(super) async fn backoff(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let operator = rig.start_operator(&spec(name, &["--mode=failing"]));
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    tokio::time::sleep(QUIET).await;
    let signals = rig.signals_in(name);
    if !signals.is_empty() {
        return Err(format!("signals fired: {signals:?}"));
    }
    let errors = operator
        .log_tail(10_000)
        .lines()
        .filter(|line| line.contains("Reconciler error"))
        .count();
    if errors < 5 {
        return Err(format!(
            "only {errors} failed reconciles logged: the scenario did not run"
        ));
    }
    Ok(format!(
        "no signal over {:.0} s of {errors} failed reconciles backing off",
        QUIET.as_secs_f64()
    ))
}
