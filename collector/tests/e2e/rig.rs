//! The rig the scenarios of a run share: opscope as a cluster deploys it (one agent,
//! or agents and gateways: `topology.rs`), a real control plane whose audit webhook
//! posts to it, the Widget CRD, and the operators started as pods of its nodes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use opscope_testkit::alertmanager::{Alertmanager, alertmanager_built_or_skip};
use opscope_testkit::backend::{HeldPort, TempDir, free_port, temp_dir};
use opscope_testkit::control_plane::{ApiClient, ControlPlane};
use opscope_testkit::jaeger::{Jaeger, jaeger_or_skip};
use opscope_testkit::operator_pod::{OperatorPod, PodIdentity};
use opscope_testkit::pod_cgroup::{
    CgroupLayout, PodCgroup, container_id_of, kernel_probe_unavailable,
};
use opscope_testkit::prometheus::{PrometheusServer, prometheus3_or_skip};
use serde_json::{Value, json};

use crate::common::own_loopback_block;
use crate::topology::{Deployment, KernelProbe, Topology};

/// The Widget CRD (e2e/crds/widgets.json): status subresource, a status schema
/// whose `phase` takes only the values a healthy operator writes.
pub const WIDGET_CRD: &str = include_str!("../../../e2e/crds/widgets.json");

/// Where the operators and servers were built.
#[derive(Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub apiserver: PathBuf,
    pub go_operator: PathBuf,
    pub rust_operator: Option<PathBuf>,
}

/// A process of an operator: which binary, in which mode, as which pod.
pub struct OperatorSpec<'a> {
    /// The namespace the operator runs in (`<scenario>-system`); its Widgets are in
    /// the scenario's own namespace.
    pub scenario: &'a str,
    pub args: &'a [&'a str],
    pub replica: usize,
    pub sources: Sources,
    /// The kube-rs operator instead of the controller-runtime one.
    pub kube_rs: bool,
    /// Another address for the API server (a fault proxy in front of it).
    pub server: Option<String>,
}

/// The stores and alerting opscope fans out to, as a platform team runs them: Jaeger
/// (traces and signal spans), Prometheus 3 (scraping opscope's signal series) and
/// Alertmanager 0.35.
pub struct Backends {
    pub jaeger: Jaeger,
    pub prometheus: PrometheusServer,
    pub alertmanager: Alertmanager,
}

impl Backends {
    /// The three, when they are built (else `None`, with the reason printed; required
    /// under `OPSCOPE_REQUIRE_BACKENDS=1`); Prometheus scrapes `scrape_target`.
    async fn start(scrape_target: &str) -> Option<Self> {
        let jaeger = jaeger_or_skip()?;
        let prometheus = prometheus3_or_skip()?;
        let alertmanager = alertmanager_built_or_skip()?;
        Some(Self {
            jaeger: Jaeger::start(&jaeger).await,
            prometheus: PrometheusServer::start(&prometheus, scrape_target).await,
            alertmanager: Alertmanager::start(&alertmanager).await,
        })
    }
}

/// Which of its telemetry reaches opscope.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sources {
    /// Traces, pod logs and audit events, as in a cluster with all three.
    All,
    /// Traces only, as on a managed cluster (no audit webhook) whose agent does not
    /// tail this operator's namespace: its pod runs outside the `*-system` namespaces
    /// the agent tails, and it authenticates as a user that is no service account,
    /// whose events the `k8s_audit` receiver does not keep.
    TracesOnly,
    /// Nothing but what the kernel probe sees of its pod: no traces, no metrics
    /// endpoint scraped, logs not tailed, no audit events kept (a `<scenario>-kernel`
    /// pod, the unaudited user), on a managed cluster.
    KernelOnly,
}

/// The user of the operators whose audit events opscope drops.
const UNAUDITED_USER: &str = "e2e-unaudited-operator";

pub struct Rig {
    pub binaries: Binaries,
    pub control_plane: ControlPlane,
    pub admin: ApiClient,
    pub deployment: Deployment,
    pub backends: Option<Backends>,
    /// Scenarios' scratch files (kubeconfigs through a proxy, a webhook's CA).
    scratch: TempDir,
}

