//! The scenarios: each starts its operator processes in namespaces of its own on the
//! shared control plane, drives its Widgets, and checks what opscope said about them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use base64::prelude::{BASE64_STANDARD, Engine as _};
use opscope_testkit::alertmanager::labels;
use opscope_testkit::operator_pod::{OperatorPod, PodIdentity};
use opscope_testkit::pod_cgroup::{is_root, kernel_probe_unavailable};

use crate::proxy::{Fault, FaultProxy};
use crate::rig::{OperatorSpec, Rig, Sources};

/// How long after its start a scenario's signal may take: the issue's promise.
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
    scenario!("traces-only-timestamp-loop", traces_only_timestamp_loop),
    scenario!("kernel-only-timestamp-loop", kernel_only_timestamp_loop),
    scenario!("fixed", fixed),
    scenario!("two-replicas", two_replicas),
    scenario!("stuck-finalizer", stuck_finalizer),
    scenario!("orphaned-finalizer", orphaned_finalizer),
    scenario!("fixed-requeue", fixed_requeue),
    scenario!("backoff", backoff),
    scenario!("schema-rejection", schema_rejection),
    scenario!("webhook-timeout", webhook_timeout),
    scenario!("proxy-latency", proxy_latency),
    scenario!("proxy-refused", proxy_refused),
    scenario!("proxy-reset", proxy_reset),
    scenario!("apiserver-outage", apiserver_outage, true),
];

fn spec<'a>(scenario: &'a str, args: &'a [&'a str]) -> OperatorSpec<'a> {
    OperatorSpec {
        scenario,
        args,
        replica: 0,
        sources: Sources::All,
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

/// The evidence leads somewhere real: an audit event of the API server (its UUID),
/// and each reconcile to a line of the operator's log or, when it names a trace (a
/// sampling logger leaves reconciles out of the log), to that trace in Jaeger.
async fn check_evidence(rig: &Rig, signal: &Value, operator_log: &str) -> Result<String, String> {
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
async fn backends_show_the_loop(
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

/// Runs `probe` every 250 ms until it answers `Some` or `limit` has passed.
async fn poll<T, F: Future<Output = Option<T>>>(
    limit: Duration,
    mut probe: impl FnMut() -> F,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = probe().await {
            return Some(found);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
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
    let evidence = check_evidence(&rig, &signal, &looping.log_tail(usize::MAX)).await?;
    Ok(format!(
        "reconcile_loop {churn} in {:.1} s ({:.0} reconciles/min); {evidence}",
        started.elapsed().as_secs_f64(),
        figure(&signal, "reconciles_per_minute"),
    ))
}

/// The incident where opscope has the operator's traces alone: no audit bodies to
/// show which field churns, the traced status writes show the loop feeds itself.
async fn traces_only_timestamp_loop(rig: Arc<Rig>, name: &'static str) -> Outcome {
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

/// The timestamp loop of an operator nobody instrumented, on a managed cluster: no
/// traces, no metrics scraped, its logs not tailed, no audit webhook. Only the kernel
/// probe sees its pod, sending to the API server far above 50 calls a second:
/// `api_request_storm` (held 20 s in this rig) about the pod, and nothing else.
async fn kernel_only_timestamp_loop(rig: Arc<Rig>, name: &'static str) -> Outcome {
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
    finalizer_leak(&rig, name, false).await
}

/// The same finalizer, its operator gone before the Widget is deleted.
async fn orphaned_finalizer(rig: Arc<Rig>, name: &'static str) -> Outcome {
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
    let listen = format!("127.0.0.1:{}", opscope_testkit::backend::free_port());
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

async fn schema_rejection(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(&rig, name, BadDay::SchemaRejection).await
}

async fn webhook_timeout(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(&rig, name, BadDay::WebhookTimeout).await
}

async fn proxy_latency(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(
        &rig,
        name,
        BadDay::Network(Fault::Latency(Duration::from_secs(2))),
    )
    .await
}

async fn proxy_refused(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(&rig, name, BadDay::Network(Fault::Refuse)).await
}

async fn proxy_reset(rig: Arc<Rig>, name: &'static str) -> Outcome {
    bad_day(&rig, name, BadDay::Network(Fault::Reset)).await
}

/// The API server killed for 30 s in the middle of the incident's loop, alone on the
/// control plane: opscope keeps running, and after the restart the loop is found again
/// with its cause.
async fn apiserver_outage(rig: Arc<Rig>, name: &'static str) -> Outcome {
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

/// The API server's rate of Widget status requests over `span` (all namespaces).
async fn status_rate(rig: &Rig, span: Duration) -> f64 {
    let before = rig.status_requests().await;
    tokio::time::sleep(span).await;
    (rig.status_requests().await - before) / span.as_secs_f64()
}
