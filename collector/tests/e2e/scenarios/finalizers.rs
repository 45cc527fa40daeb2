//! Finalizers that hold a deleted Widget: their cleanup failing, or their operator
//! gone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::expect::{evidence, expect_firing, figure};
use super::{DETECTION, FINALIZER_MAX_AGE, FINALIZER_WAIT, Outcome, spec};
use crate::rig::Rig;

/// Creates Widget w1, waits for the operator's finalizer on it, and returns when it is there.
async fn finalized_widget(rig: &Rig, name: &str) -> Result<(), String> {
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    let deadline = Instant::now() + DETECTION;
    loop {
        let finalizers = rig
            .widget(name, "w1")
            .await
            .and_then(|w| w["metadata"]["finalizers"].as_array().map(Vec::len))
            .unwrap_or(0);
        if finalizers > 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the operator did not add its finalizer within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A finalizer whose cleanup fails on every deletion.
pub(super) async fn stuck_finalizer(rig: Arc<Rig>, name: &'static str) -> Outcome {
    finalizer_leak(&rig, name, false).await
}

/// The same finalizer, its operator gone before the Widget is deleted.
pub(super) async fn orphaned_finalizer(rig: Arc<Rig>, name: &'static str) -> Outcome {
    finalizer_leak(&rig, name, true).await
}

/// Deletes a Widget the stuck-finalizer operator holds (stopped first when
/// `orphaned`): `cleanup_failing` while it runs, `no_controller` when it is gone.
async fn finalizer_leak(rig: &Rig, name: &str, orphaned: bool) -> Outcome {
    rig.namespaces(name).await;
    let mut operator = rig.start_operator(&spec(name, &["--mode=stuck-finalizer"]));
    finalized_widget(rig, name).await?;
    if orphaned {
        operator.kill();
    }
    let deleted = Instant::now();
    rig.delete_widget(name, "w1").await?;
    let wanted = if orphaned {
        "no_controller"
    } else {
        "cleanup_failing"
    };
    let signal = expect_firing(rig, name, FINALIZER_WAIT, "finalizer_leak", &[wanted]).await?;
    let first_evidence = evidence(&signal, "").first().copied().unwrap_or_default();
    Ok(format!(
        "finalizer_leak {wanted} {:.1} s after the deletion (max_age {FINALIZER_MAX_AGE}), {} reconciles since, evidence {first_evidence:?}",
        deleted.elapsed().as_secs_f64(),
        figure(&signal, "reconciles_since_deletion")
    ))
}
