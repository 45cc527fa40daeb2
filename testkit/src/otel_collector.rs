//! A real OpenTelemetry Collector (the distribution `testkit/backends/build otelcol`
//! builds: otlp receiver and exporters, filelog receiver, batch processor, debug
//! exporter) on free loopback ports, run on a config the test writes. Its own
//! metrics (`otelcol_receiver_accepted_*`, `otelcol_exporter_sent_*`) are served on a
//! port of their own, which is also how the test knows it is up.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::backend::{ServerProcess, built_or_skip, free_port, http_client, temp_dir};

/// The Collector binary, or `None` (with the reason printed) when the test may skip.
pub fn otel_collector_or_skip() -> Option<PathBuf> {
    built_or_skip("otelcol-opscope-test", "otelcol")
}

/// A Collector on loopback, killed on drop.
pub struct OtelCollector {
    process: ServerProcess,
    metrics_url: String,
    http: reqwest::Client,
}

impl OtelCollector {
    /// Starts the Collector on `pipelines_yaml` (its `receivers`, `processors`,
    /// `exporters` and `service.pipelines`, with `service:` last and
    /// `telemetry` left to this function) and waits until it serves its metrics.
    pub async fn start(binary: &Path, pipelines_yaml: &str) -> Self {
        let dir = temp_dir("opscope-otelcol");
        let metrics_port = free_port();
        let config = dir.path().join("otelcol.yaml");
        let telemetry = format!(
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
                port: {metrics_port}
"
        );
        std::fs::write(&config, format!("{pipelines_yaml}{telemetry}")).expect("config");
        let mut command = Command::new(binary);
        command.arg(format!("--config={}", config.display()));
        let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
        let process = ServerProcess::start_ready_at(
            "otelcol",
            command,
            metrics_url.clone(),
            &metrics_url,
            dir,
        )
        .await;
        Self {
            process,
            metrics_url,
            http: http_client(),
        }
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

/// A loopback `host:port` that was free a moment ago, for a Collector receiver.
pub fn loopback_endpoint() -> String {
    format!("127.0.0.1:{}", free_port())
}
