//! The API server down in the middle of the incident's loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::expect::{cause, expect_firing, is, poll, status_rate};
use super::{DETECTION, Outcome, spec};
use crate::rig::Rig;

/// The API server killed for 30 s in the middle of the incident's loop, alone on the
/// control plane: opscope keeps running, and after the restart the loop is found again
/// with its cause.
pub(super) async fn apiserver_outage(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let quiet_rate = status_rate(&rig, Duration::from_secs(5)).await;
    let _looping = rig.start_operator(&spec(name, &["--mode=timestamp-loop"]));
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    let churn = "field_churn:status.lastReconcileTime";
    expect_firing(&rig, name, DETECTION, "reconcile_loop", &[churn]).await?;
    let looping_rate = status_rate(&rig, Duration::from_secs(5)).await;
    rig.control_plane.kill_apiserver();
    let outage = Instant::now();
    let mut resident = Vec::new();
    let mut most_queued: f64 = 0.0;
    while outage.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if !rig.deployment.healthy() {
            return Err(format!(
                "opscope is not healthy {:.0} s into the outage",
                outage.elapsed().as_secs_f64()
            ));
        }
        resident.push(rig.deployment.largest_resident());
        let (queued, capacity) = (
            rig.deployment.metric("opscope_exporter_queue_size"),
            rig.deployment.metric("opscope_exporter_queue_capacity"),
        );
        if queued > capacity {
            return Err(format!(
                "opscope's queues hold {queued}, over their capacity {capacity}"
            ));
        }
        most_queued = most_queued.max(queued);
    }
    let before_restart = rig.signals_in(name).len();
    rig.control_plane.start_apiserver().await;
    let restarted = Instant::now();
    // The operator comes back on its own time: client-go's watch reconnects with a
    // backoff grown over the outage (up to 30 s, jittered). The new API server's
    // counters start from zero.
    let resume_limit = Duration::from_secs(120);
    poll(resume_limit, || async {
        (rig.status_requests().await >= 30.0).then_some(())
    })
    .await
    .ok_or_else(|| {
        format!("the operator wrote no status within {resume_limit:?} of the restart")
    })?;
    let resumed = restarted.elapsed();
    // The loop's window may still hold the reconciles of before the outage: what
    // shows that opscope follows the loop after it is the next change it sends
    // (figures are sent at most every 30 s), firing with the same cause.
    let limit = Duration::from_secs(45);
    let seen_after = poll(limit, || async {
        let after: Vec<Value> = rig
            .signals_in(name)
            .into_iter()
            .skip(before_restart)
            .collect();
        after
            .iter()
            .any(|s| is(s, "reconcile_loop", "w1", "firing") && cause(s) == churn)
            .then_some(after)
    })
    .await
    .ok_or_else(|| {
        let after: Vec<String> = rig
            .signals_in(name)
            .iter()
            .skip(before_restart)
            .map(|s| format!("{} {}", s["state"], s["cause"]))
            .collect();
        format!("no firing {churn} within {limit:?} of the operator's return: {after:?}")
    })?;
    let resolved_in_outage = seen_after.iter().any(|s| s["state"] == "resolved");
    let peak = resident.iter().max().copied().unwrap_or(0);
    Ok(format!(
        "widgets/status requests {quiet_rate:.1}/s before the loop, {looping_rate:.1}/s during; opscope healthy through a 30 s outage (RSS ≤ {:.0} MiB, at most {most_queued} batches queued); the operator wrote again {:.1} s after the restart, the loop {} {:.1} s after that",
        peak as f64 / (1024.0 * 1024.0),
        resumed.as_secs_f64(),
        if resolved_in_outage {
            "resolved while the operator was away, fired again"
        } else {
            "still firing, updated"
        },
        (restarted.elapsed() - resumed).as_secs_f64(),
    ))
}
