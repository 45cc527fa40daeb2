//! The opscope processes of a run, as a cluster deploys them: one all-in-one agent
//! (single node), or the default multi-node shape, an agent per node routing by object
//! to a tier of gateways that correlate and take the audit webhook. Operator pods are
//! spread over the nodes by replica, so the two replicas of one operator report to two
//! agents and only a gateway sees them both.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use opscope_testkit::backend::{TempDir, free_port, temp_dir};
use opscope_testkit::pod_cgroup::CgroupLayout;
use serde_json::{Value, json};

use crate::common::{Opscope, Ports, http_get, own_loopback_block};
use crate::rig::Backends;

/// Nodes (agents) and gateways of the multi-node run.
const NODES: usize = 2;
const GATEWAYS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One agent that also correlates, receives the audit webhook and fans out to the
    /// backends.
    AllInOne,
    /// Agents that tag and route; gateways that correlate.
    GatewayTier,
}

impl Topology {
    pub fn name(self) -> &'static str {
        match self {
            Self::AllInOne => "all-in-one agent",
            Self::GatewayTier => "gateway tier",
        }
    }
}

/// One node's agent: where its pods' logs are and where they send OTLP.
pub struct Node {
    opscope: Opscope,
    ports: Ports,
    log_root: TempDir,
    /// Its checkpoints and the targets file it follows.
    state: TempDir,
    targets: Mutex<Vec<Value>>,
}

impl Node {
    pub fn log_root(&self) -> &Path {
        self.log_root.path()
    }

    pub fn otlp_grpc(&self) -> String {
        self.ports.grpc_url()
    }

    fn targets_file(&self) -> PathBuf {
        self.state.path().join("targets.yaml")
    }

    /// Adds a scrape target with the resource attributes of its series.
    pub fn scrape(&self, address: &str, labels: Value) {
        let mut targets = self
            .targets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        targets.push(json!({ "targets": [address], "labels": labels }));
        let text = serde_json::to_string(&*targets).expect("targets as JSON");
        let partial = self.targets_file().with_extension("partial");
        fs::write(&partial, text).expect("write the targets");
        fs::rename(&partial, self.targets_file()).expect("replace the targets");
    }
}

/// The `ebpf` receiver of every node's agent, where the kernel probe can run: the
/// API server it watches, and the cgroups its pods are put in.
#[derive(Clone)]
pub struct KernelProbe {
    pub apiserver: String,
    pub layout: CgroupLayout,
}

/// The running opscope processes.
pub struct Deployment {
    pub topology: Topology,
    pub nodes: Vec<Node>,
    /// The gateways: empty for the all-in-one agent.
    gateways: Vec<(Opscope, Ports)>,
    /// Where the API server's audit webhook posts.
    pub audit: String,
    pub kernel_probe: Option<KernelProbe>,
}