/// Where the next operator serves its metrics: opscope is told it as a scrape target
/// before the operator binds it, so each operator has an address of the run's own.
fn operator_metrics_address() -> String {
    static OPERATORS: AtomicU8 = AtomicU8::new(0);
    let index = OPERATORS.fetch_add(1, Ordering::Relaxed) % 100;
    format!("{}.{}:{}", own_loopback_block(), 100 + index, free_port())
}

/// The operator's service account: the audit events name it as the actor.
pub fn operator_user(scenario: &str) -> String {
    format!("system:serviceaccount:{scenario}-system:widget-operator")
}

impl Rig {
    /// Starts opscope as `topology` deploys it, then the control plane (its audit
    /// webhook needs opscope up), gives each scenario's operator a token, and applies
    /// the Widget CRD. The backends are the all-in-one agent's.
    pub async fn start(
        binaries: Binaries,
        scenarios: &[&str],
        finalizer_max_age: &str,
        topology: Topology,
    ) -> Self {
        // Prometheus scrapes the all-in-one agent, so each is told the other's address
        // before either starts: one of the run's own; the gateways push by remote write.
        let prometheus = format!("{}.1:{}", own_loopback_block(), free_port());
        let backends = Backends::start(&prometheus).await;
        // The API server's port is chosen first, and held: the kernel probe watches it.
        let apiserver_port = HeldPort::shareable();
        let kernel_probe = match kernel_probe_unavailable(cfg!(feature = "ebpf")) {
            None => CgroupLayout::available()
                .into_iter()
                .next()
                .map(|layout| KernelProbe {
                    apiserver: format!("127.0.0.1:{apiserver_port}"),
                    layout,
                }),
            Some(_) => None,
        };
        let deployment = Deployment::start(
            topology,
            finalizer_max_age,
            backends.as_ref(),
            &prometheus,
            kernel_probe,
        );
        // Each scenario may run a twin (`<scenario>-backoff`) as a second operator.
        let users: Vec<String> = scenarios
            .iter()
            .flat_map(|s| [operator_user(s), operator_user(&format!("{s}-backoff"))])
            .chain([UNAUDITED_USER.to_string()])
            .collect();
        let control_plane = ControlPlane::start(
            &binaries.etcd,
            &binaries.apiserver,
            apiserver_port,
            &deployment.audit,
            &users,
        )
        .await;
        let admin = control_plane.admin();
        let crd: Value = serde_json::from_str(WIDGET_CRD).expect("the Widget CRD is JSON");
        admin.apply_crd(&crd).await;
        Self {
            binaries,
            control_plane,
            admin,
            deployment,
            backends,
            scratch: temp_dir("e2e-scratch"),
        }
    }

    /// Starts an operator process as a pod of `<scenario>-system`, watching the
    /// scenario's namespace, with its metrics scraped by opscope.
    pub fn start_operator(&self, spec: &OperatorSpec<'_>) -> OperatorPod {
        let (operator_namespace, user) = match spec.sources {
            Sources::All => (
                format!("{}-system", spec.scenario),
                operator_user(spec.scenario),
            ),
            Sources::TracesOnly => (format!("{}-untailed", spec.scenario), UNAUDITED_USER.into()),
            Sources::KernelOnly => (format!("{}-kernel", spec.scenario), UNAUDITED_USER.into()),
        };
        let identity =
            PodIdentity::of_deployment(&operator_namespace, "widget-operator", spec.replica);
        let node = self.deployment.node(spec.replica);
        let mut kubeconfig = self.control_plane.kubeconfig(&user);
        if let Some(server) = &spec.server {
            kubeconfig = self.kubeconfig_through(&kubeconfig, server, spec);
        }
        let metrics = operator_metrics_address();
        let mut command = if spec.kube_rs {
            let binary = self
                .binaries
                .rust_operator
                .as_ref()
                .expect("the kube-rs operator is built");
            Command::new(binary)
        } else {
            let mut command = Command::new(&self.binaries.go_operator);
            command.arg(format!("--metrics-addr={metrics}"));
            command
        };
        command
            .arg(format!("--watch-namespace={}", spec.scenario))
            .arg(format!("--pod-namespace={operator_namespace}"))
            .arg(format!("--pod-name={}", identity.pod))
            .arg("--operator=widget-operator")
            .args(spec.args)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info");
        if spec.sources != Sources::KernelOnly {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", node.otlp_grpc());
        }
        let mut pod = OperatorPod::start(command, identity.clone(), node.log_root());
        if spec.sources == Sources::KernelOnly {
            let probe = self
                .deployment
                .kernel_probe
                .as_ref()
                .expect("a kernel-only operator where the probe runs");
            let cgroup = PodCgroup::create(
                &probe.layout,
                &format!("opscope-e2e-{}", std::process::id()),
                &identity.uid,
                &container_id_of(&identity.uid),
            )
            .expect("the pod's cgroup");
            pod.place_in(cgroup)
                .expect("the operator moved into its pod's cgroup");
            return pod;
        }
        if !spec.kube_rs {
            node.scrape(
                &metrics,
                json!({
                    "operator.name": "widget-operator",
                    "k8s.namespace.name": identity.namespace,
                    "k8s.pod.name": identity.pod,
                }),
            );
        }
        pod
    }

