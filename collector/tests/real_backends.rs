//! The incident through the agent binary into the real servers users run, each built
//! from its published module by `testkit/backends/build`: `opscope demo` exports its
//! traces and signal spans to Jaeger v2, its signal events to VictoriaLogs (Loki's
//! push API), its series to Prometheus 3 (scrape with exemplars, and remote write) and
//! its alerts to Alertmanager 0.35, to which Prometheus 3 also sends the alerts of
//! `deploy/prometheus/rules.yaml`. Each server is then asked, through its own query
//! API, what it holds.
//!
//! Skipped with a printed reason when the servers are not built, unless
//! `OPSCOPE_REQUIRE_BACKENDS=1`, which makes it fail instead.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::Opscope;
use opscope_testkit::alertmanager::{Alertmanager, alertmanager_built_or_skip, labels};
use opscope_testkit::backend::{HeldPort, poll_until, refusing_address};
use opscope_testkit::jaeger::{Jaeger, QueriedSpan, full_trace_id, jaeger_or_skip};
use opscope_testkit::prometheus::{
    PrometheusOptions, PrometheusServer, one_with, prometheus3_or_skip,
};
use opscope_testkit::victorialogs::{LogEntry, VictoriaLogs, exact, field, victorialogs_or_skip};
use serde_json::Value;

/// The whole test, servers' start included, ends within this.
const TEST_DEADLINE: Duration = Duration::from_secs(120);
const DEMO_SECONDS: &str = "90";

/// The labels of the loop as an alert, from the exporter and from the rule alike.
const LOOP_ALERT_LABELS: &[(&str, &str)] = &[
    ("alertname", "OperatorReconcileLoop"),
    ("cause", "self_triggered_status_write"),
    ("severity", "warning"),
    ("operator_name", "kuberay-operator"),
    ("k8s_namespace", "ray-system"),
    ("kind", "RayJob"),
    ("namespace", "ml"),
    ("name", "train"),
];

const LOOP_SERIES_LABELS: &[(&str, &str)] = &[
    ("signal", "reconcile_loop"),
    ("cause", "self_triggered_status_write"),
    ("operator_name", "kuberay-operator"),
    ("kind", "RayJob"),
    ("namespace", "ml"),
    ("name", "train"),
];

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

struct Servers {
    jaeger: Jaeger,
    logs: VictoriaLogs,
    /// Prometheus 3, which scrapes the demo once it runs ([`Servers::scrape`]) and
    /// evaluates the rules.
    prometheus_binary: PathBuf,
    /// Takes the demo's remote write: a store of its own, as in a cluster that does
    /// one or the other (remote-written series have no staleness, so they would keep
    /// the rules' alerts firing for the lookback's 5 minutes after the demo stops).
    remote_write: PrometheusServer,
    alertmanager: Alertmanager,
    /// The remote-write store's scrape target, refused for as long as it runs.
    _nothing_there: HeldPort,
}

impl Servers {
    async fn start() -> Option<Self> {
        let jaeger = jaeger_or_skip()?;
        let logs = victorialogs_or_skip()?;
        let prometheus_binary = prometheus3_or_skip()?;
        let alertmanager = alertmanager_built_or_skip()?;
        let alertmanager = Alertmanager::start(&alertmanager).await;
        let (nothing_there, nothing_to_scrape) = refusing_address();
        Some(Self {
            jaeger: Jaeger::start(&jaeger).await,
            logs: VictoriaLogs::start(&logs).await,
            remote_write: PrometheusServer::start(&prometheus_binary, nothing_to_scrape).await,
            prometheus_binary,
            _nothing_there: nothing_there,
            alertmanager,
        })
    }

