//! The scrape receiver of the running agent against a controller-runtime `/metrics`
//! endpoint on loopback: its series arrive downstream as OTLP metrics, a dead target
//! reports `up` 0, a work queue that keeps growing fires `resource_leak`, and 409
//! answers that keep coming fire `write_conflict` on the operator pod.

mod common;

use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use common::{Opscope, OtlpSink, Ports, wait_until};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Metric, ResourceMetrics, metric::Data, number_data_point,
};
use tokio::runtime::Runtime;

const TIMEOUT: Duration = Duration::from_secs(30);
const POD: &str = "kuberay-operator-6bc4f7d9c8-x2k4p";

/// The page a controller-runtime operator serves at its `scrape`-th scrape: the work
/// queue grows by one and the 409 answers by two at every scrape.
fn controller_runtime_page(scrape: u64) -> String {
    let depth = scrape;
    let conflicts = 12 + 2 * scrape;
    format!(
        r#"# HELP controller_runtime_active_workers Number of currently used workers per controller
# TYPE controller_runtime_active_workers gauge
controller_runtime_active_workers{{controller="rayjob"}} 1
# HELP controller_runtime_reconcile_errors_total Total number of reconciliation errors per controller
# TYPE controller_runtime_reconcile_errors_total counter
controller_runtime_reconcile_errors_total{{controller="rayjob"}} 3
# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_bucket{{controller="rayjob",le="0.005"}} 310
controller_runtime_reconcile_time_seconds_bucket{{controller="rayjob",le="0.01"}} 702
controller_runtime_reconcile_time_seconds_bucket{{controller="rayjob",le="0.025"}} 1011
controller_runtime_reconcile_time_seconds_bucket{{controller="rayjob",le="0.05"}} 1150
controller_runtime_reconcile_time_seconds_bucket{{controller="rayjob",le="0.1"}} 1190
controller_runtime_reconcile_time_seconds_bucket{{controller="rayjob",le="1"}} 1204
controller_runtime_reconcile_time_seconds_bucket{{controller="rayjob",le="+Inf"}} 1207
controller_runtime_reconcile_time_seconds_sum{{controller="rayjob"}} 17.931
controller_runtime_reconcile_time_seconds_count{{controller="rayjob"}} 1207
# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{{controller="rayjob",result="error"}} 3
controller_runtime_reconcile_total{{controller="rayjob",result="requeue"}} 0
controller_runtime_reconcile_total{{controller="rayjob",result="requeue_after"}} 41
controller_runtime_reconcile_total{{controller="rayjob",result="success"}} 1163
# HELP go_gc_duration_seconds A summary of the pause duration of garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{{quantile="0"}} 3.1e-05
go_gc_duration_seconds{{quantile="0.5"}} 8.4e-05
go_gc_duration_seconds{{quantile="1"}} 0.000912
go_gc_duration_seconds_sum 0.0371
go_gc_duration_seconds_count 212
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 87
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 4.7316992e+07
# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{{code="200",host="10.96.0.1:443",method="GET"}} 2274
rest_client_requests_total{{code="200",host="10.96.0.1:443",method="PUT"}} 1163
rest_client_requests_total{{code="409",host="10.96.0.1:443",method="PUT"}} {conflicts}
# HELP workqueue_adds_total Total number of adds handled by workqueue
# TYPE workqueue_adds_total counter
workqueue_adds_total{{controller="rayjob",name="rayjob"}} 1204
# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{{controller="rayjob",name="rayjob"}} {depth}
# HELP workqueue_retries_total Total number of retries handled by workqueue
# TYPE workqueue_retries_total counter
workqueue_retries_total{{controller="rayjob",name="rayjob"}} 44
"#
    )
}

/// What the endpoint saw of the scrapes.
#[derive(Default)]
struct Seen {
    scrapes: AtomicU64,
    /// `(Accept, Authorization)` of the last scrape.
    headers: Mutex<(String, String)>,
}

/// A controller-runtime metrics endpoint on loopback whose work queue and 409 count
/// grow at every scrape; served by its own runtime, stopped on drop.
struct MetricsEndpoint {
    addr: SocketAddr,
    seen: Arc<Seen>,
    _runtime: Runtime,
}

impl MetricsEndpoint {
    fn start() -> Self {
        let listener = StdTcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local address");
        let seen = Arc::new(Seen::default());
        let runtime = Runtime::new().expect("endpoint runtime");
        let app = Router::new()
            .route("/metrics", get(serve_page))
            .with_state(seen.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            axum::serve(listener, app).await.expect("serve /metrics");
        });
        Self {
            addr,
            seen,
            _runtime: runtime,
        }
    }

    fn scrapes(&self) -> u64 {
        self.seen.scrapes.load(Ordering::SeqCst)
    }
}