impl Deployment {
    /// Starts the processes of `topology`, sending to `backends` as the deploy
    /// configs do (traces from the agents, signals from the correlators); the
    /// all-in-one agent serves its Prometheus endpoint at `prometheus` (an address
    /// Prometheus was told before either started), the gateways push their series by
    /// remote write. Every other listener takes a free port.
    pub fn start(
        topology: Topology,
        finalizer_max_age: &str,
        backends: Option<&Backends>,
        prometheus: &str,
        kernel_probe: Option<KernelProbe>,
    ) -> Self {
        let keep = std::env::var("OPSCOPE_E2E_KEEP").is_ok_and(|keep| keep == "1");
        // A storm held 20 s instead of 2 minutes, so that the scenario is short.
        let correlator = format!(
            "{{ finalizer_leak: {{ max_age: {finalizer_max_age} }}, api_request_storm: {{ duration: 20s, rate_window: 6s }} }}"
        );
        let mut gateways = Vec::new();
        let mut routing = String::new();
        if topology == Topology::GatewayTier {
            // Every agent's and gateway's ring names the gateways before any starts:
            // they listen on addresses of the run's own.
            let (block, port) = (own_loopback_block(), free_port());
            let addresses: Vec<String> = (0..GATEWAYS)
                .map(|index| format!("{block}.{}:{port}", 11 + index))
                .collect();
            let hostnames: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
            routing = format!(
                "  loadbalancing:\n    protocol: {{ otlp: {{ tls: {{ insecure: true }}, timeout: 5s }} }}\n    resolver: {{ static: {{ hostnames: [{}] }} }}\n",
                hostnames.join(", ")
            );
            for address in &addresses {
                let config = gateway_config(address, &correlator, &routing, backends);
                let gateway = Opscope::start(&config);
                let ports = gateway.ports();
                gateways.push((gateway, ports));
            }
        }
        let node_count = match topology {
            Topology::AllInOne => 1,
            Topology::GatewayTier => NODES,
        };
        let nodes: Vec<Node> = (0..node_count)
            .map(|_| {
                let mut log_root = temp_dir("e2e-pods");
                if keep {
                    log_root.disable_cleanup(true);
                    eprintln!(
                        "e2e: the pods' logs are kept in {}",
                        log_root.path().display()
                    );
                }
                let state = temp_dir("e2e-opscope-state");
                fs::write(state.path().join("targets.yaml"), "[]\n").expect("the targets file");
                let places = Places {
                    log_root: log_root.path(),
                    state: state.path(),
                    kernel_probe: kernel_probe.as_ref(),
                };
                let config = match topology {
                    Topology::AllInOne => {
                        all_in_one_config(&places, backends, &correlator, prometheus)
                    }
                    Topology::GatewayTier => {
                        node_agent_config(&places, &routing, &correlator, backends)
                    }
                };
                let opscope = Opscope::start(&config);
                Node {
                    ports: opscope.ports(),
                    opscope,
                    log_root,
                    state,
                    targets: Mutex::new(Vec::new()),
                }
            })
            .collect();
        // The webhook: the all-in-one agent's, or the first gateway's, as the Service
        // in front of them would give it to one; it routes each event to its object's
        // owner.
        let audit = match gateways.first() {
            Some((gateway, _)) => gateway.address("receivers.k8s_audit"),
            None => nodes[0].opscope.address("receivers.k8s_audit"),
        };
        Self {
            topology,
            nodes,
            gateways,
            audit,
            kernel_probe,
        }
    }

    /// The node a pod of `replica` runs on.
    pub fn node(&self, replica: usize) -> &Node {
        &self.nodes[replica % self.nodes.len()]
    }

    /// The processes whose correlator speaks: the gateways', and the agents' own
    /// (of their pods, from the kernel probe) when they have the probe or are alone.
    fn correlators(&self) -> Vec<&Opscope> {
        let agents = self.gateways.is_empty() || self.kernel_probe.is_some();
        let agents = self
            .nodes
            .iter()
            .filter(|_| agents)
            .map(|node| &node.opscope);
        agents
            .chain(self.gateways.iter().map(|(opscope, _)| opscope))
            .collect()
    }

    fn processes(&self) -> impl Iterator<Item = (&Opscope, &Ports)> {
        self.nodes
            .iter()
            .map(|node| (&node.opscope, &node.ports))
            .chain(
                self.gateways
                    .iter()
                    .map(|(opscope, ports)| (opscope, ports)),
            )
    }