    /// The Prometheus that scrapes `target` (the demo's endpoint), evaluates the
    /// alerting rules and sends their alerts to the Alertmanager.
    async fn scrape(&self, target: &str) -> PrometheusServer {
        let options = PrometheusOptions {
            rule_files: vec![repo("deploy/prometheus/rules.yaml")],
            alertmanager: Some(self.alertmanager.host_port().to_string()),
            otlp_receiver: false,
        };
        PrometheusServer::start_with(&self.prometheus_binary, target, &options).await
    }

    /// The demo, its scrape endpoint on a free port, sending to every server.
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
            &self.logs.loki_endpoint(),
            "--otlp",
            self.jaeger.otlp_grpc_endpoint(),
        ]
        .map(String::from);
        tokio::task::block_in_place(|| Opscope::start_demo(&arguments))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_write_loop_reaches_the_real_servers() {
    let started = Instant::now();
    let Some(servers) = Servers::start().await else {
        return;
    };
    let mut demo = servers.start_demo();
    let prometheus = servers.scrape(&demo.address("exporters.prometheus")).await;
    let ready = started.elapsed();
    let checks = async {
        jaeger_has_the_tagged_reconciles(&servers.jaeger).await;
        jaeger_has_the_signal_span_linked_to_them(&servers.jaeger).await;
        let seen_in_jaeger = started.elapsed();
        exemplars_lead_to_jaeger_traces(&prometheus, &servers.jaeger).await;
        remote_write_stores_the_series(&servers.remote_write).await;
        victorialogs_has_the_signal_event(&servers.logs, &servers.jaeger).await;
        one_alert_from_both_senders(&prometheus, &servers.alertmanager).await;
        seen_in_jaeger
    };
    let seen_in_jaeger =
        tokio::time::timeout(TEST_DEADLINE.saturating_sub(started.elapsed()), checks)
            .await
            .unwrap_or_else(|_| panic!("not seen within {TEST_DEADLINE:?}:\n{}", demo.logs()));
    let everything = started.elapsed();
    // Jaeger has no logs service: the signals go to it as spans, and nothing is
    // given up for the log records it cannot take.
    let said = demo.logs();
    assert!(!said.contains("dropping"), "{said}");

    // The demo stops: Prometheus's scrape fails, its rule resolves the alert, and the
    // resolved notification ends the one Alertmanager holds, whoever sent it last.
    demo.kill();
    let stopped = Instant::now();
    let resolved = poll_until(
        || servers.alertmanager.active_alerts("OperatorReconcileLoop"),
        |alerts| alerts.is_empty(),
    )
    .await;
    assert!(resolved.is_ok(), "the alert is still active: {resolved:#?}");
    println!(
        "servers ready in {:.1}s; Jaeger has the loop at {:.1}s; everything seen at {:.1}s; \
         alert resolved {:.1}s after the demo stopped",
        ready.as_secs_f64(),
        seen_in_jaeger.as_secs_f64(),
        everything.as_secs_f64(),
        stopped.elapsed().as_secs_f64()
    );
}

/// Jaeger finds the fleet's reconcile spans by service, tagged with the reconcile and
/// the object, and returns one of their traces by id.
async fn jaeger_has_the_tagged_reconciles(jaeger: &Jaeger) {
    let services = jaeger
        .eventually(
            "the fleet's services",
            || jaeger.services(),
            |services| {
                ["kuberay-operator", "widget-operator", "opscope"]
                    .iter()
                    .all(|service| services.iter().any(|s| s == service))
            },
        )
        .await;
    println!("jaeger services: {services:?}");
    let spans = jaeger
        .eventually(
            "reconciles of RayJob ml/train",
            || jaeger.search("kuberay-operator", Some("reconcile"), 200),
            |spans| train_reconciles(spans).count() >= 10,
        )
        .await;
    let reconcile = train_reconciles(&spans).next().expect("a reconcile span");
    for key in ["reconcile.id", "k8s.object.kind", "k8s.object.namespace"] {
        assert!(reconcile.tag(key).is_some(), "{key} on {reconcile:#?}");
    }
    assert_eq!(reconcile.tag("k8s.object.kind").as_deref(), Some("RayJob"));
    let trace = jaeger.trace(&reconcile.trace_id).await;
    assert!(
        trace.iter().any(|span| span.span_id == reconcile.span_id),
        "trace {} by id: {trace:#?}",
        reconcile.trace_id
    );
}

