//! `opscope demo`: the agent and a simulated misbehaving operator fleet that sends it
//! real OTLP, so a newcomer sees signals fire within seconds.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use opscope_model::timestamp::now_unix_nanos;
use opscope_proto::otlp::collector::trace::v1::trace_service_client::TraceServiceClient;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use opscope_workload::{SimulatedFleet, TICK_MILLIS};

use crate::config::{Config, ConfigErrors};
use crate::service::{self, RunOptions, ServiceError};

/// Where the demo serves its Prometheus endpoint, and the backends it can also
/// export to, given on the command line.
#[derive(Debug, Clone)]
pub struct Backends {
    /// `host:port` of the Prometheus scrape endpoint.
    pub prometheus: String,
    /// OTLP/gRPC endpoint, such as Jaeger's `http://localhost:4317`.
    pub otlp: Option<String>,
    /// Loki base URL, such as `http://localhost:3100`.
    pub loki: Option<String>,
    /// Prometheus remote-write URL, such as `http://localhost:9090/api/v1/write`.
    pub remote_write: Option<String>,
    /// Alertmanager base URL, such as `http://localhost:9093`.
    pub alertmanager: Option<String>,
}

impl Default for Backends {
    fn default() -> Self {
        Self {
            prometheus: "127.0.0.1:8889".into(),
            otlp: None,
            loki: None,
            remote_write: None,
            alertmanager: None,
        }
    }
}

impl Backends {
    /// The optional exporters' config entries and the ids of those that carry
    /// traces, the operator metrics and signals.
    fn exporters(&self) -> (String, [Vec<&'static str>; 3]) {
        let mut entries = String::new();
        let mut traces = vec!["operator_metrics"];
        let mut metrics = vec!["prometheus"];
        let mut signals = vec!["debug", "prometheus"];
        // Each optional backend, and the pipeline besides `signals` it exports from.
        let optional = [
            (
                &self.otlp,
                "otlp/backend",
                "{ endpoint: \"URL\", tls: { insecure: true } }",
                Some(&mut traces),
            ),
            (&self.loki, "loki", "{ endpoint: \"URL\" }", None),
            (
                &self.remote_write,
                "prometheusremotewrite",
                "{ endpoint: \"URL\" }",
                Some(&mut metrics),
            ),
            (
                &self.alertmanager,
                "alertmanager",
                "{ endpoint: \"URL\", resend_interval: 10s }",
                None,
            ),
        ];
        for (url, id, settings, pipeline) in optional {
            if let Some(url) = url {
                entries.push_str(&format!("  {id}: {}\n", settings.replace("URL", url)));
                if let Some(pipeline) = pipeline {
                    pipeline.push(id);
                }
                signals.push(id);
            }
        }
        (entries, [traces, metrics, signals])
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("demo config: {0}")]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// The demo's config: the agent with the correlator on, signals printed, short
/// thresholds so that a stuck finalizer shows within seconds.
pub fn demo_config(backends: &Backends) -> Result<Config, ConfigErrors> {
    let (optional, [traces, metrics, signals]) = backends.exporters();
    let [traces, metrics, signals] = [traces, metrics, signals].map(|ids| ids.join(", "));
    let prometheus = &backends.prometheus;
    let yaml = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:0" }}
processors:
  operator_tagger: {{}}
  correlator:
    finalizer_leak: {{ max_age: 10s }}
    update_interval: 10s
  batch: {{ timeout: 200ms }}
exporters:
  debug: {{ verbosity: basic }}
  prometheus: {{ endpoint: "{prometheus}" }}
{optional}connectors:
  operator_metrics: {{}}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [operator_tagger, correlator, batch], exporters: [{traces}] }}
    metrics: {{ receivers: [operator_metrics], exporters: [{metrics}] }}
    signals: {{ exporters: [{signals}] }}
  telemetry:
    logs: {{ level: warn }}
    metrics: {{ address: "127.0.0.1:0" }}
"#
    );
    Config::from_yaml(&yaml, &|name| std::env::var(name).ok())
}

