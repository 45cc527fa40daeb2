//! The incident end to end through the agent binary: the status-write loop reaches every backend.
//!
//! `opscope demo` exports to a real Prometheus (scrape and remote write), a real
//! Alertmanager, a recording Loki and an OTLP sink, and the reconcile loop of RayJob
//! ml/train shows up in each. Skipped with a printed reason when `prometheus` or Alertmanager is not installed,
//! unless `OPSCOPE_REQUIRE_BACKENDS=1`, which makes it fail instead.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Opscope, OtlpSink, Received};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::trace::v1::Span;
use opscope_testkit::alertmanager::{Alertmanager, alertmanager_or_skip, labels};
use opscope_testkit::backend::{HeldPort, poll_until, refusing_address};
use opscope_testkit::loki::{self, Entry, PUSH_PATH, Stream};
use opscope_testkit::prometheus::{PrometheusServer, QueriedSeries, one_with, prometheus_or_skip};
use opscope_testkit::recording::RecordingServer;

/// The whole test, servers' start included, ends within this.
const TEST_DEADLINE: Duration = Duration::from_secs(45);
/// The demo runs at most this long; the test stops it once everything is seen.
const DEMO_SECONDS: &str = "45";

/// The labels of the loop as a Prometheus series (and, but for `signal`, as an alert).
const LOOP_LABELS: &[(&str, &str)] = &[
    ("signal", "reconcile_loop"),
    ("cause", "self_triggered_status_write"),
    ("severity", "warning"),
    ("operator_name", "kuberay-operator"),
    ("k8s_namespace", "ray-system"),
    ("kind", "RayJob"),
    ("namespace", "ml"),
    ("name", "train"),
];

/// Everything the demo exports to, each on its own loopback port.
struct Backends {
    /// Prometheus 2, which scrapes the demo once it runs ([`Backends::scrape`]) and
    /// takes its remote write.
    prometheus_binary: PathBuf,
    /// Takes the demo's remote write.
    remote_write: PrometheusServer,
    alertmanager: Alertmanager,
    /// The remote-write store's scrape target, refused for as long as it runs.
    _nothing_there: HeldPort,
    loki: RecordingServer,
    otlp: OtlpSink,
}

impl Backends {
    /// Starts them all, or `None` when the servers are not installed and the test may skip.
    async fn start() -> Option<Self> {
        let prometheus_binary = prometheus_or_skip()?;
        let alertmanager = alertmanager_or_skip()?;
        let (nothing_there, nothing_to_scrape) = refusing_address();
        Some(Self {
            remote_write: PrometheusServer::start(&prometheus_binary, nothing_to_scrape).await,
            prometheus_binary,
            _nothing_there: nothing_there,
            alertmanager: Alertmanager::start(&alertmanager).await,
            loki: RecordingServer::start(&[]).await,
            otlp: OtlpSink::grpc(),
        })
    }

    /// The Prometheus that scrapes `target`, the demo's endpoint.
    async fn scrape(&self, target: &str) -> PrometheusServer {
        PrometheusServer::start(&self.prometheus_binary, target).await
    }