fn train_reconciles(spans: &[QueriedSpan]) -> impl Iterator<Item = &QueriedSpan> {
    spans
        .iter()
        .filter(|span| span.operation == "reconcile")
        .filter(|span| span.tag("k8s.object.name").as_deref() == Some("train"))
}

/// The signal span `opscope.signal reconcile_loop` is found, and every one of its
/// links (Jaeger's `FOLLOWS_FROM` references) leads to a reconcile span of ml/train
/// that Jaeger returns by its trace id.
async fn jaeger_has_the_signal_span_linked_to_them(jaeger: &Jaeger) {
    let operation = "opscope.signal reconcile_loop";
    let signals = jaeger
        .eventually(
            "the signal span",
            || jaeger.search("opscope", Some(operation), 20),
            |spans| {
                spans.iter().any(|span| {
                    span.tag("k8s.object.name").as_deref() == Some("train")
                        && !links(span).is_empty()
                })
            },
        )
        .await;
    let signal = signals
        .iter()
        .find(|span| span.tag("k8s.object.name").as_deref() == Some("train"))
        .expect("the loop's signal span");
    assert_eq!(
        signal.tag("opscope.signal.cause").as_deref(),
        Some("self_triggered_status_write")
    );
    for (trace_id, span_id) in links(signal) {
        // The signal may be stored before the last reconciles it links to.
        let trace = jaeger
            .eventually(
                &format!("the linked trace {trace_id}"),
                || jaeger.trace(&trace_id),
                |trace| trace.iter().any(|span| span.span_id == span_id),
            )
            .await;
        let linked = trace.iter().find(|span| span.span_id == span_id);
        let linked = linked.expect("the linked span");
        assert_eq!(linked.operation, "reconcile");
        assert_eq!(linked.tag("k8s.object.name").as_deref(), Some("train"));
    }
    println!(
        "jaeger: signal span with {} links, each resolved",
        links(signal).len()
    );
}

/// The references of a span into other traces (its OTLP links).
fn links(span: &QueriedSpan) -> Vec<(String, String)> {
    span.references
        .iter()
        .filter(|(_, trace_id, _)| *trace_id != span.trace_id)
        .map(|(_, trace_id, span_id)| (trace_id.clone(), span_id.clone()))
        .collect()
}

/// Prometheus 3 stores, from scraping the demo's OpenMetrics page, exemplars of the
/// reconcile duration whose `trace_id` is a trace Jaeger returns.
async fn exemplars_lead_to_jaeger_traces(prometheus: &PrometheusServer, jaeger: &Jaeger) {
    let selector = r#"opscope_reconcile_duration_seconds_bucket{operator_name="kuberay-operator",job="opscope"}"#;
    let answer = poll_until(
        || async { trace_ids(&prometheus.exemplars(selector).await) },
        |ids| !ids.is_empty(),
    )
    .await
    .unwrap_or_else(|_| panic!("no exemplars for {selector}\n{}", prometheus.log_tail()));
    let mut found = 0;
    for trace_id in answer.iter().take(5) {
        let trace = jaeger.trace(trace_id).await;
        if trace
            .iter()
            .any(|span| span.trace_id == full_trace_id(trace_id))
        {
            found += 1;
        }
    }
    assert!(
        found > 0,
        "none of the exemplars' traces {answer:?} is in Jaeger"
    );
    println!(
        "prometheus 3: {} exemplar trace ids, {found} of the first {} found in Jaeger",
        answer.len(),
        answer.len().min(5)
    );
}

