//! The incident's reconcile loop: on controller-runtime with its fix, on kube-rs, seen
//! through traces alone, and the fixed requeue that is a loop too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::expect::{evidence, expect_firing, expect_resolved, figure, status_rate};
use super::trail::{backends_show_the_loop, check_evidence};
use super::{DETECTION, Outcome, RESOLUTION, spec};
use crate::rig::{OperatorSpec, Rig, Sources};

/// The incident: a Go controller-runtime operator that writes the time into status on
/// every reconcile, with no predicate; then replaced by its fix.
pub(super) async fn timestamp_loop(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let quiet_rate = status_rate(&rig, Duration::from_secs(5)).await;
    let started = Instant::now();
    let mut looping = rig.start_operator(&spec(name, &["--mode=timestamp-loop"]));
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    let churn = "field_churn:status.lastReconcileTime";
    let signal = expect_firing(&rig, name, DETECTION, "reconcile_loop", &[churn]).await?;
    let detected = started.elapsed();
    let looping_rate = status_rate(&rig, Duration::from_secs(5)).await;
    if !signal["hint"].as_str().is_some_and(|hint| {
        hint.contains("GenerationChangedPredicate") && hint.contains("lastReconcileTime")
    }) {
        return Err(format!(
            "the hint names neither the predicate nor the field: {}",
            signal["hint"]
        ));
    }
    let evidence = check_evidence(&rig, &signal, &looping.log_tail(usize::MAX)).await?;
    let stores = backends_show_the_loop(&rig, name, churn).await?;
    looping.kill();
    let replaced = Instant::now();
    let _fixed = rig.start_operator(&OperatorSpec {
        replica: 1,
        ..spec(name, &["--mode=fixed"])
    });
    expect_resolved(&rig, name, RESOLUTION, "reconcile_loop").await?;
    Ok(format!(
        "reconcile_loop {churn} in {:.1} s ({:.0} reconciles/min); cluster-wide widgets/status requests {quiet_rate:.1}/s before, {looping_rate:.1}/s during; resolved {:.0} s after the fix; {evidence}; {stores}",
        detected.as_secs_f64(),
        figure(&signal, "reconciles_per_minute"),
        replaced.elapsed().as_secs_f64(),
    ))
}

/// The incident again, on kube-rs.
pub(super) async fn kube_rs_timestamp_loop(rig: Arc<Rig>, name: &'static str) -> Outcome {
    if rig.binaries.rust_operator.is_none() {
        return Ok("skipped: the kube-rs operator is not built".into());
    }
    rig.namespaces(name).await;
    let started = Instant::now();
    let looping = rig.start_operator(&OperatorSpec {
        kube_rs: true,
        ..spec(name, &["--mode=timestamp-loop"])
    });
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    let churn = "field_churn:status.lastReconcileTime";
    let signal = expect_firing(&rig, name, DETECTION, "reconcile_loop", &[churn]).await?;
    let evidence = check_evidence(&rig, &signal, &looping.log_tail(usize::MAX)).await?;
    Ok(format!(
        "reconcile_loop {churn} in {:.1} s ({:.0} reconciles/min); {evidence}",
        started.elapsed().as_secs_f64(),
        figure(&signal, "reconciles_per_minute"),
    ))
}

/// The incident where opscope has the operator's traces alone: no audit bodies to
/// show which field churns, the traced status writes show the loop feeds itself.
pub(super) async fn traces_only_timestamp_loop(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let started = Instant::now();
    let _looping = rig.start_operator(&OperatorSpec {
        sources: Sources::TracesOnly,
        ..spec(name, &["--mode=timestamp-loop"])
    });
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    let cause_name = "self_triggered_status_write";
    let signal = expect_firing(&rig, name, DETECTION, "reconcile_loop", &[cause_name]).await?;
    let traces = evidence(&signal, "trace").len();
    if traces == 0 {
        return Err(format!("no trace in the evidence {}", signal["evidence"]));
    }
    Ok(format!(
        "reconcile_loop {cause_name} in {:.1} s ({:.0} status writes in the window), {traces} traces in the evidence",
        started.elapsed().as_secs_f64(),
        figure(&signal, "status_writes"),
    ))
}

/// `RequeueAfter: time.Second`, forever.
pub(super) async fn fixed_requeue(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let started = Instant::now();
    let _operator = rig.start_operator(&spec(name, &["--mode=fixed-requeue"]));
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    // 30 reconciles a second apart take 30 s; the window then holds the threshold.
    let limit = DETECTION + Duration::from_secs(15);
    expect_firing(&rig, name, limit, "reconcile_loop", &["fixed_requeue"]).await?;
    Ok(format!(
        "reconcile_loop fixed_requeue in {:.1} s",
        started.elapsed().as_secs_f64()
    ))
}
