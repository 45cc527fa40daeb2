//! A real OpenTelemetry Collector (the distribution `testkit/backends/build otelcol`
//! builds: otlp receiver and exporters, filelog receiver, batch processor, debug
//! exporter) on loopback, run on a config the test writes. Its OTLP receiver is given
//! port 0 ([`ANY_PORT`]) and found where the Collector logs what it bound; its own
//! metrics (`otelcol_receiver_accepted_*`, `otelcol_exporter_sent_*`), whose address
//! it does not log, are served on a port chosen for them (the Collector is started
//! again on another when that one was taken), which is also how the test knows it is
//! up.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::backend::{Launch, LoggedAddress, ServerProcess, built_or_skip, http_client, temp_dir};

/// The endpoint to give a receiver in the config: the Collector binds a port of its
/// choosing, which [`OtelCollector::otlp_grpc_endpoint`] and
/// [`OtelCollector::otlp_http_endpoint`] tell.
pub const ANY_PORT: &str = "127.0.0.1:0";

/// Where the Collector logs the addresses its OTLP receiver bound, and that its
/// pipelines all run.
const OTLP_GRPC: LoggedAddress = LoggedAddress {
    line: "Starting GRPC server",
    key: "\"endpoint\": \"",
};
const OTLP_HTTP: LoggedAddress = LoggedAddress {
    line: "Starting HTTP server",
    key: "\"endpoint\": \"",
};
const EVERYTHING_READY: &str = "Everything is ready";

/// The Collector binary, or `None` (with the reason printed) when the test may skip.
pub fn otel_collector_or_skip() -> Option<PathBuf> {
    built_or_skip("otelcol-opscope-test", "otelcol")
}

/// A Collector on loopback, killed on drop.
pub struct OtelCollector {
    process: ServerProcess,
    metrics_url: String,
    otlp_grpc: Option<String>,
    otlp_http: Option<String>,
    http: reqwest::Client,
}

impl OtelCollector {
    /// Starts the Collector on `pipelines_yaml` (its `receivers`, `processors`,
    /// `exporters` and `service.pipelines`, with `service:` last and
    /// `telemetry` left to this function; receivers on [`ANY_PORT`]) and waits until it
    /// serves its metrics and has started every pipeline.
    pub async fn start(binary: &Path, pipelines_yaml: &str) -> Self {
        let dir = temp_dir("opscope-otelcol");
        let (mut process, [metrics_port]) =
            ServerProcess::start_on_chosen_ports("otelcol", dir, |dir, [metrics_port]| {
                let config = dir.join("otelcol.yaml");
                let yaml = format!("{pipelines_yaml}{}", telemetry_yaml(metrics_port));
                std::fs::write(&config, yaml).expect("config");
                let mut command = Command::new(binary);
                command.arg(format!("--config={}", config.display()));
                let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
                Launch {
                    command,
                    base_url: metrics_url.clone(),
                    ready: metrics_url,
                }
            })
            .await;
        process.logged_line(EVERYTHING_READY).await;
        Self {
            metrics_url: format!("http://127.0.0.1:{metrics_port}/metrics"),
            otlp_grpc: process.logged(OTLP_GRPC).map(|a| a.to_string()),
            otlp_http: process.logged(OTLP_HTTP).map(|a| a.to_string()),
            process,
            http: http_client(),
        }
    }

    /// `127.0.0.1:<port>` where its OTLP receiver takes gRPC; panics when the config
    /// has none.
    pub fn otlp_grpc_endpoint(&self) -> &str {
        self.otlp_grpc
            .as_deref()
            .expect("the Collector's config has an OTLP receiver taking gRPC")
    }

    /// `127.0.0.1:<port>` where its OTLP receiver takes HTTP; panics when the config
    /// has none.
    pub fn otlp_http_endpoint(&self) -> &str {
        self.otlp_http
            .as_deref()
            .expect("the Collector's config has an OTLP receiver taking HTTP")
    }

    /// The Collector's own metrics page.
    pub async fn metrics(&self) -> String {
        let Ok(response) = self.http.get(&self.metrics_url).send().await else {
            return String::new();
        };
        response.text().await.unwrap_or_default()
    }

    /// The sum of the samples of `family` on the Collector's metrics page, named with
    /// or without `_total` (this release's counters go without it).
    pub async fn metric_sum(&self, family: &str) -> f64 {
        let family = family.trim_end_matches("_total");
        self.metrics()
            .await
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter(|line| {
                let rest = line.strip_prefix(family).unwrap_or("_");
                let rest = rest.strip_prefix("_total").unwrap_or(rest);
                rest.starts_with('{') || rest.starts_with(' ')
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub fn dir(&self) -> &Path {
        self.process.dir()
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// The `service.telemetry` section: logs at info, metrics served on `port`.
fn telemetry_yaml(port: u16) -> String {
    format!(
        "  telemetry:
    logs:
      level: info
    metrics:
      level: detailed
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {port}
"
    )
}
