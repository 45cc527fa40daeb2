//! Where a signal leads: its evidence to the operator's log and its traces in Jaeger,
//! a loop to its alert in Alertmanager and its series in Prometheus 3.

use std::time::Duration;

use opscope_testkit::alertmanager::labels;
use serde_json::Value;

use super::expect::{evidence, poll};
use crate::rig::Rig;

/// The evidence leads somewhere real: an audit event of the API server (its UUID),
/// and each reconcile to a line of the operator's log or, when it names a trace (a
/// sampling logger leaves reconciles out of the log), to that trace in Jaeger.
pub(super) async fn check_evidence(
    rig: &Rig,
    signal: &Value,
    operator_log: &str,
) -> Result<String, String> {
    let audited = evidence(signal, "audit").iter().any(|reference| {
        let id = reference.split_whitespace().nth(1).unwrap_or_default();
        id.len() == 36 && id.matches('-').count() == 4
    });
    if !audited {
        return Err(format!(
            "no audit event in the evidence {}",
            signal["evidence"]
        ));
    }
    let (mut in_log, mut in_jaeger) = (0, 0);
    for reference in signal["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let Some(reconcile) = reference.split("reconcile ").nth(1) else {
            continue;
        };
        if operator_log.contains(reconcile) {
            in_log += 1;
            continue;
        }
        let trace = opscope_model::signal::evidence_reference(reference, "trace");
        let found = match (trace, &rig.backends) {
            (Some(trace), Some(backends)) => poll(Duration::from_secs(15), || async {
                let spans = backends.jaeger.trace(trace).await;
                spans
                    .iter()
                    .any(|span| span.tag("reconcile.id").as_deref() == Some(reconcile))
                    .then_some(())
            })
            .await
            .is_some(),
            // Without Jaeger (not built, the run skipping what needs it) a trace
            // cannot be looked up: the reference is taken as it is.
            (Some(_), None) => true,
            (None, _) => false,
        };
        if !found {
            return Err(format!(
                "reconcile {reconcile} of the evidence is neither in the operator's log nor in Jaeger: {}",
                signal["evidence"]
            ));
        }
        in_jaeger += 1;
    }
    if in_log + in_jaeger == 0 {
        return Err(format!(
            "no reconcile in the evidence {}",
            signal["evidence"]
        ));
    }
    Ok(format!(
        "evidence: an audit event, {in_log} reconciles in the log, {in_jaeger} by their trace in Jaeger"
    ))
}

/// What the platform team's stores show of the loop: its alert in Alertmanager, its
/// series in Prometheus 3, and in Jaeger the signal span linked to a looping
/// reconcile's trace.
pub(super) async fn backends_show_the_loop(
    rig: &Rig,
    namespace: &str,
    cause_name: &str,
) -> Result<String, String> {
    let Some(backends) = &rig.backends else {
        return Ok("the backends are not built".into());
    };
    let limit = Duration::from_secs(30);
    let alert = poll(limit, || async {
        let alerts = backends
            .alertmanager
            .active_alerts("OperatorReconcileLoop")
            .await;
        alerts.into_iter().find(|alert| {
            let labels = labels(alert);
            labels.get("namespace").map(String::as_str) == Some(namespace)
                && labels.get("name").map(String::as_str) == Some("w1")
                && labels.get("cause").map(String::as_str) == Some(cause_name)
        })
    })
    .await
    .ok_or("no OperatorReconcileLoop alert of w1 in Alertmanager")?;
    let promql = format!(
        r#"opscope_signal_active{{signal="reconcile_loop",namespace="{namespace}",name="w1",cause="{cause_name}"}}"#
    );
    poll(limit, || async {
        let series = backends.prometheus.query(&promql).await;
        series.iter().any(|(_, value)| *value == 1.0).then_some(())
    })
    .await
    .ok_or_else(|| format!("Prometheus 3 has no {promql} = 1"))?;
    // The first changes of a loop go out before its reconciles' spans come (a batch
    // after their log lines): a later update (every 30 s) carries the links.
    let linked = poll(Duration::from_secs(45), || async {
        let spans = backends
            .jaeger
            .search("opscope", Some("opscope.signal reconcile_loop"), 50)
            .await;
        for span in spans.iter().filter(|span| {
            span.tag("k8s.object.namespace").as_deref() == Some(namespace)
                && span.tag("k8s.object.name").as_deref() == Some("w1")
        }) {
            for (_, trace, span_id) in &span.references {
                if *trace == span.trace_id {
                    continue;
                }
                let linked = backends.jaeger.trace(trace).await;
                if let Some(reconcile) = linked
                    .iter()
                    .find(|s| s.span_id == *span_id && s.operation == "reconcile")
                {
                    return Some((span.references.len(), reconcile.tag("reconcile.id")));
                }
            }
        }
        None
    })
    .await
    .ok_or("no signal span in Jaeger linked to a reconcile of w1")?;
    Ok(format!(
        "Alertmanager: {} {}; Prometheus 3: {promql} = 1; Jaeger: the signal span, {} links, one to reconcile {}",
        alert["labels"]["alertname"],
        alert["labels"]["severity"],
        linked.0,
        linked.1.unwrap_or_default()
    ))
}
