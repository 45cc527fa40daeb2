//! The audit webhook of the running agent: the API server's `EventList` batches in,
//! one tagged log record per event out, a reconcile loop, a write conflict and a
//! finalizer leak found from audit events alone, and the answers the API server's
//! batching relies on.

mod common;

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::audit::{deletion_by_person, event_list, rfc3339};
use common::{Behaviour, Opscope, OtlpSink, Ports, http_get, http_post, wait_until};
use flate2::Compression;
use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(20);
const LOOP_WRITES: u64 = 40;
const CONFLICTS: u64 = 6;
const RAY_OPERATOR: &str = "system:serviceaccount:ray-system:kuberay-operator";
const WIDGET_OPERATOR: &str = "system:serviceaccount:widget-system:widget-operator";
const JSON: (&str, &str) = ("Content-Type", "application/json");

struct Agent {
    opscope: Opscope,
    ports: Ports,
    /// The webhook's `host:port`.
    audit: String,
}

fn start(sink: &OtlpSink, processors: &str, max_body: usize) -> Agent {
    start_with(
        sink,
        processors,
        &format!("max_request_body_size: {max_body}"),
    )
}

/// An agent whose `k8s_audit` receiver has `settings` (YAML lines) besides its endpoint.
fn start_with(sink: &OtlpSink, processors: &str, settings: &str) -> Agent {
    let ports = Ports::ANY;
    let config = format!(
        r#"
receivers:
  k8s_audit:
    endpoint: 127.0.0.1:0
    {settings}
processors:
  operator_tagger: {{}}
  correlator: {{ finalizer_leak: {{ max_age: 2s }} }}
  batch: {{ timeout: 50ms }}
exporters:
  otlp/sink: {{ endpoint: {sink}, timeout: 30s, sending_queue: {{ queue_size: 1, num_consumers: 1 }} }}
  debug: {{ verbosity: basic }}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  pipelines:
    logs: {{ receivers: [k8s_audit], processors: [{processors}], exporters: [otlp/sink] }}
    signals: {{ exporters: [debug] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        sink = sink.endpoint(),
        health = ports.health,
        metrics = ports.metrics,
    );
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();
    let audit = opscope.address("receivers.k8s_audit");
    Agent {
        opscope,
        ports,
        audit,
    }
}

impl Agent {
    fn metric(&self, family: &str, labels: &[(&str, &str)]) -> f64 {
        self.opscope
            .metric_value(&self.ports.metrics_addr(), family, labels)
    }
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

fn user(username: &str, pod: &str) -> Value {
    let namespace = username.split(':').nth(2).unwrap_or_default();
    json!({
        "username": username,
        "uid": "9c1a7e42-5b3d-4f8e-a6c1-2d7b8e9f0a13",
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}"), "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": [pod]}
    })
}

/// A RayJob as the API server returns it, its status written at `synced`.
fn ray_job(resource_version: u64, synced: &str) -> Value {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {
            "name": "train", "namespace": "ml", "uid": "b3f1c9d2-7a4e-4c6b-8e2f-1a9d0c5b7e64",
            "resourceVersion": resource_version.to_string(), "generation": 2,
            "creationTimestamp": "2024-05-01T11:58:30Z", "finalizers": ["ray.io/rayjob-finalizer"]
        },
        "spec": {"entrypoint": "python /home/ray/train.py", "shutdownAfterJobFinishes": true},
        "status": {
            "jobId": "train-7xk2p", "jobStatus": "RUNNING", "jobDeploymentStatus": "Running",
            "lastSyncTime": synced, "observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                            "lastTransitionTime": "2024-05-01T11:59:10Z"}]
        }
    })
}

/// The two events of one `PUT .../rayjobs/train/status` at RequestResponse level: the
/// operator writes `status.lastSyncTime = now` on every reconcile.
fn status_update(index: u64, time: u64) -> [Value; 2] {
    let synced = rfc3339(time);
    let received = rfc3339(time - 2_000_000);
    let version = 48_000 + index;
    let common = json!({
        "level": "RequestResponse",
        "auditID": format!("4c1d2e3f-0a1b-4c2d-8e3f-{index:012}"),
        "requestURI": "/apis/ray.io/v1/namespaces/ml/rayjobs/train/status",
        "verb": "update",
        "user": user(RAY_OPERATOR, "kuberay-operator-6c9f7d8b9-x2x7q"),
        "sourceIPs": ["10.244.1.17"],
        "userAgent": "kuberay-operator/v1.1.0 (linux/amd64) kubernetes/$Format",
        "objectRef": {"resource": "rayjobs", "namespace": "ml", "name": "train",
                      "uid": "b3f1c9d2-7a4e-4c6b-8e2f-1a9d0c5b7e64", "apiGroup": "ray.io",
                      "apiVersion": "v1", "subresource": "status"},
        "requestReceivedTimestamp": received,
    });
    let mut started = common.clone();
    started["stage"] = json!("RequestReceived");
    started["stageTimestamp"] = json!(received);
    let mut completed = common;
    completed["stage"] = json!("ResponseComplete");
    completed["stageTimestamp"] = json!(synced);
    completed["responseStatus"] = json!({"metadata": {}, "code": 200});
    completed["requestObject"] = ray_job(version, &synced);
    completed["responseObject"] = ray_job(version + 1, &synced);
    completed["annotations"] = json!({"authorization.k8s.io/decision": "allow",
        "authorization.k8s.io/reason": "RBAC: allowed by ClusterRoleBinding \"kuberay-operator\""});
    [started, completed]
}