    /// Every signal change the correlators printed (their debug exporters' JSON lines).
    pub fn signals(&self) -> Vec<Value> {
        self.correlators()
            .into_iter()
            .flat_map(|opscope| {
                let stdout = fs::read_to_string(opscope.stdout_path()).unwrap_or_default();
                stdout
                    .lines()
                    .filter(|line| line.starts_with('{'))
                    .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                    .filter(|value| value.get("signal").is_some())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Whether every process answers `/healthz` with 200.
    pub fn healthy(&self) -> bool {
        self.processes().all(|(_, ports)| {
            http_get(&ports.health_addr(), "/healthz").is_ok_and(|a| a.status == 200)
        })
    }

    /// The sum over the processes of their own series `family`.
    pub fn metric(&self, family: &str) -> f64 {
        self.processes()
            .map(|(opscope, ports)| opscope.metric_value(&ports.metrics_addr(), family, &[]))
            .sum()
    }

    /// The largest resident size of a process.
    pub fn largest_resident(&self) -> u64 {
        self.processes()
            .map(|(opscope, _)| crate::common::resident_bytes(opscope.pid()))
            .max()
            .unwrap_or(0)
    }
}

/// Where an agent reads pod logs and keeps its state, and its kernel probe.
struct Places<'a> {
    log_root: &'a Path,
    state: &'a Path,
    kernel_probe: Option<&'a KernelProbe>,
}

/// The receivers every node's agent has: its operators' OTLP and their pod logs; and
/// the kernel probe where it can run, reporting the pods of `*-kernel` namespaces
/// (whose logs are not tailed and whose operators send nothing).
fn node_receivers(places: &Places<'_>) -> String {
    let ebpf = places.kernel_probe.map_or(String::new(), |probe| {
        format!(
            "  ebpf:\n    api_servers: [\"{apiserver}\"]\n    namespaces: [\"*-kernel\"]\n    interval: 2s\n    cgroup_root: {root}\n    pod_logs: {log_root}\n",
            apiserver = probe.apiserver,
            root = probe.layout.cgroup_root.display(),
            log_root = places.log_root.display(),
        )
    });
    format!(
        r#"  otlp:
    protocols:
      grpc: {{ endpoint: 127.0.0.1:0 }}
  filelog:
    include: ["{log_root}/*/*/*.log"]
    namespaces: ["*-system"]
    start_at: beginning
    storage: {state}/filelog
    poll_interval: 200ms
{ebpf}"#,
        log_root = places.log_root.display(),
        state = places.state.display(),
    )
}

/// The health check and self-telemetry every process has, on free ports.
const SERVICE_END: &str = "extensions:\n  health_check: { endpoint: 127.0.0.1:0 }\n";
const TELEMETRY: &str =
    "  extensions: [health_check]\n  telemetry:\n    metrics: { address: 127.0.0.1:0 }\n";

/// The single-node agent: receives everything, correlates, and fans out to the
/// backends (when they are built); its Prometheus endpoint at `prometheus`.
fn all_in_one_config(
    places: &Places<'_>,
    backends: Option<&Backends>,
    correlator: &str,
    prometheus: &str,
) -> String {
    let (exporters, traces_to, signals_to) = match backends {
        Some(backends) => (
            format!(
                "{}{}",
                jaeger_exporter(backends),
                alertmanager_exporter(backends)
            ),
            ", otlp/jaeger",
            ", otlp/jaeger, alertmanager",
        ),
        None => (String::new(), "", ""),
    };
    format!(
        r#"receivers:
{receivers}  k8s_audit:
    endpoint: 127.0.0.1:0
  prometheus_scrape:
    targets_file: {state}/targets.yaml
    interval: 5s
processors:
  operator_tagger: {{}}
  correlator: {correlator}
  batch: {{ timeout: 200ms }}
exporters:
  debug: {{ verbosity: detailed }}
  prometheus: {{ endpoint: {prometheus} }}
{exporters}connectors:
  operator_metrics: {{}}
{end}service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger, correlator, batch], exporters: [operator_metrics{traces_to}] }}
    logs: {{ receivers: [otlp, filelog, k8s_audit], processors: [operator_tagger, correlator, batch], exporters: [operator_metrics] }}
    metrics: {{ receivers: [prometheus_scrape, operator_metrics{ebpf}], processors: [operator_tagger, correlator, batch], exporters: [prometheus] }}
    signals: {{ exporters: [debug, prometheus{signals_to}] }}
{telemetry}"#,
        ebpf = if places.kernel_probe.is_some() {
            ", ebpf"
        } else {
            ""
        },
        receivers = node_receivers(places),
        state = places.state.display(),
        end = SERVICE_END,
        telemetry = TELEMETRY,
    )
}

