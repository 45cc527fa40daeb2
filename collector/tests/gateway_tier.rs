//! The gateway tier as separate processes on loopback: three agents, each the agent
//! of one node, route by object to three gateways that correlate; the simulated
//! fleet's operator pods are spread over the agents (the two replicas of
//! widget-operator on two of them), and an audit batch is posted to one gateway
//! picked at random. A single process given the same inputs is the reference: the
//! tier must fire the same signals (signal, object, cause), each from one gateway.
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use common::audit::{deletion_by_person, event_list, rfc3339};
use common::reconciles::{
    SECOND, export_in_order, looping, now_nanos, reconciles, reconciles_apart,
};
use common::{
    Opscope, OtlpSink, Ports, RssSampler, free_port, http_post, own_loopback_block, wait_until,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use opscope_exporters::loadbalancing::Ring;
use opscope_exporters::loadbalancing::routing::record_key;
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
/// Its listeners take free ports, but for a gateway's OTLP/gRPC receiver, which the
/// configs of every process name before any starts: that one listens on a loopback
/// address no other test uses (see [`gateway_hosts`]).
struct Process {
    /// Where its OTLP/gRPC receiver listens: 127.0.0.1, or a gateway's address.
    host: String,
    /// The ports asked for (0 but a gateway's OTLP/gRPC), then the ports bound.
    ports: Ports,
    /// The audit webhook's `host:port`, once started.
    audit: String,
    signals: OtlpSink,
    opscope: Option<Opscope>,
}

impl Process {
    fn new() -> Self {
        Self {
            host: "127.0.0.1".into(),
            ports: Ports::ANY,
            audit: String::new(),
            signals: OtlpSink::grpc(),
            opscope: None,
        }
    }

    /// A gateway on loopback address `host`, its OTLP/gRPC receiver on `port`.
    fn at(host: &str, port: u16) -> Self {
        let mut process = Self::new();
        process.host = host.into();
        process.ports.grpc = port;
        process
    }

    /// Starts it on `config`; with `hosts`, in a mount namespace of its own where
    /// that file is `/etc/hosts`. An error carries what it printed.
    fn try_start(&mut self, config: &str, hosts: Option<&Path>) -> Result<(), String> {
        let opscope = match hosts {
            Some(hosts) => Opscope::try_start_with_hosts(config, hosts)?,
            None => Opscope::try_start(config)?,
        };
        self.ports = opscope.ports();
        if config.contains("k8s_audit:") {
            self.audit = opscope.address("receivers.k8s_audit");
        }
        self.opscope = Some(opscope);
        Ok(())
    }

    fn start(&mut self, config: &str, hosts: Option<&Path>) {
        if let Err(why) = self.try_start(config, hosts) {
            panic!("opscope did not start: {why}");
        }
    }

    fn address(&self) -> String {
        format!("{}:{}", self.host, self.ports.grpc)
    }

    fn webhook(&self) -> String {
        self.audit.clone()
    }
}

/// The loopback addresses of `count` gateways, in a block of the tier's own, and the
/// one port they share.
fn gateway_hosts(count: usize) -> (Vec<String>, u16) {
    let block = own_loopback_block();
    let hosts = (0..count)
        .map(|index| format!("{block}.{}", 11 + index))
        .collect();
    (hosts, free_port())
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

/// How agents and gateways find the gateways.
#[derive(Clone)]
enum Membership {
    Static(Vec<String>),
    /// A name the test's hosts file resolves, re-resolved every second.
    Dns {
        hostname: String,
        port: u16,
    },
}

fn routing(membership: &Membership) -> String {
    let resolver = match membership {
        Membership::Static(gateways) => {
            let hostnames: Vec<String> = gateways.iter().map(|g| format!("\"{g}\"")).collect();
            format!("static: {{ hostnames: [{}] }}", hostnames.join(", "))
        }
        Membership::Dns { hostname, port } => {
            format!("dns: {{ hostname: {hostname}, port: {port}, interval: 1s, timeout: 1s }}")
        }
    };
    format!(
        r#"  loadbalancing:
    protocol: {{ otlp: {{ tls: {{ insecure: true }}, timeout: 5s }} }}
    resolver: {{ {resolver} }}
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 500ms, max_elapsed_time: 60s }}
"#
    )
}