async fn serve_page(State(seen): State<Arc<Seen>>, headers: HeaderMap) -> impl IntoResponse {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    *seen.headers.lock().expect("headers lock") = (header(ACCEPT), header(AUTHORIZATION));
    let scrape = seen.scrapes.fetch_add(1, Ordering::SeqCst);
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        controller_runtime_page(scrape),
    )
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn text<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attribute(attributes, key)? {
        any_value::Value::StringValue(text) => Some(text),
        _ => None,
    }
}

fn metrics_of(resource: &ResourceMetrics) -> impl Iterator<Item = &Metric> {
    resource.scope_metrics.iter().flat_map(|s| &s.metrics)
}

fn instance(resource: &ResourceMetrics) -> Option<&str> {
    text(
        &resource.resource.as_ref()?.attributes,
        "service.instance.id",
    )
}

fn gauge_value(metric: &Metric) -> Option<f64> {
    let Some(Data::Gauge(gauge)) = &metric.data else {
        return None;
    };
    match gauge.data_points.first()?.value? {
        number_data_point::Value::AsDouble(value) => Some(value),
        number_data_point::Value::AsInt(value) => Some(value as f64),
    }
}

#[test]
fn a_controller_runtime_page_arrives_as_otlp_metrics_and_a_dead_target_as_up_0() {
    let endpoint = MetricsEndpoint::start();
    // Refused while the test runs: nothing else can take the port.
    let (_held, dead) = opscope_testkit::backend::refusing_address();
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let config = format!(
        r#"
receivers:
  prometheus_scrape:
    targets: [{live}, {dead}]
    job_name: kuberay-operator
    interval: 300ms
    timeout: 250ms
    bearer_token: s3cr3t
    labels: {{ k8s.namespace.name: ray-system }}
processors:
  batch: {{ timeout: 50ms }}
exporters:
  otlp/sink: {{ endpoint: {sink} }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    metrics: {{ receivers: [prometheus_scrape], processors: [batch], exporters: [otlp/sink] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        live = endpoint.addr,
        sink = sink.endpoint(),
        health = ports.health,
        metrics = ports.metrics,
    );
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();
    let live = endpoint.addr.to_string();
    let scraped_both = |received: &common::Received| {
        [&live, &dead].iter().all(|target| {
            received
                .resource_metrics()
                .any(|r| instance(r) == Some(target.as_str()))
        })
    };
    assert!(sink.wait_for(TIMEOUT, scraped_both), "{}", opscope.logs());

    let received = sink.received();
    let page = received
        .resource_metrics()
        .find(|r| instance(r) == Some(live.as_str()))
        .expect("the live target's series");
    let resource = &page.resource.as_ref().expect("a resource").attributes;
    assert_eq!(text(resource, "service.name"), Some("kuberay-operator"));
    assert_eq!(text(resource, "k8s.namespace.name"), Some("ray-system"));
    assert_eq!(text(resource, "url.scheme"), Some("http"));
    let metric = |name: &str| {
        metrics_of(page)
            .find(|m| m.name == name)
            .unwrap_or_else(|| {
                panic!(
                    "no {name} among {:?}",
                    metrics_of(page).map(|m| &m.name).collect::<Vec<_>>()
                )
            })
    };

    let Some(Data::Sum(reconciles)) = &metric("controller_runtime_reconcile_total").data else {
        panic!("reconciles are a sum")
    };
    assert!(reconciles.is_monotonic);
    assert_eq!(reconciles.data_points.len(), 4);
    assert!(
        reconciles
            .data_points
            .iter()
            .all(|p| p.start_time_unix_nano > 0
                && text(&p.attributes, "controller") == Some("rayjob"))
    );
    let Some(Data::Sum(requests)) = &metric("rest_client_requests_total").data else {
        panic!("requests are a sum")
    };
    let conflicts = requests
        .data_points
        .iter()
        .find(|p| text(&p.attributes, "code") == Some("409"))
        .expect("the 409 series");
    assert_eq!(text(&conflicts.attributes, "method"), Some("PUT"));
    assert_eq!(
        conflicts.value,
        Some(number_data_point::Value::AsDouble(12.0))
    );

    let Some(Data::Histogram(durations)) =
        &metric("controller_runtime_reconcile_time_seconds").data
    else {
        panic!("reconcile time is a histogram")
    };
    let durations = &durations.data_points[0];
    assert_eq!(
        durations.explicit_bounds,
        [0.005, 0.01, 0.025, 0.05, 0.1, 1.0]
    );
    assert_eq!(durations.bucket_counts, [310, 392, 309, 139, 40, 14, 3]);
    assert_eq!((durations.count, durations.sum), (1207, Some(17.931)));
    assert!(matches!(
        metric("go_gc_duration_seconds").data,
        Some(Data::Summary(_))
    ));

    let depth = metric("workqueue_depth");
    let Some(Data::Gauge(depth_gauge)) = &depth.data else {
        panic!("the depth is a gauge")
    };
    assert_eq!(
        text(&depth_gauge.data_points[0].attributes, "name"),
        Some("rayjob")
    );
    assert_eq!(gauge_value(metric("go_goroutines")), Some(87.0));
    assert_eq!(
        gauge_value(metric("process_resident_memory_bytes")),
        Some(4.7316992e7)
    );
    assert_eq!(gauge_value(metric("up")), Some(1.0));

    let dead_page = received
        .resource_metrics()
        .find(|r| instance(r) == Some(dead.as_str()))
        .expect("the dead target's up");
    let dead_up = metrics_of(dead_page)
        .find(|m| m.name == "up")
        .and_then(gauge_value);
    assert_eq!(dead_up, Some(0.0));

    let (accept, authorization) = endpoint.seen.headers.lock().expect("headers lock").clone();
    assert!(
        accept.starts_with("application/openmetrics-text"),
        "{accept}"
    );
    assert_eq!(authorization, "Bearer s3cr3t");
    let failed = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_requests_total",
        &[
            ("receiver", "prometheus_scrape"),
            ("reason", "scrape_failed"),
        ],
    );
    assert!(failed >= 1.0, "scrape failures are counted: {failed}");
}

#[test]
fn a_growing_workqueue_and_409s_from_a_targets_file_fire_resource_leak_and_write_conflict() {
    let endpoint = MetricsEndpoint::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let targets = dir.path().join("targets.yaml");
    std::fs::write(&targets, "# no operator pods yet\n").expect("write targets");
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let config = format!(
        r#"
receivers:
  prometheus_scrape:
    targets_file: {targets}
    interval: 200ms
    timeout: 200ms
processors:
  operator_tagger: {{}}
  correlator: {{ resource_leak: {{ window: 6s, sample_interval: 500ms }} }}
  batch: {{ timeout: 50ms }}
exporters:
  otlp/sink: {{ endpoint: {sink} }}
  debug: {{ verbosity: basic }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    metrics: {{ receivers: [prometheus_scrape], processors: [operator_tagger, correlator, batch], exporters: [otlp/sink] }}
    signals: {{ exporters: [debug] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        targets = targets.display(),
        sink = sink.endpoint(),
        health = ports.health,
        metrics = ports.metrics,
    );
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(endpoint.scrapes(), 0, "no target listed yet");

    let group = format!(
        "- targets: [\"{}\"]\n  labels:\n    k8s.pod.name: {POD}\n    k8s.namespace.name: ray-system\n",
        endpoint.addr
    );
    std::fs::write(&targets, group).expect("write targets");
    assert!(
        wait_until(TIMEOUT, || endpoint.scrapes() >= 3),
        "the target is scraped once the file lists it: {}",
        opscope.logs()
    );

    let fired = wait_until(TIMEOUT, || {
        opscope.metric_value(
            &ports.metrics_addr(),
            "opscope_signals_total",
            &[("signal", "resource_leak"), ("cause", "workqueue_backlog")],
        ) == 1.0
    });
    assert!(fired, "{}", opscope.logs());
    let conflicted = wait_until(TIMEOUT, || {
        opscope.metric_value(
            &ports.metrics_addr(),
            "opscope_signals_total",
            &[("signal", "write_conflict"), ("cause", "stale_cache")],
        ) == 1.0
    });
    assert!(conflicted, "{}", opscope.logs());
    let printed = opscope.logs();
    assert!(printed.contains("resource_leak"), "{printed}");
    assert!(
        printed.contains(&format!("write_conflict Pod ray-system/{POD}")),
        "the 409s are the operator pod's: {printed}"
    );
    let tagged = sink.received().resource_metrics().any(|r| {
        let attributes = &r.resource.as_ref().expect("a resource").attributes;
        text(attributes, "k8s.pod.name") == Some(POD)
            && text(attributes, "operator.name") == Some("kuberay-operator")
    });
    assert!(tagged, "the pod names the operator");
}