    /// Starts a process that is not an operator (a webhook server) as pod `identity`.
    pub fn start_process(&self, command: Command, identity: PodIdentity) -> OperatorPod {
        OperatorPod::start(command, identity, self.deployment.node(0).log_root())
    }

    /// A path for a scratch file of a scenario's, removed with the rig.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// A copy of `kubeconfig` whose server is `server` (same CA and token).
    fn kubeconfig_through(
        &self,
        kubeconfig: &Path,
        server: &str,
        spec: &OperatorSpec<'_>,
    ) -> PathBuf {
        let text = fs::read_to_string(kubeconfig).expect("the operator's kubeconfig");
        let text = text.replace(&self.control_plane.url(), server);
        let path = self.scratch(&format!("{}-{}.kubeconfig", spec.scenario, spec.replica));
        fs::write(&path, text).expect("the proxied kubeconfig");
        path
    }

    /// Every signal change opscope's correlators printed so far.
    pub fn signals(&self) -> Vec<Value> {
        self.deployment.signals()
    }

    /// The signal changes of objects in `namespace`.
    pub fn signals_in(&self, namespace: &str) -> Vec<Value> {
        self.signals()
            .into_iter()
            .filter(|signal| signal["object"]["namespace"] == namespace)
            .collect()
    }

    /// Waits up to `limit` for a signal change of `namespace` that `wanted` accepts.
    pub async fn wait_for_signal(
        &self,
        namespace: &str,
        limit: Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(signal) = self.signals_in(namespace).into_iter().find(|s| wanted(s)) {
                return Some(signal);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The API server's `apiserver_request_total` for Widgets' `status` subresource.
    pub async fn status_requests(&self) -> f64 {
        let metrics = self.admin.get_text("/metrics").await.unwrap_or_default();
        opscope_testkit::control_plane::sum_samples(
            &metrics,
            "apiserver_request_total",
            &[("resource", "widgets"), ("subresource", "status")],
        )
    }

    /// Creates the scenario's namespaces (its own and its operator's).
    pub async fn namespaces(&self, scenario: &str) {
        self.admin.create_namespace(scenario).await;
        self.admin
            .create_namespace(&format!("{scenario}-system"))
            .await;
    }

    /// Creates Widget `name` in `namespace` with `spec`.
    pub async fn create_widget(
        &self,
        namespace: &str,
        name: &str,
        spec: Value,
    ) -> Result<Value, String> {
        let widget = json!({
            "apiVersion": "e2e.opscope.dev/v1",
            "kind": "Widget",
            "metadata": { "name": name },
            "spec": spec,
        });
        self.admin
            .create(&widgets(namespace), &widget)
            .await
            .map_err(|error| format!("creating widget {namespace}/{name}: {error}"))
    }

    pub async fn widget(&self, namespace: &str, name: &str) -> Option<Value> {
        self.admin
            .get(&format!("{}/{name}", widgets(namespace)))
            .await
            .ok()
    }

    pub async fn patch_widget(
        &self,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> Result<(), String> {
        self.admin
            .merge_patch(&format!("{}/{name}", widgets(namespace)), &patch)
            .await
            .map(drop)
            .map_err(|error| format!("patching widget {namespace}/{name}: {error}"))
    }

    pub async fn delete_widget(&self, namespace: &str, name: &str) -> Result<(), String> {
        self.admin
            .delete(&format!("{}/{name}", widgets(namespace)))
            .await
            .map_err(|error| format!("deleting widget {namespace}/{name}: {error}"))
    }
}

pub fn widgets(namespace: &str) -> String {
    format!("/apis/e2e.opscope.dev/v1/namespaces/{namespace}/widgets")
}
