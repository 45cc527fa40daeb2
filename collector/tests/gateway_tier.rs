//! The gateway tier as separate processes on loopback: three agents, each the agent
//! of one node, route by object to three gateways that correlate; the simulated
//! fleet's operator pods are spread over the agents (the two replicas of
//! widget-operator on two of them), and an audit batch is posted to one gateway
//! picked at random. A single process given the same inputs is the reference: the
//! tier must fire the same signals (signal, object, cause), each from one gateway.
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Opscope, OtlpSink, Ports, free_port, http_post, wait_until};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use opscope_workload::{SimulatedFleet, TICK_MILLIS};
use serde_json::json;
use tokio::runtime::Runtime;
use tonic::transport::Channel;

/// How long the fleet plays: long enough for the loop, the conflicts and both
/// finalizer leaks (10 s `max_age` here) to fire.
const PLAY: Duration = Duration::from_secs(16);
const SIGNALS_TIMEOUT: Duration = Duration::from_secs(30);

/// The correlator's settings, the same everywhere: the demo's short thresholds.
const CORRELATOR: &str = "{ finalizer_leak: { max_age: 10s }, update_interval: 10s }";

/// Which agent (node) runs each operator pod of the fleet.
fn node_of(pod: &str) -> usize {
    match pod {
        "widget-operator-5d6b8c9f7-q8w2z" => 1,
        "widget-operator-5d6b8c9f7-h7k2m" => 2,
        _ => 0,
    }
}

/// A process with OTLP/gRPC and audit webhook ports, and the sink its signals go to.
struct Process {
    ports: Ports,
    audit: u16,
    signals: OtlpSink,
    opscope: Option<Opscope>,
}

impl Process {
    fn new() -> Self {
        Self {
            ports: Ports::free(),
            audit: free_port(),
            signals: OtlpSink::grpc(),
            opscope: None,
        }
    }

    fn start(&mut self, config: &str) {
        self.opscope = Some(Opscope::start(config, &self.ports.health_addr()));
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.ports.grpc)
    }
}

/// The common end of every config: health check and self-telemetry on loopback.
fn service_end(ports: &Ports) -> String {
    format!(
        r#"extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
"#,
        health = ports.health
    )
}

fn telemetry(ports: &Ports) -> String {
    format!(
        r#"  extensions: [health_check]
  telemetry:
    logs: {{ level: warn }}
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
        metrics = ports.metrics
    )
}

fn routing(gateways: &[String]) -> String {
    let hostnames: Vec<String> = gateways.iter().map(|g| format!("\"{g}\"")).collect();
    format!(
        r#"  loadbalancing:
    protocol: {{ otlp: {{ tls: {{ insecure: true }}, timeout: 5s }} }}
    resolver: {{ static: {{ hostnames: [{}] }} }}
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 500ms, max_elapsed_time: 60s }}
"#,
        hostnames.join(", ")
    )
}

/// The agent of a node: tags its pods' spans and routes them by object.
fn agent_config(agent: &Process, gateways: &[String]) -> String {
    format!(
        r#"receivers:
  otlp: {{ protocols: {{ grpc: {{ endpoint: 127.0.0.1:{grpc} }} }} }}
processors:
  operator_tagger: {{}}
  batch: {{ timeout: 100ms }}
exporters:
{routing}{end}service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger, batch], exporters: [loadbalancing] }}
{telemetry}"#,
        grpc = agent.ports.grpc,
        routing = routing(gateways),
        end = service_end(&agent.ports),
        telemetry = telemetry(&agent.ports),
    )
}

/// A gateway: correlates what the agents route to it; audit events it takes go on
/// to their object's owner by the same ring.
fn gateway_config(gateway: &Process, gateways: &[String]) -> String {
    format!(
        r#"receivers:
  otlp: {{ protocols: {{ grpc: {{ endpoint: 127.0.0.1:{grpc} }} }} }}
  k8s_audit: {{ endpoint: 127.0.0.1:{audit} }}
processors:
  operator_tagger: {{}}
  correlator: {CORRELATOR}
  batch: {{ timeout: 100ms }}
exporters:
  otlp/signals: {{ endpoint: "{signals}", tls: {{ insecure: true }} }}
{routing}{end}service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [correlator] }}
    logs: {{ receivers: [otlp], processors: [correlator] }}
    logs/audit: {{ receivers: [k8s_audit], processors: [operator_tagger, batch], exporters: [loadbalancing] }}
    signals: {{ exporters: [otlp/signals] }}
{telemetry}"#,
        grpc = gateway.ports.grpc,
        audit = gateway.audit,
        signals = gateway.signals.endpoint(),
        routing = routing(gateways),
        end = service_end(&gateway.ports),
        telemetry = telemetry(&gateway.ports),
    )
}