/// The agent of a node: tags its pods' spans and routes them by object.
fn agent_config(agent: &Process, gateways: &Membership) -> String {
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
/// to their object's owner by the same ring. With `journal`, its correlator keeps
/// its journal there and hands objects over when the ring changes.
fn gateway_config(gateway: &Process, gateways: &Membership, journal: Option<&Path>) -> String {
    let correlator = match journal {
        Some(directory) => CORRELATOR.replacen(
            '{',
            &format!(
                "{{ storage: {{ directory: \"{}\" }}, handover: {{ exporter: loadbalancing, endpoint: \"{}\" }},",
                directory.display(),
                gateway.address()
            ),
            1,
        ),
        None => CORRELATOR.to_string(),
    };
    format!(
        r#"receivers:
  otlp: {{ protocols: {{ grpc: {{ endpoint: "{grpc}" }} }}, accept_handover: true }}
  k8s_audit: {{ endpoint: 127.0.0.1:0 }}
processors:
  operator_tagger: {{}}
  correlator: {correlator}
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
        grpc = gateway.address(),
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
  k8s_audit: {{ endpoint: 127.0.0.1:0 }}
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
        signals = process.signals.endpoint(),
        end = service_end(&process.ports),
        telemetry = telemetry(&process.ports),
    )
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
    event_list(vec![deletion_by_person("eval", object, time)])
}

fn post_audit(webhook: &str, body: &[u8]) {
    let answer = http_post(webhook, "/", &[("Content-Type", "application/json")], body)
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

/// Where the fleet's data goes: the agents' and the single process's OTLP/gRPC
/// addresses, and the audit webhooks the batch is posted to.
#[derive(Clone)]
struct Targets {
    agents: Vec<String>,
    single: String,
    audit: Vec<String>,
}

/// Plays the fleet for `PLAY` in real time: each tick's spans to the agent of each
/// pod's node, and all of them to the single process. The audit batch goes to each
/// of `targets.audit` one second in.
fn play(targets: &Targets) {
    let runtime = Runtime::new().expect("client runtime");
    runtime.block_on(async {
        let connect = |address: String| async move {
            TraceServiceClient::connect(format!("http://{address}"))
                .await
                .expect("connect")
        };
        let mut agent_clients: Vec<TraceServiceClient<Channel>> = Vec::new();
        for agent in &targets.agents {
            agent_clients.push(connect(agent.clone()).await);
        }
        let mut single_client = connect(targets.single.clone()).await;
        let started = now_nanos();
        let mut fleet = SimulatedFleet::new(started);
        let mut interval = tokio::time::interval(Duration::from_millis(TICK_MILLIS));
        let ticks = PLAY.as_millis() as u64 / TICK_MILLIS;
        for tick in 0..ticks {
            interval.tick().await;
            let request = fleet.tick(now_nanos());
            if tick == 5 {
                let body = deletion_held_by_finalizer(now_nanos());
                for webhook in &targets.audit {
                    post_audit(webhook, &body);
                }
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

/// The name the gateways are found by in the tests with a changing membership.
const GATEWAYS_NAME: &str = "gateways.opscope.test";

/// Three gateways, three agents routing to them, and the single process.
struct Tier {
    gateways: Vec<Process>,
    agents: Vec<Process>,
    single: Process,
    membership: Membership,
    /// The hosts file agents and gateways resolve the gateways' name with.
    hosts: Option<PathBuf>,
    /// The gateways' journals, one directory each, and the hosts file, when used.
    files: Option<tempfile::TempDir>,
}

impl Tier {
    /// Gateways listed in the agents' config, with journals or without.
    fn start(journaled: bool) -> Self {
        let (hosts, port) = gateway_hosts(3);
        let gateways: Vec<Process> = hosts.iter().map(|host| Process::at(host, port)).collect();
        let membership = Membership::Static(gateways.iter().map(Process::address).collect());
        let files = journaled.then(|| tempfile::tempdir().expect("journal directory"));
        Self::start_with(gateways, membership, None, files, &[0, 1, 2])
    }

    /// Gateways on loopback addresses of their own found by name through a hosts
    /// file the test rewrites, with journals and hand-over, the name giving
    /// `members` at first; `None` where the test cannot give processes a hosts file
    /// of their own (not root).
    fn start_named(members: &[usize]) -> Option<Self> {
        let files = tempfile::tempdir().expect("a directory for journals and hosts");
        let hosts = files.path().join("hosts");
        fs::write(&hosts, "127.0.0.1 localhost\n").expect("write the hosts file");
        if !Opscope::can_use_own_hosts(&hosts) {
            eprintln!("skipped: unshare --mount cannot bind-mount a hosts file here (run as root)");
            return None;
        }
        let (addresses, port) = gateway_hosts(3);
        let gateways: Vec<Process> = (addresses.iter())
            .map(|host| Process::at(host, port))
            .collect();
        let membership = Membership::Dns {
            hostname: GATEWAYS_NAME.into(),
            port,
        };
        let tier = Self::start_with(gateways, membership, Some(hosts), Some(files), members);
        Some(tier)
    }

    fn start_with(
        gateways: Vec<Process>,
        membership: Membership,
        hosts: Option<PathBuf>,
        files: Option<tempfile::TempDir>,
        members: &[usize],
    ) -> Self {
        let mut tier = Self {
            gateways,
            agents: (0..3).map(|_| Process::new()).collect(),
            single: Process::new(),
            membership,
            hosts,
            files,
        };
        tier.write_hosts(members);
        for index in 0..tier.gateways.len() {
            tier.start_gateway(index);
        }
        for agent in &mut tier.agents {
            let config = agent_config(agent, &tier.membership);
            agent.start(&config, tier.hosts.as_deref());
        }
        let config = single_process_config(&tier.single);
        tier.single.start(&config, None);
        tier
    }

    /// Makes the gateways' name resolve to `members` (rewritten in place: the
    /// processes' bind mounts hold the file, not its name).
    fn write_hosts(&self, members: &[usize]) {
        let Some(hosts) = &self.hosts else {
            return;
        };
        let mut text = String::from("127.0.0.1 localhost\n");
        for &member in members {
            text.push_str(&format!("{} {GATEWAYS_NAME}\n", self.gateways[member].host));
        }
        fs::write(hosts, text).expect("rewrite the hosts file");
    }

    /// Gateway `index`'s config, its journal in a directory of its own.
    fn config_of_gateway(&self, index: usize) -> String {
        let journal = self
            .files
            .as_ref()
            .map(|root| root.path().join(format!("gateway-{index}")));
        gateway_config(&self.gateways[index], &self.membership, journal.as_deref())
    }

    fn start_gateway(&mut self, index: usize) {
        let config = self.config_of_gateway(index);
        let hosts = self.hosts.clone();
        self.gateways[index].start(&config, hosts.as_deref());
    }

    /// The fleet's targets, the audit batch posted to gateway `audit_to`.
    fn targets(&self, audit_to: usize) -> Targets {
        Targets {
            agents: self.agents.iter().map(Process::address).collect(),
            single: self.single.address(),
            audit: vec![self.single.webhook(), self.gateways[audit_to].webhook()],
        }
    }

    /// The gateway of `members` that owns `kind namespace/name`, by the agents' ring.
    fn owner_of(&self, members: &[usize], kind: &str, namespace: &str, name: &str) -> usize {
        let attributes = [
            ("k8s.object.kind", kind),
            ("k8s.object.namespace", namespace),
            ("k8s.object.name", name),
        ]
        .map(|(key, value)| KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.into())),
            }),
            ..Default::default()
        });
        let addresses: Vec<String> = members
            .iter()
            .map(|&member| self.gateways[member].address())
            .collect();
        let ring = Ring::new(&addresses);
        let owner = ring
            .owner_endpoint(record_key(&attributes, None))
            .expect("a ring of gateways");
        self.gateways
            .iter()
            .position(|gateway| gateway.address() == owner)
            .expect("the owner is a gateway")
    }

    /// A fourth gateway, at the next loopback address, found by the same name.
    fn add_gateway(&mut self) -> usize {
        let Membership::Dns { port, .. } = self.membership else {
            panic!("gateways are added to a name");
        };
        let index = self.gateways.len();
        // The next address of the tier's block.
        let (block, _) = (self.gateways[0].host.rsplit_once('.')).expect("an IPv4 address");
        let host = format!("{block}.{}", 11 + index);
        self.gateways.push(Process::at(&host, port));
        self.start_gateway(index);
        index
    }

    /// `kill -9` of gateway `index`.
    fn kill(&mut self, index: usize) {
        if let Some(mut opscope) = self.gateways[index].opscope.take() {
            opscope.kill();
        }
    }

    /// Samples the agents' resident memory while the fleet plays.
    fn sample_agents(&self) -> Vec<RssSampler> {
        self.agents
            .iter()
            .filter_map(|agent| agent.opscope.as_ref())
            .map(|opscope| RssSampler::start(opscope.pid()))
            .collect()
    }

    /// No gateway resolved a signal that one process kept firing: an object that
    /// moves is let go without a word, its new owner carries its signals on.
    fn assert_no_spurious_resolve(&self) {
        let resolved = |spans: Vec<Span>| -> BTreeSet<String> {
            spans
                .iter()
                .filter(|span| {
                    text(&span.attributes, "opscope.signal.state").as_deref() == Some("resolved")
                })
                .filter_map(|span| text(&span.attributes, "opscope.signal.id"))
                .collect()
        };
        let reference = resolved(signal_spans(&self.single.signals));
        for (index, gateway) in self.gateways.iter().enumerate() {
            let spurious: Vec<String> = resolved(signal_spans(&gateway.signals))
                .difference(&reference)
                .cloned()
                .collect();
            assert!(spurious.is_empty(), "gateway {index} resolved {spurious:?}");
        }
    }

    /// `kill -9` of gateway `index`, and the same gateway started again `down` later.
    /// Started up to three times: while it was down, an outgoing connection may have
    /// taken its port for a moment (its address is the tier's own).
    fn kill_and_restart(&mut self, index: usize, down: Duration) {
        if let Some(mut opscope) = self.gateways[index].opscope.take() {
            opscope.kill();
        }
        thread::sleep(down);
        let config = self.config_of_gateway(index);
        let hosts = self.hosts.clone();
        for attempt in 1..=3 {
            match self.gateways[index].try_start(&config, hosts.as_deref()) {
                Ok(()) => return,
                Err(why) if attempt < 3 => {
                    eprintln!("gateway {index} did not start again, attempt {attempt}: {why}");
                    thread::sleep(Duration::from_millis(200));
                }
                Err(why) => panic!("gateway {index} did not start again: {why}"),
            }
        }
    }

    /// The objects gateway `index`'s correlator tracks; 0 for a gateway not running.
    fn tracked(&self, index: usize) -> f64 {
        let gateway = &self.gateways[index];
        gateway.opscope.as_ref().map_or(0.0, |opscope| {
            let metrics = opscope.ports().metrics_addr();
            opscope.metric_value(&metrics, "opscope_correlator_tracked_objects", &[])
        })
    }

    fn tracked_by_all(&self) -> f64 {
        (0..self.gateways.len())
            .map(|index| self.tracked(index))
            .sum()
    }

    /// SIGTERM of gateway `index` and the same gateway started again, as a rolling
    /// restart does.
    fn stop_and_start(&mut self, index: usize) {
        if let Some(mut opscope) = self.gateways[index].opscope.take() {
            opscope.stop_within(SIGNALS_TIMEOUT);
        }
        let config = self.config_of_gateway(index);
        let hosts = self.hosts.clone();
        self.gateways[index].start(&config, hosts.as_deref());
    }

    /// Sends `requests` to agent `index`, in order.
    fn send_to_agent(&self, index: usize, requests: Vec<ExportTraceServiceRequest>) {
        let url = format!("http://{}", self.agents[index].address());
        export_in_order(url, requests, "the agent");
    }

    fn tier_firing(&self) -> BTreeSet<SignalKey> {
        self.gateways
            .iter()
            .flat_map(|gateway| firing(&signal_spans(&gateway.signals)))
            .collect()
    }

    /// Waits until both the tier and the single process fired every expected signal
    /// and asserts that they fired the same set.
    fn assert_same_signals(&self) {
        let settled = wait_until(SIGNALS_TIMEOUT, || {
            has_all(&firing(&signal_spans(&self.single.signals))) && has_all(&self.tier_firing())
        });
        let reference = firing(&signal_spans(&self.single.signals));
        assert!(
            settled,
            "not every signal fired in time:\nsingle process: {reference:#?}\ntier: {:#?}",
            self.tier_firing()
        );
        assert_eq!(
            self.tier_firing(),
            reference,
            "the tier fires what one process fires"
        );
    }

    /// Each signal from one gateway only (its object's owner), and `firing` at most
    /// `extra` more times than the single process sent it.
    fn assert_each_signal_from_one_gateway(&self, extra: usize) {
        let mut fired_by: BTreeMap<String, usize> = BTreeMap::new();
        let mut firings: BTreeMap<String, usize> = BTreeMap::new();
        let members: Vec<usize> = (0..self.gateways.len()).collect();
        for (index, gateway) in self.gateways.iter().enumerate() {
            for span in signal_spans(&gateway.signals) {
                let id = text(&span.attributes, "opscope.signal.id").unwrap_or_default();
                let owner = *fired_by.entry(id.clone()).or_insert(index);
                assert_eq!(owner, index, "signal {id} came from two gateways");
                let get = |key| text(&span.attributes, key).unwrap_or_default();
                let object = [
                    get("k8s.object.kind"),
                    get("k8s.object.namespace"),
                    get("k8s.object.name"),
                ];
                assert_eq!(
                    self.owner_of(&members, &object[0], &object[1], &object[2]),
                    index,
                    "signal {id} came from the gateway that owns its object"
                );
                if text(&span.attributes, "opscope.signal.state").as_deref() == Some("firing") {
                    *firings.entry(id).or_default() += 1;
                }
            }
        }
        for span in signal_spans(&self.single.signals) {
            if text(&span.attributes, "opscope.signal.state").as_deref() == Some("firing") {
                let id = text(&span.attributes, "opscope.signal.id").unwrap_or_default();
                if let Some(count) = firings.get_mut(&id) {
                    *count = count.saturating_sub(1);
                }
            }
        }
        for (id, more) in firings {
            assert!(
                more <= extra,
                "signal {id}: {more} more firing than one process sent"
            );
        }
    }
}

#[test]
fn three_agents_and_three_gateways_fire_what_one_process_fires_each_signal_once() {
    let tier = Tier::start(false);
    play(&tier.targets((now_nanos() % 3) as usize));
    tier.assert_same_signals();
    tier.assert_each_signal_from_one_gateway(0);
}

/// The gateway that owns the object whose only evidence is an audit event is killed
/// after the event and before its finalizer leak is due, and started again: its
/// journal gives it the deletion back, and the leak fires on time. Its other
/// signals fire again once, as the journal is taken again.
#[test]
fn a_gateway_killed_and_started_again_loses_no_signal() {
    let mut tier = Tier::start(true);
    let victim = tier.owner_of(&[0, 1, 2], "RayJob", "ml", "eval");
    // Not the victim: the audit event must travel to its owner first.
    let targets = tier.targets((victim + 1) % 3);
    let playing = thread::spawn(move || play(&targets));
    // The audit batch is posted one second in; the leak is due ten seconds later.
    thread::sleep(Duration::from_secs(4));
    tier.kill_and_restart(victim, Duration::from_secs(1));
    playing.join().expect("the fleet plays");
    tier.assert_same_signals();
    tier.assert_each_signal_from_one_gateway(1);
}

/// The gateways found by name (a hosts file of the test's, which every agent and
/// gateway resolves through the system resolver), the membership changing during the
/// run: the owner of the object whose only evidence is an audit event is taken out
/// of the name and then killed, and a fourth gateway is added. The removed gateway
/// hands its objects over before it goes, so that object's finalizer leak still
/// fires; objects that move are let go without resolving their signals.
#[test]
fn gateways_removed_and_added_hand_their_objects_over() {
    let Some(mut tier) = Tier::start_named(&[0, 1, 2]) else {
        return;
    };
    let removed = tier.owner_of(&[0, 1, 2], "RayJob", "ml", "eval");
    let targets = tier.targets((removed + 1) % 3);
    let samplers = tier.sample_agents();
    let playing = thread::spawn(move || play(&targets));
    // The audit batch is posted one second in; the leak is due ten seconds later.
    thread::sleep(Duration::from_secs(4));
    let mut members: Vec<usize> = (0..3).filter(|&gateway| gateway != removed).collect();
    tier.write_hosts(&members);
    // Every process resolves the name again within a second; the removed gateway
    // then lets go of its objects and hands them over.
    thread::sleep(Duration::from_secs(3));
    tier.kill(removed);
    members.push(tier.add_gateway());
    tier.write_hosts(&members);
    playing.join().expect("the fleet plays");
    tier.assert_same_signals();
    tier.assert_no_spurious_resolve();
    for (agent, sampler) in samplers.iter().enumerate() {
        assert!(
            sampler.peak() < 256 << 20,
            "agent {agent} peaked at {} MiB",
            sampler.peak() >> 20
        );
    }
}

/// A gateway restarted the documented way (out of the name, SIGTERM, started again,
/// back in the name) hands its objects over and takes them back: each record is
/// counted once whatever path it took, so objects reconciled under the loop
/// threshold fire nothing. The gateway that held them meanwhile does not journal
/// what it was handed, so it has no copies to hand back.
#[test]
fn a_rolling_restart_of_a_gateway_raises_no_false_loop() {
    let Some(mut tier) = Tier::start_named(&[0, 1, 2]) else {
        return;
    };
    let now = now_nanos();
    // 20 reconciles of each object over 50 s: 24 a minute, under the 30 that fire.
    let requests: Vec<ExportTraceServiceRequest> = (0..40)
        .map(|i| reconciles_apart(&format!("object-{i}"), 20, now, 5 * SECOND / 2, false))
        .collect();
    tier.send_to_agent(0, requests);
    assert!(wait_until(SIGNALS_TIMEOUT, || tier.tracked_by_all() == 40.0));
    let restarted = tier.owner_of(&[0, 1, 2], "RayJob", "ml", "object-0");
    let others: Vec<usize> = (0..3).filter(|&index| index != restarted).collect();
    tier.write_hosts(&others);
    assert!(
        wait_until(SIGNALS_TIMEOUT, || tier.tracked(restarted) == 0.0
            && tier.tracked_by_all() == 40.0),
        "gateway {restarted} handed its objects over"
    );
    tier.stop_and_start(restarted);
    tier.write_hosts(&[0, 1, 2]);
    assert!(
        wait_until(SIGNALS_TIMEOUT, || {
            tier.tracked(restarted) > 0.0 && tier.tracked_by_all() == 40.0
        }),
        "gateway {restarted} owns its objects again, each held once: {} of 40 there",
        tier.tracked(restarted)
    );
    let loops = || -> BTreeSet<String> {
        (tier.gateways.iter())
            .flat_map(|gateway| looping(&gateway.signals))
            .collect()
    };
    assert!(
        !wait_until(Duration::from_secs(5), || !loops().is_empty()),
        "false loops after a rolling restart: {:?}",
        loops()
    );
}

/// The states a gateway's `reconcile_loop` signal of `object` went through.
fn loop_states(sink: &OtlpSink, object: &str) -> Vec<String> {
    (signal_spans(sink).iter())
        .filter(|span| span.name == "opscope.signal reconcile_loop")
        .filter(|span| text(&span.attributes, "k8s.object.name").as_deref() == Some(object))
        .filter_map(|span| text(&span.attributes, "opscope.signal.state"))
        .collect()
}

/// A gateway joins and takes objects whose loops fire at their old owner: the old
/// owner withdraws those signals (`handed_over`: it sends them no more and its
/// series ends, without a `resolved`), and the new owner carries them on.
#[test]
fn signals_of_objects_that_move_are_withdrawn_by_their_old_owner() {
    let Some(tier) = Tier::start_named(&[0, 1]) else {
        return;
    };
    let names: Vec<String> = (0..10).map(|i| format!("loop-{i}")).collect();
    let moving: Vec<(usize, &str)> = (names.iter())
        .filter(|name| tier.owner_of(&[0, 1, 2], "RayJob", "ml", name) == 2)
        .map(|name| (tier.owner_of(&[0, 1], "RayJob", "ml", name), name.as_str()))
        .collect();
    assert!(
        !moving.is_empty(),
        "some of the objects move to the new gateway"
    );
    let now = now_nanos();
    tier.send_to_agent(
        0,
        (names.iter())
            .map(|name| reconciles(name, 40, now, false))
            .collect(),
    );
    assert!(wait_until(SIGNALS_TIMEOUT, || {
        let firing: BTreeSet<String> = (tier.gateways.iter())
            .flat_map(|gateway| looping(&gateway.signals))
            .collect();
        names.iter().all(|name| firing.contains(name))
    }));
    tier.write_hosts(&[0, 1, 2]);
    for (old_owner, name) in moving {
        let withdrawn = wait_until(SIGNALS_TIMEOUT, || {
            loop_states(&tier.gateways[old_owner].signals, name).last()
                == Some(&"handed_over".to_string())
                && looping(&tier.gateways[2].signals).contains(name)
        });
        assert!(
            withdrawn,
            "{name}: at its old owner {:?}, at the new one {:?} (which tracks {} objects)\n{}",
            loop_states(&tier.gateways[old_owner].signals, name),
            loop_states(&tier.gateways[2].signals, name),
            tier.tracked(2),
            tier.gateways[2]
                .opscope
                .as_ref()
                .map(Opscope::logs)
                .unwrap_or_default()
        );
    }
}
