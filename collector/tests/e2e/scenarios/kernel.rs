//! The incident's loop seen by the kernel probe alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opscope_testkit::pod_cgroup::{is_root, kernel_probe_unavailable};
use serde_json::json;

use super::expect::{cause, figure};
use super::{Outcome, spec};
use crate::rig::{OperatorSpec, Rig, Sources};

/// The timestamp loop of an operator nobody instrumented, on a managed cluster: no
/// traces, no metrics scraped, its logs not tailed, no audit webhook. Only the kernel
/// probe sees its pod, sending to the API server far above 50 calls a second:
/// `api_request_storm` (held 20 s in this rig) about the pod, and nothing else.
pub(super) async fn kernel_only_timestamp_loop(rig: Arc<Rig>, name: &'static str) -> Outcome {
    if let Some(reason) = kernel_probe_unavailable(cfg!(feature = "ebpf")) {
        let required = opscope_testkit::backend::backends_required() && is_root();
        return match required {
            true => Err(format!("OPSCOPE_REQUIRE_BACKENDS=1 as root but {reason}")),
            false => Ok(format!(
                "skipped: the kernel probe cannot run here ({reason})"
            )),
        };
    }
    rig.namespaces(name).await;
    let started = Instant::now();
    let looping = rig.start_operator(&OperatorSpec {
        sources: Sources::KernelOnly,
        ..spec(name, &["--mode=timestamp-loop"])
    });
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    let pod_namespace = looping.identity.namespace.clone();
    let pod = looping.identity.pod.clone();
    let signal = rig
        .wait_for_signal(&pod_namespace, Duration::from_secs(90), |s| {
            s["signal"] == "api_request_storm"
                && s["object"]["name"] == pod
                && s["state"] == "firing"
        })
        .await
        .ok_or_else(|| {
            format!(
                "no api_request_storm about {pod_namespace}/{pod} within 90 s; signals: {:?}",
                rig.signals_in(&pod_namespace)
            )
        })?;
    let elapsed = started.elapsed().as_secs_f64();
    if cause(&signal) != "self_triggered_or_retry_storm" {
        return Err(format!(
            "cause {}, not self_triggered_or_retry_storm",
            cause(&signal)
        ));
    }
    let others = rig.signals_in(name);
    if !others.is_empty() {
        return Err(format!(
            "the Widgets' signals need evidence opscope never got: {others:?}"
        ));
    }
    Ok(format!(
        "api_request_storm self_triggered_or_retry_storm about {pod_namespace}/{pod} in {elapsed:.1} s ({:.0} sends/s, {:.0} bytes/s), nothing about its Widgets (no trace, log, audit event or scrape of it reached opscope)",
        figure(&signal, "sends_per_second"),
        figure(&signal, "sent_bytes_per_second"),
    ))
}
