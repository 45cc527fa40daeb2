//! The alertmanager exporter against a real Alertmanager on loopback: alerts are listed
//! with their labels and annotations while firing, kept by re-sends, and end when resolved.
//!
//! Needs `prometheus-alertmanager` (Debian) or `alertmanager` on `PATH`; without it the
//! tests are skipped with the reason printed, unless `OPSCOPE_REQUIRE_BACKENDS=1`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opscope_exporters::alertmanager::{AlertmanagerConfig, AlertmanagerExporter};
use opscope_exporters::{ExportError, Exporter, SignalBatch};
use opscope_processors::correlator::{
    ObjectRef, OperatorRef, Severity, Signal, SignalState, SignalType,
};
use opscope_processors::timestamp::format_rfc3339;
use serde_json::Value;

const BINARIES: [&str; 2] = ["prometheus-alertmanager", "alertmanager"];
/// Longest wait for Alertmanager to start, and for what it lists to change.
const PATIENCE: Duration = Duration::from_secs(30);
const SECOND: u64 = 1_000_000_000;
/// Every alert to a receiver that notifies no one.
const ALERTMANAGER_CONFIG: &str = "route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n";

/// The Alertmanager binary, or `None` (with the reason printed) when the test is to
/// be skipped. Fails when `OPSCOPE_REQUIRE_BACKENDS=1` and there is none.
fn alertmanager_or_skip(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let binary = BINARIES.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if binary.is_none() {
        let reason = "no prometheus-alertmanager or alertmanager on PATH \
                      (apt-get install prometheus-alertmanager)";
        let required = std::env::var("OPSCOPE_REQUIRE_BACKENDS").is_ok_and(|v| v == "1");
        assert!(!required, "{test}: OPSCOPE_REQUIRE_BACKENDS=1 but {reason}");
        // Straight to stderr, past the test harness's capture, so that a skip is seen.
        let _ = writeln!(std::io::stderr(), "skipping {test}: {reason}");
    }
    binary
}

/// A directory of its own, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "opscope-alertmanager-{}-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed),
            now_nanos()
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An Alertmanager on a free loopback port with clustering off, killed on drop.
struct Alertmanager {
    child: Child,
    url: String,
    dir: TempDir,
    http: reqwest::Client,
}

impl Alertmanager {
    async fn start(binary: &Path) -> Self {
        let dir = TempDir::new();
        let config = dir.0.join("alertmanager.yml");
        std::fs::write(&config, ALERTMANAGER_CONFIG).expect("write config");
        let log = File::create(dir.0.join("alertmanager.log")).expect("create log");
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.0.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start alertmanager");
        opscope_exporters::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("HTTP client");
        let mut alertmanager = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
            http,
        };
        alertmanager.wait_until_ready().await;
        alertmanager
    }

    async fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("alertmanager exited ({status}):\n{}", self.log());
            }
            let ready = self.http.get(format!("{}/-/ready", self.url)).send().await;
            if ready.is_ok_and(|answer| answer.status().is_success()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "alertmanager not ready within {PATIENCE:?}:\n{}",
            self.log()
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("alertmanager.log")).unwrap_or_default()
    }

    /// The active alerts Alertmanager lists with the given `alertname`.
    async fn active_alerts(&self, alertname: &str) -> Vec<Value> {
        let url = format!("{}/api/v2/alerts?active=true", self.url);
        let answer = self.http.get(url).send().await.expect("GET /api/v2/alerts");
        let body = answer.bytes().await.expect("alerts body");
        let alerts: Vec<Value> = serde_json::from_slice(&body).expect("alerts JSON");
        alerts
            .into_iter()
            .filter(|alert| alert["labels"]["alertname"] == alertname)
            .filter(|alert| alert["status"]["state"] == "active")
            .collect()
    }

    /// Waits until the active alerts named `alertname` satisfy `expected`; returns them.
    async fn wait_for(&self, alertname: &str, expected: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let alerts = self.active_alerts(alertname).await;
            if expected(&alerts) {
                return alerts;
            }
            assert!(
                Instant::now() < deadline,
                "alertmanager lists {alerts:#?}\nlog:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("bound address").port()
}

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
    Signal {
        id: "reconcile_loop:rayjobs/ml/train".into(),
        signal: SignalType::ReconcileLoop,
        cause: "self_triggered_status_write".into(),
        severity: Severity::Critical,
        state: SignalState::Firing,
        object: ObjectRef {
            group: "ray.io".into(),
            kind: "RayJob".into(),
            resource: "rayjobs".into(),
            namespace: "ml".into(),
            name: "train".into(),
        },
        operator: OperatorRef {
            name: "kuberay".into(),
            namespace: "ray-system".into(),
        },
        controller: "rayjob".into(),
        first_seen: now - 60 * SECOND,
        last_seen: now,
        figures: BTreeMap::from([("reconciles_per_minute".to_string(), 420.0)]),
        evidence: vec!["reconcile 7f3e2c1a".into()],
        hint: "Add GenerationChangedPredicate to the watch of RayJob.".into(),
    }
}

fn later(signal: &Signal, state: SignalState, cause: &str) -> Signal {
    Signal {
        state,
        cause: cause.into(),
        last_seen: signal.last_seen.max(now_nanos()),
        ..signal.clone()
    }
}

fn labels(alert: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(alert["labels"].clone()).expect("labels are strings")
}

async fn export(exporter: &AlertmanagerExporter, signal: Signal) {
    exporter
        .export(&SignalBatch(vec![signal]))
        .await
        .expect("delivered");
}

#[tokio::test]
async fn a_firing_signal_is_listed_and_ends_when_resolved() {
    let Some(binary) = alertmanager_or_skip("a_firing_signal_is_listed_and_ends_when_resolved")
    else {
        return;
    };
    let alertmanager = Alertmanager::start(&binary).await;
    let exporter = exporter(&[&alertmanager.url], "1m");
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
    let Some(binary) = alertmanager_or_skip("a_changed_cause_ends_the_alert_under_the_old_one")
    else {
        return;
    };
    let alertmanager = Alertmanager::start(&binary).await;
    let exporter = exporter(&[&alertmanager.url], "1m");
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
    let Some(binary) =
        alertmanager_or_skip("firing_alerts_are_resent_and_an_unreachable_one_is_retried")
    else {
        return;
    };
    let alertmanager = Alertmanager::start(&binary).await;
    let unreachable = format!("http://127.0.0.1:{}", free_port());
    let exporter = exporter(&[&unreachable, &alertmanager.url], "200ms");
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