/// The `trace_id` labels of a `query_exemplars` answer.
fn trace_ids(answer: &str) -> Vec<String> {
    let answer: Value = serde_json::from_str(answer).unwrap_or_default();
    let mut ids: Vec<String> = answer["data"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|series| series["exemplars"].as_array().cloned().unwrap_or_default())
        .filter_map(|exemplar| exemplar["labels"]["trace_id"].as_str().map(String::from))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Remote write (no `job`: the agent's own series carry none) stores the signal and
/// the operator series.
async fn remote_write_stores_the_series(prometheus: &PrometheusServer) {
    let active = r#"opscope_signal_active{signal="reconcile_loop",name="train",job=""}"#;
    prometheus
        .eventually(active, one_with(1.0, LOOP_SERIES_LABELS))
        .await;
    let reconciles = r#"opscope_reconcile_total{operator_name="kuberay-operator",job=""}"#;
    let answer = prometheus
        .eventually(reconciles, |answer| {
            !answer.is_empty() && answer.iter().all(|(_, value)| *value > 0.0)
        })
        .await;
    println!(
        "prometheus 3 remote write: {active} and {} reconcile series",
        answer.len()
    );
}

/// VictoriaLogs took the loki exporter's pushes: the signal event is found by its
/// `signal` stream label, and the trace ids of its evidence (structured metadata) are
/// traces of ml/train's reconciles that Jaeger has.
async fn victorialogs_has_the_signal_event(logs: &VictoriaLogs, jaeger: &Jaeger) {
    let of_train = |entries: &[LogEntry]| -> Vec<LogEntry> {
        (entries.iter())
            .filter(|entry| field(entry, "k8s_object") == Some("RayJob ml/train"))
            .cloned()
            .collect()
    };
    let events = logs
        .eventually(&exact("signal", "reconcile_loop"), None, |entries| {
            !of_train(entries).is_empty()
        })
        .await;
    let events = of_train(&events);
    let event = &events[0];
    assert_eq!(field(event, "operator_name"), Some("kuberay-operator"));
    let line: Value = serde_json::from_str(field(event, "_msg").unwrap_or_default())
        .unwrap_or_else(|error| panic!("the event's line is JSON ({error}): {event:#?}"));
    assert_eq!(line["cause"], "self_triggered_status_write");
    assert_eq!(field(event, "signal_id"), line["id"].as_str());
    let evidence_traces: Vec<&str> = field(event, "trace_id")
        .unwrap_or_default()
        .split(',')
        .collect();
    for trace_id in &evidence_traces {
        let trace = jaeger.trace(trace_id).await;
        assert!(
            train_reconciles(&trace).next().is_some(),
            "evidence trace {trace_id} is a reconcile of ml/train in Jaeger: {trace:#?}"
        );
    }
    println!(
        "victorialogs: {} signal events of ml/train, evidence in {} Jaeger traces",
        events.len(),
        evidence_traces.len()
    );
}

/// The alert of the loop reaches Alertmanager from the alertmanager exporter and from
/// Prometheus 3's rule, with the same labels: Alertmanager lists one.
async fn one_alert_from_both_senders(prometheus: &PrometheusServer, alertmanager: &Alertmanager) {
    let rule_firing =
        r#"ALERTS{alertname="OperatorReconcileLoop",alertstate="firing",name="train"}"#;
    prometheus
        .eventually(rule_firing, |answer| answer.len() == 1)
        .await;
    let sent = poll_until(
        || prometheus.own_metric("prometheus_notifications_sent_total"),
        |sent| *sent > 0.0,
    )
    .await;
    assert!(sent.is_ok(), "Prometheus sent no alert: {sent:?}");
    let alerts = alertmanager
        .wait_for("OperatorReconcileLoop", |alerts| !alerts.is_empty())
        .await;
    assert_eq!(alerts.len(), 1, "one alert per object: {alerts:#?}");
    let expected = LOOP_ALERT_LABELS
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    assert_eq!(labels(&alerts[0]), expected);
    println!("alertmanager 0.35: one OperatorReconcileLoop alert from the exporter and the rule");
}

/// The reconcile the log viewer's copy of sail-operator's log shows twice (two lines
/// of the same reconcile id: "Installing Helm chart", then "Reconciliation done").
const SAIL_RECONCILE: &str = "ef4162db-22b2-413c-969d-684f6f728c80";
/// A stream label value that needs escaping in every text form it takes.
const AWKWARD_OPERATOR: &str = "say \"hi\"\nto ünïcode ✓ {operator}";
const TENANT: &str = "42";

/// The real log of sail-operator (Istio), as the container runtime writes it, tailed
/// by the filelog receiver, tagged and pushed by the loki exporter to VictoriaLogs as
/// tenant 42; with it, OTLP logs of an operator whose name has quotes, a newline and
/// unicode. LogsQL finds one reconcile's records by `reconcile_id` (structured
/// metadata), the operator's by its stream label, only under the tenant, and the
/// awkward name intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_logs_reach_victorialogs_by_reconcile_operator_and_tenant() {
    let Some(binary) = victorialogs_or_skip() else {
        return;
    };
    let logs = VictoriaLogs::start(&binary).await;
    let pods = opscope_testkit::backend::temp_dir("opscope-pods");
    let fixture =
        repo("processors/tests/fixtures/real/istio/sail-1148-istiorevision-reconciled-forever.log");
    let lines = std::fs::read_to_string(&fixture).expect("the sail-operator fixture");
    common::pod_logs::write_pod_log(
        pods.path(),
        "sail-operator_sail-operator-6d8f9c7b5-q2w7x_6f0c2a9e-1b3d-4e5f-8a7b-9c0d1e2f3a4b",
        "sail-operator",
        &lines,
    );

    let ports = common::Ports::ANY;
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: 127.0.0.1:{http} }}
  filelog:
    include: ["{pods}/*/*/*.log"]
    start_at: beginning
    poll_interval: 100ms
