//! The faults of a bad day between an operator and the API server (a schema that
//! refuses, a slow webhook, a slow, refusing or resetting network): retried at once
//! they are an `error_retry_storm`, backing off they are nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::prelude::{BASE64_STANDARD, Engine as _};
use opscope_testkit::operator_pod::{OperatorPod, PodIdentity};
use serde_json::json;

use super::expect::{evidence, expect_firing, figure};
use super::{DETECTION, Outcome, spec};
use crate::proxy::{Fault, FaultProxy};
use crate::rig::{OperatorSpec, Rig};

/// What goes wrong between a health-checking operator and the API server.
enum BadDay {
    /// The CRD's status schema refuses the phase the operator writes (422).
    SchemaRejection,
    /// A validating webhook on Widgets' status answers after the API server's 1 s timeout.
    WebhookTimeout,
    /// A fault of the network path, from a proxy in front of the API server.
    Network(Fault),
}

/// The operator reads its Widget live and writes its status every 10 s, an API timeout
/// of 1 s; retried immediately on error (100 ms) it must be an `error_retry_storm`
/// naming the error, its twin with the default exponential backoff nothing over the
/// same minute.
async fn bad_day(rig: &Rig, name: &'static str, fault: BadDay) -> Outcome {
    let twin = format!("{name}-backoff");
    rig.namespaces(name).await;
    rig.namespaces(&twin).await;
    let phase = match fault {
        BadDay::SchemaRejection => "--phase=Provisioned",
        _ => "--phase=Ready",
    };
    let proxy = match fault {
        BadDay::Network(_) => Some(FaultProxy::start(&rig.control_plane.address()).await),
        _ => None,
    };
    let _webhook = match fault {
        BadDay::WebhookTimeout => Some(slow_webhook(rig, name, &twin).await?),
        _ => None,
    };
    let operator = |scenario: &str, retry: &'static str| {
        let args = ["--mode=health-check", "--api-timeout=1s", phase, retry];
        rig.start_operator(&OperatorSpec {
            server: proxy.as_ref().map(FaultProxy::url),
            ..spec(scenario, &args)
        })
    };
    let immediate = operator(name, "--retry=immediate");
    let backing_off = operator(&twin, "--retry=exponential");
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    rig.create_widget(&twin, "w1", json!({ "size": 1 })).await?;
    if let (Some(proxy), BadDay::Network(network_fault)) = (&proxy, &fault) {
        for namespace in [name, twin.as_str()] {
            ready_widget(rig, namespace).await?;
        }
        proxy.set(*network_fault);
    }
    let started = Instant::now();
    // An attempt that waits out the 1 s timeout is retried about once a second: 30
    // of them take 30 s and more. client-go retries a reset read itself until the
    // deadline, so resets cost the same second.
    let limit = match fault {
        BadDay::SchemaRejection | BadDay::Network(Fault::Refuse) => DETECTION,
        _ => Duration::from_secs(75),
    };
    let signal = expect_firing(rig, name, limit, "reconcile_loop", &["error_retry_storm"])
        .await
        .map_err(|reason| format!("{reason}; operator log: {}", immediate.log_tail(3)))?;
    let detected = started.elapsed();
    let error = evidence(&signal, "error: ")
        .first()
        .map(|e| e.to_string())
        .ok_or_else(|| format!("no error in the evidence {}", signal["evidence"]))?;
    // The twin has had as long a minute of the same fault.
    let window = Duration::from_secs(65);
    tokio::time::sleep(window.saturating_sub(started.elapsed())).await;
    let twin_signals = rig.signals_in(&twin);
    if !twin_signals.is_empty() {
        return Err(format!(
            "the twin backing off got signals: {twin_signals:?}"
        ));
    }
    let twin_errors = backing_off
        .log_tail(usize::MAX)
        .matches("Reconciler error")
        .count();
    if twin_errors == 0 {
        return Err("the twin backing off saw no error: the fault did not reach it".into());
    }
    Ok(format!(
        "error_retry_storm in {:.1} s ({:.0} reconciles/min), {error:?}; the twin backing off: {twin_errors} errors, no signal over {:.0} s",
        detected.as_secs_f64(),
        figure(&signal, "reconciles_per_minute"),
        started.elapsed().as_secs_f64()
    ))
}

/// Waits until the operator has written Widget w1's status: it works, before the fault.
async fn ready_widget(rig: &Rig, namespace: &str) -> Result<(), String> {
    let deadline = Instant::now() + DETECTION;
    loop {
        let phase = rig
            .widget(namespace, "w1")
            .await
            .and_then(|w| w["status"]["phase"].as_str().map(str::to_string));
        if phase.as_deref() == Some("Ready") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{namespace}/w1 not Ready within 30 s before the fault"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A validating webhook on the status of the Widgets of `namespaces`, answering after
/// 5 s where the API server waits 1 s, with `failurePolicy: Fail`.
async fn slow_webhook(rig: &Rig, name: &str, twin: &str) -> Result<OperatorPod, String> {
    // The API server is told the address before the webhook listens: one of the
    // run's own.
    let listen = format!(
        "{}.2:{}",
        crate::common::own_loopback_block(),
        opscope_testkit::backend::free_port()
    );
    let identity = PodIdentity::of_deployment(&format!("{name}-webhook"), "widget-webhook", 0);
    let ca_file = rig.scratch(&format!("{name}-webhook-ca.pem"));
    let mut command = std::process::Command::new(&rig.binaries.go_operator);
    command
        .arg("webhook")
        .arg(format!("--listen={listen}"))
        .arg(format!("--ca-file={}", ca_file.display()))
        .arg("--delay=5s");
    let webhook = rig.start_process(command, identity);
    let deadline = Instant::now() + DETECTION;
    let ca = loop {
        if let Ok(ca) = std::fs::read(&ca_file)
            && !ca.is_empty()
        {
            break ca;
        }
        if Instant::now() > deadline {
            return Err(format!("the webhook wrote no CA: {}", webhook.log_tail(5)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": format!("{name}-widget-status") },
        "webhooks": [{
            "name": "status.widgets.e2e.opscope.dev",
            "clientConfig": {
                "url": format!("https://{listen}/validate"),
                "caBundle": BASE64_STANDARD.encode(ca),
            },
            "rules": [{
                "apiGroups": ["e2e.opscope.dev"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["widgets/status"],
            }],
            "namespaceSelector": { "matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "In", "values": [name, twin],
            }]},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 1,
        }],
    });
    rig.admin
        .create(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            &configuration,
        )
        .await
        .map_err(|error| format!("registering the webhook: {error}"))?;
    Ok(webhook)
}

pub(super) async fn schema_rejection(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(&rig, name, BadDay::SchemaRejection).await
}

pub(super) async fn webhook_timeout(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(&rig, name, BadDay::WebhookTimeout).await
}

pub(super) async fn proxy_latency(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(
        &rig,
        name,
        BadDay::Network(Fault::Latency(Duration::from_secs(2))),
    )
    .await
}

pub(super) async fn proxy_refused(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(&rig, name, BadDay::Network(Fault::Refuse)).await
}

pub(super) async fn proxy_reset(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(&rig, name, BadDay::Network(Fault::Reset)).await
}
