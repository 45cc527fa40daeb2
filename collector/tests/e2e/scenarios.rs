//! The scenarios: each starts its operator processes in namespaces of its own on the
//! shared control plane, drives its Widgets, and checks what opscope said about them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::rig::{OperatorSpec, Rig};

/// How long after its start a scenario's signal may take: the promise.
const DETECTION: Duration = Duration::from_secs(30);
/// A loop resolves once its rate stays below half the threshold for one window (60 s).
const RESOLUTION: Duration = Duration::from_secs(150);
/// How long the healthy operators are watched for signals they must not get.
const QUIET: Duration = Duration::from_secs(120);
/// The finalizer-leak threshold of the test's agent (5 min by default).
pub const FINALIZER_MAX_AGE: &str = "15s";
const FINALIZER_WAIT: Duration = Duration::from_secs(60);

type Outcome = Result<String, String>;
type Run = fn(Arc<Rig>, &'static str) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;

pub struct Scenario {
    pub name: &'static str,
    /// Takes the control plane down: runs after the others, alone.
    pub exclusive: bool,
    pub run: Run,
}

macro_rules! scenario {
    ($name:literal, $function:ident) => {
        scenario!($name, $function, false)
    };
    ($name:literal, $function:ident, $exclusive:literal) => {
        Scenario {
            name: $name,
            exclusive: $exclusive,
            run: |rig, name| Box::pin($function(rig, name)),
        }
    };
}

pub static SCENARIOS: &[Scenario] = &[
    scenario!("timestamp-loop", timestamp_loop),
    scenario!("kube-rs-timestamp-loop", kube_rs_timestamp_loop),
    scenario!("fixed", fixed),
    scenario!("two-replicas", two_replicas),
    scenario!("stuck-finalizer", stuck_finalizer),
    scenario!("orphaned-finalizer", orphaned_finalizer),
    scenario!("fixed-requeue", fixed_requeue),
    scenario!("backoff", backoff),
    scenario!("schema-rejection", schema_rejection),
];

fn spec<'a>(scenario: &'a str, args: &'a [&'a str]) -> OperatorSpec<'a> {
    OperatorSpec {
        scenario,
        args,
        replica: 0,
        traced: true,
        kube_rs: false,
        server: None,
    }
}

/// Whether `signal` is a change to `state` of signal `kind` about Widget `name`.
fn is(signal: &Value, kind: &str, name: &str, state: &str) -> bool {
    signal["signal"] == kind && signal["object"]["name"] == name && signal["state"] == state
}

fn cause(signal: &Value) -> &str {
    signal["cause"].as_str().unwrap_or_default()
}

fn figure(signal: &Value, name: &str) -> f64 {
    signal["figures"][name].as_f64().unwrap_or(f64::NAN)
}

/// The evidence references of `signal` that start with `kind` (`trace`, `audit`).
fn evidence<'a>(signal: &'a Value, kind: &str) -> Vec<&'a str> {
    signal["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|reference| reference.starts_with(kind))
        .collect()
}