/// A `PUT .../widgets/cache-a` answered 409: the operator updates from a stale copy.
fn conflicting_update(index: u64, time: u64) -> Value {
    let message = "Operation cannot be fulfilled on widgets.example.com \"cache-a\": the object has been modified; please apply your changes to the latest version and try again";
    json!({
        "level": "Metadata",
        "auditID": format!("7e8f9a0b-1c2d-4e3f-8a9b-{index:012}"),
        "stage": "ResponseComplete",
        "requestURI": "/apis/example.com/v1/namespaces/shop/widgets/cache-a",
        "verb": "update",
        "user": user(WIDGET_OPERATOR, "widget-operator-5d6b8c9f7-h7k2m"),
        "sourceIPs": ["10.244.2.31"],
        "userAgent": "widget-operator/v0.3.0 (linux/amd64) kubernetes/$Format",
        "objectRef": {"resource": "widgets", "namespace": "shop", "name": "cache-a",
                      "apiGroup": "example.com", "apiVersion": "v1", "resourceVersion": "7311"},
        "responseStatus": {"metadata": {}, "status": "Failure", "message": message,
                           "reason": "Conflict", "details": {"name": "cache-a", "group": "example.com", "kind": "widgets"},
                           "code": 409},
        "requestReceivedTimestamp": rfc3339(time - 1_000_000),
        "stageTimestamp": rfc3339(time),
    })
}

/// `kubectl delete rayjob eval` by a person: the object stays, held by its finalizer.
fn delete_held_by_finalizer(time: u64) -> Value {
    let mut object = ray_job(48_500, &rfc3339(time));
    object["metadata"]["name"] = json!("eval");
    object["metadata"]["deletionTimestamp"] = json!(rfc3339(time));
    deletion_by_person("eval", object, time)
}

/// Events the default filters leave out: a person's request and a lease renewal.
fn filtered_out(time: u64) -> Vec<Value> {
    let mut admin = conflicting_update(900, time);
    admin["user"] = json!({"username": "kubernetes-admin", "groups": ["system:masters"]});
    let mut lease = conflicting_update(901, time);
    lease["objectRef"] = json!({"resource": "leases", "namespace": "ray-system",
        "name": "ray-operator-leader", "apiGroup": "coordination.k8s.io", "apiVersion": "v1"});
    vec![admin, lease]
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(body).expect("gzip");
    encoder.finish().expect("gzip")
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn text<'a>(record: &'a LogRecord, key: &str) -> Option<&'a str> {
    match attribute(&record.attributes, key)? {
        any_value::Value::StringValue(text) => Some(text),
        _ => None,
    }
}

fn int(record: &LogRecord, key: &str) -> Option<i64> {
    match attribute(&record.attributes, key)? {
        any_value::Value::IntValue(value) => Some(*value),
        _ => None,
    }
}