processors:
  operator_tagger: {{}}
  batch: {{ timeout: 100ms }}
exporters:
  loki: {{ endpoint: "{loki}", tenant_id: "{TENANT}" }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    logs: {{ receivers: [filelog, otlp], processors: [operator_tagger, batch], exporters: [loki] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        http = ports.http,
        health = ports.health,
        metrics = ports.metrics,
        pods = pods.path().display(),
        loki = logs.loki_endpoint(),
    );
    let agent = Opscope::start(&config);
    let ports = agent.ports();
    send_awkward_operator_logs(&ports.http_url()).await;

    let reconcile = logs
        .eventually(
            &exact("reconcile_id", SAIL_RECONCILE),
            Some(TENANT),
            |entries| entries.len() >= 2,
        )
        .await;
    let messages: BTreeSet<&str> = reconcile.iter().filter_map(|e| field(e, "_msg")).collect();
    assert_eq!(reconcile.len(), 2, "{reconcile:#?}");
    assert!(
        messages.iter().any(|m| m.contains("Installing Helm chart"))
            && messages.iter().any(|m| m.contains("Reconciliation done")),
        "{messages:#?}"
    );
    let operator = field(&reconcile[0], "operator_name")
        .expect("the operator as a stream label")
        .to_string();
    let records_with_reconcile = lines.lines().filter(|l| l.contains("reconcileID")).count();
    let by_operator = logs
        .eventually(
            &exact("operator_name", &operator),
            Some(TENANT),
            |entries| entries.len() >= records_with_reconcile,
        )
        .await;
    assert!(
        by_operator
            .iter()
            .all(|entry| field(entry, "operator_name") == Some(operator.as_str())),
        "{by_operator:#?}"
    );
    let other_tenant = logs
        .query(&exact("reconcile_id", SAIL_RECONCILE), None)
        .await;
    assert!(
        other_tenant.is_empty(),
        "the default tenant sees {other_tenant:#?}"
    );

    let awkward = logs
        .eventually(
            &exact("operator_name", AWKWARD_OPERATOR),
            Some(TENANT),
            |entries| !entries.is_empty(),
        )
        .await;
    assert_eq!(field(&awkward[0], "operator_name"), Some(AWKWARD_OPERATOR));
    assert_eq!(field(&awkward[0], "_msg"), Some("reconciling \"quoted\" ✓"));
    println!(
        "victorialogs: reconcile {SAIL_RECONCILE} has {} records; operator {operator:?} has {} \
         under tenant {TENANT}, none under the default tenant; the awkward operator name \
         came back intact",
        reconcile.len(),
        by_operator.len()
    );
}

/// One OTLP/JSON log record of an operator named [`AWKWARD_OPERATOR`].
async fn send_awkward_operator_logs(base_url: &str) {
    let now = opscope_model::timestamp::now_unix_nanos().to_string();
    let body = serde_json::json!({
        "resourceLogs": [{
            "resource": {"attributes": [
                {"key": "operator.name", "value": {"stringValue": AWKWARD_OPERATOR}},
                {"key": "k8s.namespace.name", "value": {"stringValue": "odd-system"}}
            ]},
            "scopeLogs": [{"logRecords": [{
                "timeUnixNano": now,
                "severityText": "INFO",
                "body": {"stringValue": "reconciling \"quoted\" ✓"}
            }]}]
        }]
    });
    let answer = opscope_testkit::backend::http_client()
        .post(format!("{base_url}/v1/logs"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the agent takes OTLP/HTTP");
    assert!(answer.status().is_success(), "{answer:?}");
}

/// The operator metrics the `operator_metrics` connector derives from the simulated
/// fleet's traces, sent by the `otlphttp` exporter straight to Prometheus 3's OTLP
/// endpoint, come out under the names the README documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlphttp_metrics_reach_prometheus3_under_the_documented_names() {
    let Some(binary) = prometheus3_or_skip() else {
        return;
    };
    let options = PrometheusOptions {
        otlp_receiver: true,
        ..PrometheusOptions::default()
    };
    // Nothing to scrape: the series arrive over OTLP.
    let (_held, unused) = refusing_address();
    let prometheus = PrometheusServer::start_with(&binary, &unused, &options).await;
    let otlp_base = prometheus
        .otlp_metrics_url()
        .trim_end_matches("/v1/metrics")
        .to_string();
    let ports = common::Ports::ANY;
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: 127.0.0.1:{grpc} }}
processors:
  operator_tagger: {{}}
  batch: {{ timeout: 100ms }}
exporters:
  otlphttp/prometheus: {{ endpoint: "{otlp_base}" }}
connectors:
  operator_metrics: {{}}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger, batch], exporters: [operator_metrics] }}
    metrics: {{ receivers: [operator_metrics], processors: [batch], exporters: [otlphttp/prometheus] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        grpc = ports.grpc,
        health = ports.health,
        metrics = ports.metrics,
    );
    let agent = Opscope::start(&config);
    let ports = agent.ports();
    let fleet = tokio::spawn(common::fleet::send_the_fleet(
        ports.grpc_url(),
        Duration::from_secs(20),
    ));

    let mut table = Vec::new();
    for name in [
        "opscope_reconcile_total",
        "opscope_reconcile_duration_seconds_bucket",
        "opscope_reconcile_duration_seconds_count",
        "opscope_api_writes_total",
    ] {
        let query = format!(r#"{name}{{operator_name="kuberay-operator"}}"#);
        let answer = prometheus.eventually(&query, |a| !a.is_empty()).await;
        table.push((name, answer.len()));
    }
    fleet.abort();
    for (name, series) in table {
        println!("prometheus 3 over OTLP: {name}: {series} series of kuberay-operator");
    }
}