    /// The demo, its scrape endpoint on a free port, sending to every backend.
    fn start_demo(&self) -> Opscope {
        let arguments = [
            "--duration",
            DEMO_SECONDS,
            "--prometheus",
            "127.0.0.1:0",
            "--prometheus-remote-write",
            &self.remote_write.remote_write_url(),
            "--alertmanager",
            self.alertmanager.url(),
            "--loki",
            &self.loki.base_url(),
            "--otlp",
            &self.otlp.endpoint(),
        ]
        .map(String::from);
        tokio::task::block_in_place(|| Opscope::start_demo(&arguments))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_write_loop_reaches_every_backend() {
    let started = Instant::now();
    let Some(backends) = Backends::start().await else {
        return;
    };
    let backends_ready = started.elapsed();
    // Killed on drop, before the backends; prints what it said if the test fails.
    let demo = backends.start_demo();
    let prometheus = backends.scrape(&demo.address("exporters.prometheus")).await;
    let checks = async {
        alert_fires(&backends.alertmanager).await;
        let fired = started.elapsed();
        series_are_scraped_and_written(&prometheus, &backends.remote_write).await;
        signal_span_links_to_the_reconciles(&backends.otlp).await;
        loki_has_the_signal_event(&backends.loki, &backends.otlp).await;
        fired
    };
    let fired = tokio::time::timeout(TEST_DEADLINE.saturating_sub(started.elapsed()), checks)
        .await
        .unwrap_or_else(|_| panic!("not seen within {TEST_DEADLINE:?}"));
    println!(
        "backends ready in {:.1}s, alert firing at {:.1}s, everything seen at {:.1}s",
        backends_ready.as_secs_f64(),
        fired.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// (a) Alertmanager lists the loop as a firing alert with the signal's labels.
async fn alert_fires(alertmanager: &Alertmanager) {
    let alerts = alertmanager
        .wait_for("OperatorReconcileLoop", |alerts| alerts.len() == 1)
        .await;
    let alert = &alerts[0];
    let mut expected: BTreeMap<String, String> = LOOP_LABELS
        .iter()
        .filter(|(name, _)| *name != "signal")
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    expected.insert("alertname".into(), "OperatorReconcileLoop".into());
    assert_eq!(labels(alert), expected);
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("RayJob ml/train"), "{summary}");
    let hint = alert["annotations"]["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("GenerationChangedPredicate"), "{hint}");
}

/// (b) PromQL sees the loop and the reconciles both as scraped (`job="opscope"`, the
/// scrape job, in the Prometheus that scrapes the demo) and as remote-written (no
/// `job`: the agent's own series carry none, in the one that takes the writes).
async fn series_are_scraped_and_written(scraper: &PrometheusServer, written: &PrometheusServer) {
    for (path, job, prometheus) in [
        ("scrape", r#"job="opscope""#, scraper),
        ("remote write", r#"job="""#, written),
    ] {
        let active =
            format!(r#"opscope_signal_active{{signal="reconcile_loop",name="train",{job}}}"#);
        let seen = prometheus
            .eventually(&active, one_with(1.0, LOOP_LABELS))
            .await;
        println!("{path}: {active} = {seen:?}");
        let reconciles = format!(
            r#"opscope_reconcile_total{{operator_name="kuberay-operator",kind="RayJob",{job}}}"#
        );
        prometheus.eventually(&reconciles, all_positive).await;
    }
}

fn all_positive(answer: &[QueriedSeries]) -> bool {
    !answer.is_empty() && answer.iter().all(|(_, value)| *value > 0.0)
}

/// (d) The sink received a signal span `opscope.signal reconcile_loop` whose links all
/// lead to reconcile spans of RayJob ml/train that it also received.
async fn signal_span_links_to_the_reconciles(otlp: &OtlpSink) {
    let linked =
        |received: &Received| loop_span(received).is_some_and(|span| links_resolve(span, received));
    let received = poll_until(|| async { otlp.received() }, linked).await;
    let received = received.unwrap_or_else(|last| {
        let reconciles = train_reconciles(&last);
        panic!(
            "no signal span linked to {reconciles:?}: {:#?}",
            loop_span(&last)
        )
    });
    let span = loop_span(&received).expect("the signal span");
    assert_eq!(string(&span.attributes, "k8s.object.name"), Some("train"));
    assert_eq!(
        string(&span.attributes, "opscope.signal.cause"),
        Some("self_triggered_status_write")
    );
    assert!(!span.links.is_empty(), "the signal span links its evidence");
}

fn links_resolve(span: &Span, received: &Received) -> bool {
    let reconciles = train_reconciles(received);
    span.links
        .iter()
        .all(|link| reconciles.contains_key(&(hex(&link.trace_id), hex(&link.span_id))))
}

/// The reconcile spans of RayJob ml/train received: (trace id, span id) in hex to the
/// reconcile id the agent tagged them with.
fn train_reconciles(received: &Received) -> BTreeMap<(String, String), String> {
    received
        .spans()
        .filter(|s| {
            s.name == "reconcile" && string(&s.attributes, "k8s.object.name") == Some("train")
        })
        .map(|s| {
            let reconcile_id = string(&s.attributes, "reconcile.id").unwrap_or_default();
            (
                (hex(&s.trace_id), hex(&s.span_id)),
                reconcile_id.to_string(),
            )
        })
        .collect()
}

fn loop_span(received: &Received) -> Option<&Span> {
    received
        .spans()
        .find(|span| span.name == "opscope.signal reconcile_loop")
}

/// (c) Loki received the loop's firing as a JSON line on a `signal` stream, read with
/// the testkit's independent decoder; its evidence names reconciles the OTLP sink got.
async fn loki_has_the_signal_event(loki: &RecordingServer, otlp: &OtlpSink) {
    let event = poll_until(|| async { loop_event(loki) }, Option::is_some).await;
    let (stream, entry) = event
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no reconcile_loop event in {:#?}", loki.requests()));
    assert_eq!(
        stream.labels,
        r#"{k8s_namespace="ray-system", level="warn", operator_name="kuberay-operator", signal="reconcile_loop"}"#
    );
    let line: serde_json::Value = serde_json::from_str(&entry.line).expect("a JSON line");
    assert_eq!(line["state"], "firing");
    assert_eq!(line["cause"], "self_triggered_status_write");
    assert_eq!(line["object"]["name"], "train");
    assert_eq!(
        loki::metadata(&entry, "k8s_object"),
        Some("RayJob ml/train")
    );
    assert_eq!(loki::metadata(&entry, "signal_id"), line["id"].as_str());
    let evidence = EventEvidence::of(&line, &entry);
    let reconcile_ids = loki::metadata(&entry, "reconcile_id").unwrap_or_default();
    for (_, span) in &evidence.spans {
        assert!(
            reconcile_ids.contains(span.as_str()),
            "reconcile {span} in {reconcile_ids:?}"
        );
    }
    let known = poll_until(
        || async { train_reconciles(&otlp.received()) },
        |reconciles| evidence.names_only(reconciles),
    )
    .await;
    if let Err(reconciles) = known {
        panic!("{evidence:?} names other than the reconciles {reconciles:?}");
    }
}

/// What a Loki signal event says about the offending reconciles.
#[derive(Debug)]
struct EventEvidence {
    /// (trace id, span id) of the `trace <id> span <id>` references in the line.
    spans: Vec<(String, String)>,
    /// The `trace_id` structured metadata, split at its commas.
    trace_ids: Vec<String>,
}

impl EventEvidence {
    fn of(line: &serde_json::Value, entry: &Entry) -> Self {
        let references = line["evidence"].as_array().cloned().unwrap_or_default();
        let spans = references
            .iter()
            .filter_map(|reference| {
                let reference = reference.as_str()?;
                let trace = word_after(reference, "trace")?;
                Some((
                    trace.to_string(),
                    word_after(reference, "span")?.to_string(),
                ))
            })
            .collect();
        let trace_ids = loki::metadata(entry, "trace_id").unwrap_or_default();
        let trace_ids = trace_ids.split(',').map(String::from).collect();
        Self { spans, trace_ids }
    }

    /// Whether every reference is a reconcile span of `reconciles` (its span id the
    /// reconcile id) and every trace id one of theirs.
    fn names_only(&self, reconciles: &BTreeMap<(String, String), String>) -> bool {
        let traces: BTreeSet<&str> = reconciles.keys().map(|(trace, _)| trace.as_str()).collect();
        !self.spans.is_empty()
            && (self.spans.iter()).all(|span| reconciles.get(span) == Some(&span.1))
            && (self.trace_ids.iter()).all(|trace| traces.contains(trace.as_str()))
    }
}

/// The word after `key` in an evidence reference (`trace <id> span <id> reconcile <id>`).
fn word_after<'a>(reference: &'a str, key: &str) -> Option<&'a str> {
    let mut words = reference.split_whitespace();
    words.by_ref().find(|word| *word == key)?;
    words.next()
}

/// The first `reconcile_loop` entry Loki received, with its stream.
fn loop_event(loki: &RecordingServer) -> Option<(Stream, Entry)> {
    let pushes = loki.requests().into_iter().filter(|r| r.path == PUSH_PATH);
    for push in pushes {
        assert_eq!(push.header("content-type"), Some("application/x-protobuf"));
        for mut stream in loki::decode_push(&push.body) {
            if stream.labels.contains(r#"signal="reconcile_loop""#) && !stream.entries.is_empty() {
                let entry = stream.entries.remove(0);
                return Some((stream, entry));
            }
        }
    }
    None
}

fn string<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match &kv.value {
            Some(AnyValue {
                value: Some(Value::StringValue(s)),
            }) => Some(s.as_str()),
            _ => None,
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