#[test]
fn audit_batches_become_tagged_records_and_fire_loop_conflict_and_finalizer_signals() {
    let sink = OtlpSink::grpc();
    let agent = start(&sink, "operator_tagger, correlator, batch", 16 << 20);
    let now = now_nanos();
    let mut loop_items: Vec<Value> = (0..LOOP_WRITES)
        .flat_map(|i| status_update(i, now - (LOOP_WRITES - i) * 500_000_000))
        .collect();
    loop_items.push(delete_held_by_finalizer(now - 5_000_000_000));
    loop_items.extend(filtered_out(now));
    let answer = http_post(&agent.audit, "/", &[JSON], &event_list(loop_items)).expect("POST");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let conflicts: Vec<Value> = (0..CONFLICTS)
        .map(|i| conflicting_update(i, now - (CONFLICTS - i) * 300_000_000))
        .collect();
    let answer = http_post(
        &agent.audit,
        "/k8s-audit/webhook",
        &[JSON, ("Content-Encoding", "gzip")],
        &gzip(&event_list(conflicts)),
    )
    .expect("POST");
    assert_eq!(answer.status, 200, "{}", answer.text());

    let expected = (LOOP_WRITES + 1 + CONFLICTS) as usize;
    assert!(
        sink.wait_for(TIMEOUT, |r| r.log_record_count() >= expected),
        "{} of {expected} records arrived",
        sink.log_record_count()
    );
    let received = sink.received();
    assert_eq!(
        received.log_record_count(),
        expected,
        "one record per admitted event"
    );
    let resource = received
        .resource_logs()
        .next()
        .and_then(|r| r.resource.as_ref());
    let service = resource.and_then(|r| attribute(&r.attributes, "service.name"));
    assert!(
        matches!(service, Some(any_value::Value::StringValue(s)) if s == "kube-apiserver-audit")
    );
    let records: Vec<&LogRecord> = received.log_records().collect();
    let writes: Vec<_> = records
        .iter()
        .filter(|r| text(r, "k8s.object.name") == Some("train"))
        .collect();
    assert_eq!(writes.len(), LOOP_WRITES as usize);
    for record in &writes {
        assert_eq!(text(record, "k8s.api.verb"), Some("update"));
        assert_eq!(text(record, "k8s.api.subresource"), Some("status"));
        assert_eq!(text(record, "k8s.object.kind"), Some("RayJob"));
        assert_eq!(text(record, "k8s.object.namespace"), Some("ml"));
        assert_eq!(text(record, "k8s.api.actor"), Some(RAY_OPERATOR));
        assert_eq!(int(record, "http.response.status_code"), Some(200));
        assert!(
            text(record, "opscope.log.source").is_some_and(|s| s.starts_with("audit 4c1d2e3f-"))
        );
        assert!(record.time_unix_nano > now - 30_000_000_000 && record.time_unix_nano <= now);
    }
    let conflicted = records
        .iter()
        .filter(|r| {
            text(r, "k8s.api.name") == Some("cache-a")
                && int(r, "http.response.status_code") == Some(409)
        })
        .count();
    assert_eq!(conflicted, CONFLICTS as usize);

    let fired = |signal: &str, cause: &str| {
        wait_until(TIMEOUT, || {
            agent.metric(
                "opscope_signals_total",
                &[("signal", signal), ("cause", cause)],
            ) == 1.0
        })
    };
    assert!(
        fired("reconcile_loop", "field_churn:status.lastSyncTime"),
        "{}",
        agent.opscope.logs()
    );
    assert!(
        fired("write_conflict", "stale_cache"),
        "{}",
        agent.opscope.logs()
    );
    assert_eq!(
        agent.metric(
            "opscope_receiver_accepted_log_records_total",
            &[("receiver", "k8s_audit")]
        ),
        expected as f64
    );
}

#[test]
fn bad_batches_are_refused_with_a_reason_and_counted() {
    let sink = OtlpSink::grpc();
    let agent = start(&sink, "batch", 64 * 1024);
    let post = |body: &[u8]| http_post(&agent.audit, "/audit", &[JSON], body).expect("POST");

    let not_json = post(b"{\"kind\": \"EventList\", \"items\": [");
    assert_eq!(not_json.status, 400);
    assert!(
        not_json.text().contains("not an audit EventList"),
        "{}",
        not_json.text()
    );

    let one_event = post(&serde_json::to_vec(&conflicting_update(1, now_nanos())).expect("JSON"));
    assert_eq!(one_event.status, 400);
    assert!(
        one_event.text().contains("expected kind EventList"),
        "{}",
        one_event.text()
    );

    let bad_item =
        post(br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"stage":3}]}"#);
    assert_eq!(bad_item.status, 400);
    assert!(
        bad_item.text().starts_with("items[0]"),
        "{}",
        bad_item.text()
    );

    let huge: Vec<Value> = (0..200)
        .map(|i| conflicting_update(i, now_nanos()))
        .collect();
    let too_large = post(&gzip(&event_list(huge.clone())));
    assert_eq!(
        too_large.status, 400,
        "a gzip body without Content-Encoding is not JSON"
    );
    let too_large = http_post(
        &agent.audit,
        "/audit",
        &[JSON, ("Content-Encoding", "gzip")],
        &gzip(&event_list(huge)),
    )
    .expect("POST");
    assert_eq!(
        too_large.status, 413,
        "the limit applies after decompression"
    );

    let get = http_get(&agent.audit, "/audit").expect("GET");
    assert_eq!(get.status, 405);

    let refused = |reason| {
        agent.metric(
            "opscope_receiver_refused_requests_total",
            &[("receiver", "k8s_audit"), ("reason", reason)],
        )
    };
    assert_eq!(refused("bad_request"), 4.0);
    assert_eq!(refused("too_large"), 1.0);
    assert_eq!(sink.log_record_count(), 0);
}

