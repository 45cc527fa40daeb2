//! The alertmanager exporter against a real Alertmanager on loopback: alerts are listed
//! with their labels and annotations while firing, kept by re-sends, and end when resolved.
//!
//! Needs `prometheus-alertmanager` (Debian) or `alertmanager` on `PATH`; without it the
//! tests are skipped with the reason printed, unless `OPSCOPE_REQUIRE_BACKENDS=1`.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use opscope_exporters::alertmanager::{AlertmanagerConfig, AlertmanagerExporter};
use opscope_exporters::{ExportError, Exporter, SignalBatch};
use opscope_model::signal::{Signal, SignalState};
use opscope_model::timestamp::format_rfc3339;
use opscope_testkit::alertmanager::{Alertmanager, alertmanager_or_skip, labels};
use opscope_testkit::backend::refusing_address;
use opscope_testkit::signals::loop_signal_seen;
use serde_json::Value;

const SECOND: u64 = 1_000_000_000;

fn now_nanos() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    u64::try_from(since_epoch.as_nanos()).expect("time fits in u64")
}

fn exporter(endpoints: &[&str], resend_interval: &str) -> AlertmanagerExporter {
    let config: AlertmanagerConfig = serde_json::from_value(serde_json::json!({
        "endpoints": endpoints,
        "resend_interval": resend_interval,
        "generator_url": "http://grafana.example/d/opscope",
        "timeout": "2s",
    }))
    .expect("valid config");
    AlertmanagerExporter::new("alertmanager/test", &config).expect("exporter starts")
}

/// A reconcile loop on `RayJob ml/train` that began a minute ago and was seen now.
fn loop_signal() -> Signal {
    let now = now_nanos();
    loop_signal_seen(now - 60 * SECOND, now)
}

fn later(signal: &Signal, state: SignalState, cause: &str) -> Signal {
    Signal {
        state,
        cause: cause.into(),
        last_seen: signal.last_seen.max(now_nanos()),
        ..signal.clone()
    }
}

async fn export(exporter: &AlertmanagerExporter, signal: Signal) {
    exporter
        .export(&SignalBatch(vec![signal]))
        .await
        .expect("delivered");
}

#[tokio::test]
async fn a_firing_signal_is_listed_and_ends_when_resolved() {
    let Some(binary) = alertmanager_or_skip() else {
        return;
    };
    let alertmanager = Alertmanager::start(&binary).await;
    let exporter = exporter(&[alertmanager.url()], "1m");
    let firing = loop_signal();
    export(&exporter, firing.clone()).await;

    let listed = alertmanager
        .wait_for("OperatorReconcileLoop", |alerts| alerts.len() == 1)
        .await;
    let alert = &listed[0];
    let expected: BTreeMap<String, String> = [
        ("alertname", "OperatorReconcileLoop"),
        ("severity", "critical"),
        ("operator_name", "kuberay"),
        ("k8s_namespace", "ray-system"),
        ("kind", "RayJob"),
        ("namespace", "ml"),
        ("name", "train"),
        ("cause", "self_triggered_status_write"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value.to_string()))
    .collect();
    assert_eq!(labels(alert), expected);
    let annotations = &alert["annotations"];
    assert_eq!(
        annotations["summary"],
        "critical reconcile loop on RayJob ml/train: self_triggered_status_write (operator kuberay)"
    );
    let description = annotations["description"].as_str().unwrap_or_default();
    assert!(
        description.contains("reconciles_per_minute=420"),
        "{description}"
    );
    assert_eq!(annotations["hint"], firing.hint);
    assert_eq!(alert["startsAt"], format_rfc3339(firing.first_seen));
    assert_eq!(alert["generatorURL"], "http://grafana.example/d/opscope");

    export(
        &exporter,
        later(&firing, SignalState::Resolved, &firing.cause),
    )
    .await;
    alertmanager
        .wait_for("OperatorReconcileLoop", <[Value]>::is_empty)
        .await;
}

#[tokio::test]
async fn a_changed_cause_ends_the_alert_under_the_old_one() {
    let Some(binary) = alertmanager_or_skip() else {
        return;
    };
    let alertmanager = Alertmanager::start(&binary).await;
    let exporter = exporter(&[alertmanager.url()], "1m");
    let firing = loop_signal();
    export(&exporter, firing.clone()).await;
    alertmanager
        .wait_for("OperatorReconcileLoop", |alerts| alerts.len() == 1)
        .await;

    let churn = "field_churn:status.lastSyncTime";
    export(&exporter, later(&firing, SignalState::Firing, churn)).await;
    alertmanager
        .wait_for(
            "OperatorReconcileLoop",
            |alerts| matches!(alerts, [alert] if alert["labels"]["cause"] == churn),
        )
        .await;
}

#[tokio::test]
async fn firing_alerts_are_resent_and_an_unreachable_one_is_retried() {
    let Some(binary) = alertmanager_or_skip() else {
        return;
    };
    let alertmanager = Alertmanager::start(&binary).await;
    let (_nothing_listens, unreachable) = refusing_address();
    let unreachable = format!("http://{unreachable}");
    let exporter = exporter(&[&unreachable, alertmanager.url()], "200ms");
    let result = exporter.export(&SignalBatch(vec![loop_signal()])).await;
    let retryable = matches!(&result, Err(ExportError::Retryable { reason, .. })
        if reason.contains(&unreachable));
    assert!(retryable, "{result:?}");

    let first = alertmanager
        .wait_for("OperatorReconcileLoop", |alerts| alerts.len() == 1)
        .await;
    let updated_at = first[0]["updatedAt"].clone();
    alertmanager
        .wait_for(
            "OperatorReconcileLoop",
            |alerts| matches!(alerts, [alert] if alert["updatedAt"] != updated_at),
        )
        .await;
}
