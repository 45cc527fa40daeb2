//! The agent's configuration, OpenTelemetry-Collector-shaped: the model a config
//! document is read into (the components of each kind by id, the service and its
//! pipelines). Reading a document is `load.rs`'s, its checks `validate.rs`'s, the
//! component types `components.rs`'s.

mod component_types;
pub mod components;
mod deprecated;
pub mod env;
#[cfg(test)]
mod fuzz_tests;
mod load;
mod settings;
#[cfg(test)]
mod tests;
mod validate;

use std::collections::BTreeMap;
use std::time::Duration;

use opscope_model::TelemetryKind;
use opscope_model::config::{FieldError, duration};
use opscope_net::server_tls::ServerTlsConfig;
use serde::Deserialize;

use settings::component_type;

pub use components::{
    ConnectorConfig, ExporterConfig, ExtensionConfig, ProcessorConfig, ReceiverConfig,
};
pub use load::DEFAULT_CONFIG;

/// The type of the pipelines that carry the correlator's signals to exporters.
pub const SIGNALS: &str = "signals";

/// Every problem of a config, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<FieldError>);

/// A whole config: the components of each kind by id, and the service that puts
/// them in pipelines.
#[derive(Debug, Clone)]
pub struct Config {
    pub receivers: BTreeMap<String, ReceiverConfig>,
    pub processors: BTreeMap<String, ProcessorConfig>,
    pub exporters: BTreeMap<String, ExporterConfig>,
    pub connectors: BTreeMap<String, ConnectorConfig>,
    pub extensions: BTreeMap<String, ExtensionConfig>,
    pub service: ServiceConfig,
    /// Settings still honoured in an old form, each with the form that replaces it.
    pub deprecations: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    #[serde(default)]
    pub extensions: Vec<String>,
    #[serde(default)]
    pub pipelines: BTreeMap<String, PipelineConfig>,
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// How long a shutdown may take to deliver what is queued.
    #[serde(default = "default_shutdown_timeout", deserialize_with = "duration")]
    pub shutdown_timeout: Duration,
}

fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(10)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    #[serde(default)]
    pub receivers: Vec<String>,
    #[serde(default)]
    pub processors: Vec<String>,
    /// None only for a pipeline whose data ends in its correlator (a gateway's).
    #[serde(default)]
    pub exporters: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    pub metrics: MetricsTelemetryConfig,
    pub logs: LogsTelemetryConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsTelemetryConfig {
    /// Where opscope serves its own metrics (`/metrics`).
    pub address: String,
    /// Serve them over TLS.
    pub tls: Option<ServerTlsConfig>,
}

impl Default for MetricsTelemetryConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8888".into(),
            tls: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogsTelemetryConfig {
    /// `error`, `warn`, `info`, `debug` or `trace`; `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for LogsTelemetryConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
        }
    }
}

/// A pipeline of the service, with its signal type resolved.
pub struct Pipeline<'a> {
    pub id: &'a str,
    pub kind: TelemetryKind,
    pub config: &'a PipelineConfig,
}

impl Config {
    /// The exporters of the `signals` pipelines, which carry the correlator's signals.
    pub fn signal_exporters(&self) -> impl Iterator<Item = (&str, &str)> {
        self.service
            .pipelines
            .iter()
            .filter(|(id, _)| component_type(id) == SIGNALS)
            .flat_map(move |(id, pipeline)| {
                pipeline
                    .exporters
                    .iter()
                    .map(move |e| (id.as_str(), e.as_str()))
            })
    }

    /// The service's pipelines with their signal types (after validation).
    pub fn pipelines(&self) -> impl Iterator<Item = Pipeline<'_>> {
        self.service.pipelines.iter().filter_map(|(id, config)| {
            let kind = TelemetryKind::parse(component_type(id))?;
            Some(Pipeline { id, kind, config })
        })
    }

    /// A one-line description for `opscope validate`.
    pub fn summary(&self) -> String {
        format!(
            "{} receiver(s), {} processor(s), {} exporter(s), {} connector(s), {} pipeline(s): {}",
            self.receivers.len(),
            self.processors.len(),
            self.exporters.len(),
            self.connectors.len(),
            self.service.pipelines.len(),
            self.service
                .pipelines
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}