/// A node's agent in the multi-node shape: tags its pods' telemetry and routes each
/// record to the gateway owning its object.
fn node_agent_config(
    places: &Places<'_>,
    routing: &str,
    correlator: &str,
    backends: Option<&Backends>,
) -> String {
    let (jaeger, traces_to) = match backends {
        Some(backends) => (jaeger_exporter(backends), ", otlp/jaeger"),
        None => (String::new(), ""),
    };
    // As overlays/ebpf deploys it: the agent correlates its own pods' kernel counts.
    let (kernel_processors, kernel_exporters, kernel_pipelines) = match places.kernel_probe {
        Some(_) => (
            format!("  correlator: {correlator}\n"),
            "  debug: { verbosity: detailed }\n",
            "    metrics: { receivers: [ebpf], processors: [operator_tagger, correlator] }\n    signals: { exporters: [debug] }\n",
        ),
        None => (String::new(), "", ""),
    };
    format!(
        r#"receivers:
{receivers}processors:
  operator_tagger: {{}}
  batch: {{ timeout: 200ms }}
{kernel_processors}exporters:
{kernel_exporters}{routing}{jaeger}{end}service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger, batch], exporters: [loadbalancing{traces_to}] }}
    logs: {{ receivers: [otlp, filelog], processors: [operator_tagger, batch], exporters: [loadbalancing] }}
{kernel_pipelines}{telemetry}"#,
        receivers = node_receivers(places),
        end = SERVICE_END,
        telemetry = TELEMETRY,
    )
}

/// A gateway, its OTLP/gRPC receiver at `address`: correlates what the agents route to
/// it; the audit events it takes go on to their object's owner by the same ring.
fn gateway_config(
    address: &str,
    correlator: &str,
    routing: &str,
    backends: Option<&Backends>,
) -> String {
    let (exporters, signals_to) = match backends {
        Some(backends) => (
            format!(
                "{}{}  prometheusremotewrite: {{ endpoint: {} }}\n",
                jaeger_exporter(backends),
                alertmanager_exporter(backends),
                backends.prometheus.remote_write_url()
            ),
            ", otlp/jaeger, alertmanager, prometheusremotewrite",
        ),
        None => (String::new(), ""),
    };
    format!(
        r#"receivers:
  otlp: {{ protocols: {{ grpc: {{ endpoint: "{address}" }} }} }}
  k8s_audit: {{ endpoint: 127.0.0.1:0 }}
processors:
  operator_tagger: {{}}
  correlator: {correlator}
  batch: {{ timeout: 200ms }}
exporters:
  debug: {{ verbosity: detailed }}
{routing}{exporters}{end}service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [correlator] }}
    logs: {{ receivers: [otlp], processors: [correlator] }}
    logs/audit: {{ receivers: [k8s_audit], processors: [operator_tagger, batch], exporters: [loadbalancing] }}
    signals: {{ exporters: [debug{signals_to}] }}
{telemetry}"#,
        end = SERVICE_END,
        telemetry = TELEMETRY,
    )
}

fn jaeger_exporter(backends: &Backends) -> String {
    format!(
        "  otlp/jaeger: {{ endpoint: {}, tls: {{ insecure: true }} }}\n",
        backends.jaeger.otlp_grpc_endpoint()
    )
}

fn alertmanager_exporter(backends: &Backends) -> String {
    format!(
        "  alertmanager: {{ endpoint: {}, resend_interval: 5s }}\n",
        backends.alertmanager.url()
    )
}