/// Runs the agent and the fleet until `stop` completes. The agent's OTLP receiver takes
/// any free port; the fleet starts sending once the agent is ready and says where.
pub async fn run(
    backends: Backends,
    listen_report: Option<PathBuf>,
    stop: impl Future<Output = ()>,
) -> Result<(), DemoError> {
    let config = demo_config(&backends)?;
    let (on_ready, ready) = oneshot::channel();
    let stop_fleet = CancellationToken::new();
    let fleet = tokio::spawn(start_fleet(ready, backends, stop_fleet.clone()));
    let stopping = async {
        stop.await;
        stop_fleet.cancel();
    };
    let options = RunOptions {
        listen_report,
        on_ready: Some(on_ready),
    };
    let result = service::run(config, options, stopping).await;
    stop_fleet.cancel();
    let _ = fleet.await;
    result.map_err(DemoError::from)
}

/// Once the agent is ready, says what the demo shows and where, then runs the fleet
/// against the agent's bound OTLP/gRPC address. An agent that did not start runs none.
async fn start_fleet(
    ready: oneshot::Receiver<BTreeMap<String, SocketAddr>>,
    backends: Backends,
    stop: CancellationToken,
) {
    let Ok(bound) = ready.await else {
        return;
    };
    let prometheus = bound.get("exporters.prometheus");
    let Some(otlp) = bound.get(OTLP_SETTING) else {
        return;
    };
    let prometheus = prometheus.map_or(backends.prometheus.clone(), ToString::to_string);
    println!("{}", introduction(&backends, &prometheus));
    simulate(format!("http://{otlp}"), stop).await;
}

/// The setting of the receiver the fleet sends to, as the listen report names it.
const OTLP_SETTING: &str = "receivers.otlp.protocols.grpc";

fn introduction(backends: &Backends, prometheus: &str) -> String {
    let mut text = String::from(
        "opscope demo: a simulated operator fleet sends OTLP traces to the agent.\n\
         \x20 kuberay-operator  RayJob ml/train      writes time.Now() into status on every reconcile, no event filter\n\
         \x20 widget-operator   Widget shop/calm     healthy, reconciles every 5 s\n\
         \x20 widget-operator   Widget shop/shared   two replicas without leader election, both updating it (409s)\n\
         \x20 widget-operator   Widget shop/stuck    deleted; its finalizer's cleanup keeps failing\n\
         Signals are printed below as they fire, with the usual fix. Ctrl-C stops.\n",
    );
    text.push_str(&format!(
        "Look at them in Prometheus form: curl -s http://{prometheus}/metrics | grep opscope_signal_active\n"
    ));
    for (backend, what) in [
        (&backends.otlp, "traces and signal spans"),
        (&backends.loki, "signal events"),
        (&backends.remote_write, "series"),
        (&backends.alertmanager, "alerts"),
    ] {
        if let Some(url) = backend {
            text.push_str(&format!("Also sending {what} to {url}.\n"));
        }
    }
    text
}

/// Sends the fleet's traces every tick until stopped; a refused or failed send is
/// retried with the next tick's data, as an SDK would.
async fn simulate(endpoint: String, stop: CancellationToken) {
    let mut fleet = SimulatedFleet::new(now_unix_nanos());
    let mut interval = tokio::time::interval(Duration::from_millis(TICK_MILLIS));
    let mut client = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = stop.cancelled() => return,
        }
        let request = fleet.tick(now_unix_nanos());
        if client.is_none() {
            client = TraceServiceClient::connect(endpoint.clone()).await.ok();
        }
        if let Some(connected) = client.as_mut()
            && connected.export(request).await.is_err()
        {
            client = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_config_is_valid_with_and_without_backends() {
        assert!(demo_config(&Backends::default()).is_ok());
        let all = Backends {
            otlp: Some("http://localhost:4317".into()),
            loki: Some("http://localhost:3100".into()),
            remote_write: Some("http://localhost:9090/api/v1/write".into()),
            alertmanager: Some("http://localhost:9093".into()),
            ..Backends::default()
        };
        let config = demo_config(&all).expect("valid with every backend");
        assert!(config.deprecations.is_empty(), "{:?}", config.deprecations);
        for id in [
            "otlp/backend",
            "loki",
            "prometheusremotewrite",
            "alertmanager",
            "prometheus",
        ] {
            assert!(config.exporters.contains_key(id), "{id}");
        }
    }
}
