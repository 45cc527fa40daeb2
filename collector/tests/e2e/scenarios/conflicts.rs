//! Two writers of the same objects: a `write_conflict`.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::expect::{cause, expect_firing, figure};
use super::{DETECTION, Outcome, spec};
use crate::rig::{OperatorSpec, Rig};

/// Two processes of one operator, leader election off, writing the same Widgets.
pub(super) async fn two_replicas(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let started = Instant::now();
    let _replicas: Vec<_> = (0..2)
        .map(|replica| {
            rig.start_operator(&OperatorSpec {
                replica,
                ..spec(name, &["--mode=timestamp-loop"])
            })
        })
        .collect();
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    let signal = expect_firing(
        &rig,
        name,
        DETECTION,
        "write_conflict",
        &["split_brain", "concurrent_writers"],
    )
    .await?;
    Ok(format!(
        "write_conflict {} in {:.1} s ({} conflicts)",
        cause(&signal),
        started.elapsed().as_secs_f64(),
        figure(&signal, "conflicts")
    ))
}