#[test]
fn a_batch_of_millions_of_empty_events_is_refused_before_they_are_read() {
    const MIB: u64 = 1024 * 1024;
    let sink = OtlpSink::grpc();
    // As the shipped DaemonSet runs it: a token, and the default limits.
    let agent = start_with(&sink, "batch", "auth: { bearer_tokens: [audit-token] }");
    let items = vec!["{}"; 5_500_000].join(",");
    let list =
        format!(r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{items}]}}"#);
    assert!(list.len() < 16 * MIB as usize);
    let compressed = gzip(list.as_bytes());
    let post = |token: &str| {
        let authorization = format!("Bearer {token}");
        http_post(
            &agent.audit,
            "/audit",
            &[
                JSON,
                ("Content-Encoding", "gzip"),
                ("Authorization", &authorization),
            ],
            &compressed,
        )
        .expect("POST")
    };
    assert_eq!(post("guess").status, 401, "an unauthenticated client");
    let refused = post("audit-token");
    assert_eq!(refused.status, 413, "{}", refused.text());
    assert_eq!(
        refused.text(),
        "the batch holds more than max_events_per_request 10000 events"
    );
    let resident = common::resident_bytes(agent.opscope.pid());
    assert!(resident < 128 * MIB, "{} MiB", resident / MIB);
    common::report_fault(
        "audit_amplification",
        &[("rss_mib", (resident / MIB) as f64)],
    );

    let real = event_list(status_update(1, now_nanos()).to_vec());
    let authorization = "Bearer audit-token";
    let taken = http_post(
        &agent.audit,
        "/audit",
        &[JSON, ("Authorization", authorization)],
        &real,
    )
    .expect("POST");
    assert_eq!(taken.status, 200, "{}", taken.text());
    assert!(
        sink.wait_for(TIMEOUT, |received| received.log_record_count() == 1),
        "got {} records",
        sink.log_record_count()
    );
}

#[test]
fn a_full_pipeline_answers_503_and_loses_nothing_it_accepted() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Hold);
    let agent = start(&sink, "batch", 16 << 20);
    let batch = |i: u64| event_list(vec![conflicting_update(i, now_nanos())]);
    let mut accepted = 0;
    let refusal = (0..2000)
        .map(|i| http_post(&agent.audit, "/", &[JSON], &batch(i)).expect("POST"))
        .find(|answer| {
            accepted += usize::from(answer.status == 200);
            answer.status != 200
        })
        .expect("the webhook refuses once the pipeline is full");
    assert_eq!(refusal.status, 503, "{}", refusal.text());
    assert_eq!(refusal.header("Retry-After"), Some("1"));
    assert!(accepted > 0);
    assert_eq!(
        agent.metric(
            "opscope_receiver_refused_log_records_total",
            &[("receiver", "k8s_audit"), ("reason", "pipeline_full")]
        ),
        1.0
    );

    sink.release();
    assert!(
        sink.wait_for(TIMEOUT, |r| r.log_record_count() == accepted),
        "{} of {accepted} accepted records delivered",
        sink.log_record_count()
    );
    let retried = http_post(&agent.audit, "/", &[JSON], &batch(9999)).expect("POST");
    assert_eq!(retried.status, 200, "a retry is taken once there is room");
}

#[test]
fn an_audit_log_file_is_tailed_and_its_conflicts_fire() {
    let sink = OtlpSink::grpc();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("audit.log");
    std::fs::write(&log, "").expect("create the audit log");
    let settings = format!(
        "file: {}\n    storage: {}",
        log.display(),
        dir.path().join("state").display()
    );
    let agent = start_with(&sink, "operator_tagger, correlator, batch", &settings);
    let now = now_nanos();
    let mut lines = String::new();
    for index in 0..CONFLICTS {
        let mut event = conflicting_update(index, now - (CONFLICTS - index) * 100_000_000);
        event["kind"] = json!("Event");
        event["apiVersion"] = json!("audit.k8s.io/v1");
        lines.push_str(&format!("{event}\n"));
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut file| std::io::Write::write_all(&mut file, lines.as_bytes()))
        .expect("append to the audit log");
    let fired = wait_until(TIMEOUT, || {
        agent.metric("opscope_signals_total", &[("signal", "write_conflict")]) == 1.0
    });
    assert!(fired, "{}", agent.opscope.logs());
    assert!(sink.wait_for(TIMEOUT, |r| r.log_record_count() == CONFLICTS as usize));
}