/// One process that sees everything.
fn single_process_config(process: &Process) -> String {
    format!(
        r#"receivers:
  otlp: {{ protocols: {{ grpc: {{ endpoint: 127.0.0.1:{grpc} }} }} }}
  k8s_audit: {{ endpoint: 127.0.0.1:{audit} }}
processors:
  operator_tagger: {{}}
  correlator: {CORRELATOR}
exporters:
  otlp/signals: {{ endpoint: "{signals}", tls: {{ insecure: true }} }}
{end}service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger, correlator] }}
    logs/audit: {{ receivers: [k8s_audit], processors: [operator_tagger, correlator] }}
    signals: {{ exporters: [otlp/signals] }}
{telemetry}"#,
        grpc = process.ports.grpc,
        audit = process.audit,
        signals = process.signals.endpoint(),
        end = service_end(&process.ports),
        telemetry = telemetry(&process.ports),
    )
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

fn rfc3339(nanos: u64) -> String {
    humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_nanos(nanos)).to_string()
}

/// `kubectl delete rayjob eval` by a person: the object stays, held by its finalizer,
/// and no operator record ever mentions it: the audit event is its only evidence.
fn deletion_held_by_finalizer(time: u64) -> Vec<u8> {
    let object = json!({
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {
            "name": "eval", "namespace": "ml", "uid": "0b6c2f8e-3d1a-4e7b-9c5f-8a2d4e6f1b3c",
            "resourceVersion": "48500", "generation": 1,
            "creationTimestamp": "2024-05-01T11:58:30Z",
            "deletionTimestamp": rfc3339(time), "deletionGracePeriodSeconds": 0,
            "finalizers": ["ray.io/rayjob-finalizer"]
        },
        "spec": {"entrypoint": "python /home/ray/eval.py"}
    });
    let event = json!({
        "level": "RequestResponse",
        "auditID": "c3d4e5f6-a7b8-4c9d-8e0f-2a3b4c5d6e7f",
        "stage": "ResponseComplete",
        "requestURI": "/apis/ray.io/v1/namespaces/ml/rayjobs/eval",
        "verb": "delete",
        "user": {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]},
        "sourceIPs": ["192.168.49.1"],
        "userAgent": "kubectl/v1.30.1 (linux/amd64) kubernetes/9befeb3",
        "objectRef": {"resource": "rayjobs", "namespace": "ml", "name": "eval", "apiGroup": "ray.io", "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": 200},
        "requestObject": {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": "Background"},
        "responseObject": object,
        "requestReceivedTimestamp": rfc3339(time - 3_000_000),
        "stageTimestamp": rfc3339(time),
    });
    let list = json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": [event]});
    serde_json::to_vec(&list).expect("JSON")
}

fn post_audit(process: &Process, body: &[u8]) {
    let answer = http_post(
        &format!("127.0.0.1:{}", process.audit),
        "/",
        &[("Content-Type", "application/json")],
        body,
    )
    .expect("POST the audit batch");
    assert_eq!(answer.status, 200, "{}", answer.text());
}

fn pod_of(resource_spans: &opentelemetry_proto::tonic::trace::v1::ResourceSpans) -> String {
    let attributes = resource_spans
        .resource
        .as_ref()
        .map_or(&[][..], |r| &r.attributes[..]);
    text(attributes, "k8s.pod.name").unwrap_or_default()
}

fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    let kv = attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(text) => Some(text.clone()),
        _ => None,
    }
}