/// The evidence leads somewhere real: an audit event of the API server (its UUID)
/// and a reconcile the operator itself logged (its id in the pod's log).
fn check_evidence(signal: &Value, operator_log: &str) -> Result<(), String> {
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
    let logged = signal["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|reference| reference.split("reconcile ").nth(1))
        .any(|id| operator_log.contains(id));
    if !logged {
        return Err(format!(
            "no reconcile of the evidence {} is in the operator's log",
            signal["evidence"]
        ));
    }
    Ok(())
}

/// Waits up to `limit` for signal `kind` firing on Widget w1 of `namespace` with one
/// of `causes`: a signal first fired on partial evidence is sent again as soon as its
/// cause is known.
async fn expect_firing(
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

async fn expect_resolved(
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

/// The incident: a Go controller-runtime operator that writes the time into status on
/// every reconcile, with no predicate; then replaced by its fix.
async fn timestamp_loop(rig: Arc<Rig>, name: &'static str) -> Outcome {
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
    check_evidence(&signal, &looping.log_tail(usize::MAX))?;
    looping.kill();
    let replaced = Instant::now();
    let _fixed = rig.start_operator(&OperatorSpec {
        replica: 1,
        ..spec(name, &["--mode=fixed"])
    });
    expect_resolved(&rig, name, RESOLUTION, "reconcile_loop").await?;
    Ok(format!(
        "reconcile_loop {churn} in {:.1} s ({:.0} reconciles/min); cluster-wide widgets/status requests {quiet_rate:.1}/s before, {looping_rate:.1}/s during; resolved {:.0} s after the fix",
        detected.as_secs_f64(),
        figure(&signal, "reconciles_per_minute"),
        replaced.elapsed().as_secs_f64(),
    ))
}

/// The incident again, on kube-rs.
async fn kube_rs_timestamp_loop(rig: Arc<Rig>, name: &'static str) -> Outcome {
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
    check_evidence(&signal, &looping.log_tail(usize::MAX))?;
    Ok(format!(
        "reconcile_loop {churn} in {:.1} s ({:.0} reconciles/min)",
        started.elapsed().as_secs_f64(),
        figure(&signal, "reconciles_per_minute"),
    ))
}

/// The fix alone, its Widgets' specs changed every 5 s: nothing may fire.
async fn fixed(rig: Arc<Rig>, name: &'static str) -> Outcome {
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

/// Two processes of one operator, leader election off, writing the same Widgets.
async fn two_replicas(rig: Arc<Rig>, name: &'static str) -> Outcome {
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
async fn stuck_finalizer(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let _operator = rig.start_operator(&spec(name, &["--mode=stuck-finalizer"]));
    finalized_widget(&rig, name).await?;
    let deleted = Instant::now();
    rig.delete_widget(name, "w1").await?;
    let signal = expect_firing(
        &rig,
        name,
        FINALIZER_WAIT,
        "finalizer_leak",
        &["cleanup_failing"],
    )
    .await?;
    Ok(format!(
        "finalizer_leak cleanup_failing {:.1} s after the deletion (max_age {FINALIZER_MAX_AGE}), evidence {}",
        deleted.elapsed().as_secs_f64(),
        signal["evidence"]
    ))
}

/// The same finalizer, its operator gone before the Widget is deleted.
async fn orphaned_finalizer(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let mut operator = rig.start_operator(&spec(name, &["--mode=stuck-finalizer"]));
    finalized_widget(&rig, name).await?;
    operator.kill();
    let deleted = Instant::now();
    rig.delete_widget(name, "w1").await?;
    let signal = expect_firing(
        &rig,
        name,
        FINALIZER_WAIT,
        "finalizer_leak",
        &["no_controller"],
    )
    .await?;
    Ok(format!(
        "finalizer_leak no_controller {:.1} s after the deletion ({} reconciles since)",
        deleted.elapsed().as_secs_f64(),
        figure(&signal, "reconciles_since_deletion")
    ))
}

/// `RequeueAfter: time.Second`, forever.
async fn fixed_requeue(rig: Arc<Rig>, name: &'static str) -> Outcome {
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

/// Every reconcile fails, retried by the default rate limiter (exponential): not a loop.
async fn backoff(rig: Arc<Rig>, name: &'static str) -> Outcome {
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

/// A status the CRD's schema refuses, retried immediately on every error.
async fn schema_rejection(rig: Arc<Rig>, name: &'static str) -> Outcome {
    rig.namespaces(name).await;
    let started = Instant::now();
    let _operator = rig.start_operator(&spec(
        name,
        &[
            "--mode=timestamp-loop",
            "--phase=Provisioned",
            "--retry=immediate",
        ],
    ));
    rig.create_widget(name, "w1", json!({ "size": 1 })).await?;
    let signal = expect_firing(
        &rig,
        name,
        DETECTION,
        "reconcile_loop",
        &["error_retry_storm"],
    )
    .await?;
    Ok(format!(
        "reconcile_loop error_retry_storm in {:.1} s (error ratio {:.2})",
        started.elapsed().as_secs_f64(),
        figure(&signal, "error_ratio")
    ))
}

/// The API server's rate of Widget status requests over `span` (all namespaces).
async fn status_rate(rig: &Rig, span: Duration) -> f64 {
    let before = rig.status_requests().await;
    tokio::time::sleep(span).await;
    (rig.status_requests().await - before) / span.as_secs_f64()
}