/// Plays the fleet for `PLAY` in real time: each tick's spans to the agent of each
/// pod's node, and all of them to the single process. The audit batch goes to the
/// single process and to `audit_to` one second in.
fn play(agents: &[Process], single: &Process, audit_to: &Process) {
    let runtime = Runtime::new().expect("client runtime");
    runtime.block_on(async {
        let connect = |address: String| async move {
            TraceServiceClient::connect(format!("http://{address}"))
                .await
                .expect("connect")
        };
        let mut agent_clients: Vec<TraceServiceClient<Channel>> = Vec::new();
        for agent in agents {
            agent_clients.push(connect(agent.address()).await);
        }
        let mut single_client = connect(single.address()).await;
        let started = now_nanos();
        let mut fleet = SimulatedFleet::new(started);
        let mut interval = tokio::time::interval(Duration::from_millis(TICK_MILLIS));
        let ticks = PLAY.as_millis() as u64 / TICK_MILLIS;
        for tick in 0..ticks {
            interval.tick().await;
            let request = fleet.tick(now_nanos());
            if tick == 5 {
                let body = deletion_held_by_finalizer(now_nanos());
                post_audit(single, &body);
                post_audit(audit_to, &body);
            }
            let mut by_node: BTreeMap<usize, ExportTraceServiceRequest> = BTreeMap::new();
            for resource_spans in &request.resource_spans {
                by_node
                    .entry(node_of(&pod_of(resource_spans)))
                    .or_default()
                    .resource_spans
                    .push(resource_spans.clone());
            }
            for (node, part) in by_node {
                agent_clients[node]
                    .export(part)
                    .await
                    .expect("agent accepts");
            }
            single_client.export(request).await.expect("single accepts");
        }
    });
}

/// A signal as compared: its name, object, and the cause it fired with.
type SignalKey = (String, String, String);

fn firing(spans: &[Span]) -> BTreeSet<SignalKey> {
    spans
        .iter()
        .filter(|span| text(&span.attributes, "opscope.signal.state").as_deref() == Some("firing"))
        .map(|span| {
            let get = |key| text(&span.attributes, key).unwrap_or_default();
            let object = format!(
                "{} {}/{}",
                get("k8s.object.kind"),
                get("k8s.object.namespace"),
                get("k8s.object.name")
            );
            (
                get("opscope.signal.name"),
                object,
                get("opscope.signal.cause"),
            )
        })
        .collect()
}

fn signal_spans(sink: &OtlpSink) -> Vec<Span> {
    sink.received().spans().cloned().collect()
}

const EXPECTED: [(&str, &str); 4] = [
    ("reconcile_loop", "RayJob ml/train"),
    ("write_conflict", "Widget shop/shared"),
    ("finalizer_leak", "Widget shop/stuck"),
    ("finalizer_leak", "RayJob ml/eval"),
];

fn has_all(signals: &BTreeSet<SignalKey>) -> bool {
    EXPECTED
        .iter()
        .all(|(name, object)| signals.iter().any(|(n, o, _)| n == name && o == object))
}

#[test]
fn three_agents_and_three_gateways_fire_what_one_process_fires_each_signal_once() {
    let mut gateways: Vec<Process> = (0..3).map(|_| Process::new()).collect();
    let addresses: Vec<String> = gateways.iter().map(Process::address).collect();
    for gateway in &mut gateways {
        let config = gateway_config(gateway, &addresses);
        gateway.start(&config);
    }
    let mut agents: Vec<Process> = (0..3).map(|_| Process::new()).collect();
    for agent in &mut agents {
        let config = agent_config(agent, &addresses);
        agent.start(&config);
    }
    let mut single = Process::new();
    let config = single_process_config(&single);
    single.start(&config);

    let audit_to = &gateways[(now_nanos() % 3) as usize];
    play(&agents, &single, audit_to);

    let tier = || {
        gateways
            .iter()
            .flat_map(|gateway| firing(&signal_spans(&gateway.signals)))
            .collect::<BTreeSet<_>>()
    };
    let settled = wait_until(SIGNALS_TIMEOUT, || {
        has_all(&firing(&signal_spans(&single.signals))) && has_all(&tier())
    });
    let reference = firing(&signal_spans(&single.signals));
    assert!(
        settled,
        "not every signal fired in time:\nsingle process: {reference:#?}\ntier: {:#?}",
        tier()
    );
    assert_eq!(tier(), reference, "the tier fires what one process fires");

    // Each signal from one gateway only: its object's owner.
    let mut fired_by: BTreeMap<String, usize> = BTreeMap::new();
    for (index, gateway) in gateways.iter().enumerate() {
        for span in signal_spans(&gateway.signals) {
            let id = text(&span.attributes, "opscope.signal.id").unwrap_or_default();
            let owner = *fired_by.entry(id.clone()).or_insert(index);
            assert_eq!(owner, index, "signal {id} came from two gateways");
        }
    }
    assert!(
        fired_by.values().collect::<BTreeSet<_>>().len() >= 2,
        "the signals' objects are spread over the gateways: {fired_by:?}"
    );
}
