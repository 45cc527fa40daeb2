//! The component types opscope knows, and how each section of the config is read
//! into them: `type[/name]` keys, typed settings, and errors that name their path.

use opscope_exporters::alertmanager::AlertmanagerConfig;
use opscope_exporters::debug::DebugConfig;
use opscope_exporters::loki::LokiConfig;
use opscope_exporters::otlp::{OtlpExporterConfig, OtlpProtocol};
use opscope_exporters::prometheus::{PrometheusConfig, RemoteWriteConfig};
use opscope_processors::TelemetryKind;
use opscope_processors::batch::BatchConfig;
use opscope_processors::config::FieldError;
use opscope_processors::correlator::CorrelatorConfig;
use opscope_processors::memory_limiter::MemoryLimiterConfig;
use opscope_processors::resource::ResourceConfig;
use opscope_processors::tagger::TaggerConfig;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ConfigError;
use crate::extensions::health_check::HealthCheckConfig;
use crate::receivers::filelog::FilelogConfig;
use crate::receivers::k8s_audit::K8sAuditConfig;
use crate::receivers::otlp::OtlpReceiverConfig;
use crate::receivers::prometheus_scrape::PrometheusScrapeConfig;

#[derive(Debug, Clone)]
pub enum ReceiverConfig {
    Otlp(OtlpReceiverConfig),
    Filelog(FilelogConfig),
    K8sAudit(K8sAuditConfig),
    PrometheusScrape(PrometheusScrapeConfig),
}

#[derive(Debug, Clone)]
pub enum ProcessorConfig {
    Batch(BatchConfig),
    Resource(ResourceConfig),
    OperatorTagger(TaggerConfig),
    Correlator(CorrelatorConfig),
    MemoryLimiter(MemoryLimiterConfig),
}

#[derive(Debug, Clone)]
pub enum ExporterConfig {
    Otlp(OtlpExporterConfig),
    OtlpHttp(OtlpExporterConfig),
    Debug(DebugConfig),
    Loki(LokiConfig),
    Alertmanager(AlertmanagerConfig),
    Prometheus(PrometheusConfig),
    RemoteWrite(RemoteWriteConfig),
}

#[derive(Debug, Clone)]
pub enum ExtensionConfig {
    HealthCheck(HealthCheckConfig),
}

/// What a pipeline carries to its exporters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    Telemetry(TelemetryKind),
    Signals,
}

impl Carried {
    pub fn name(self) -> &'static str {
        match self {
            Self::Telemetry(kind) => kind.name(),
            Self::Signals => "signals",
        }
    }
}

impl ExporterConfig {
    /// Whether the exporter can take what a pipeline carries.
    pub fn carries(&self, carried: Carried) -> bool {
        match self {
            Self::Otlp(_)
            | Self::OtlpHttp(_)
            | Self::Debug(_)
            | Self::Prometheus(_)
            | Self::RemoteWrite(_) => true,
            Self::Loki(_) => matches!(
                carried,
                Carried::Telemetry(TelemetryKind::Logs) | Carried::Signals
            ),
            Self::Alertmanager(_) => carried == Carried::Signals,
        }
    }
}

/// The `type` part of a `type/name` component key.
pub fn component_type(id: &str) -> &str {
    id.split_once('/').map_or(id, |(kind, _)| kind)
}

/// Checks the shape of a component key: a type, optionally `/` and a name.
pub fn check_id(id: &str) -> Result<(), String> {
    let (kind, name) = match id.split_once('/') {
        Some((kind, name)) => (kind, Some(name)),
        None => (id, None),
    };
    if kind.is_empty() || name.is_some_and(str::is_empty) {
        return Err(format!(
            "invalid component id \"{id}\"; write type or type/name"
        ));
    }
    Ok(())
}

impl ReceiverConfig {
    /// Whether the receiver produces data of this signal type.
    pub fn feeds(&self, kind: TelemetryKind) -> bool {
        match self {
            Self::Otlp(_) => true,
            Self::Filelog(_) | Self::K8sAudit(_) => kind == TelemetryKind::Logs,
            Self::PrometheusScrape(_) => kind == TelemetryKind::Metrics,
        }
    }

    pub const TYPES: &'static [&'static str] =
        &["otlp", "filelog", "k8s_audit", "prometheus_scrape"];

    pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, ConfigError> {
        match kind {
            "otlp" => {
                let config: OtlpReceiverConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::Otlp(config))
            }
            "filelog" => {
                let config: FilelogConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::Filelog(config))
            }
            "k8s_audit" => {
                let config: K8sAuditConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::K8sAudit(config))
            }
            "prometheus_scrape" => {
                let config: PrometheusScrapeConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::PrometheusScrape(config))
            }
            _ => Err(unknown("receiver", kind, Self::TYPES, path)),
        }
    }
}

impl ProcessorConfig {
    pub const TYPES: &'static [&'static str] = &[
        "batch",
        "resource",
        "operator_tagger",
        "correlator",
        "memory_limiter",
    ];

    pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, ConfigError> {
        match kind {
            "batch" => {
                let config: BatchConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::Batch(config))
            }
            "resource" => {
                let config: ResourceConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::Resource(config))
            }
            "operator_tagger" => {
                let config: TaggerConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::OperatorTagger(config))
            }
            "correlator" => {
                let config: CorrelatorConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::Correlator(config))
            }
            "memory_limiter" => {
                let config: MemoryLimiterConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::MemoryLimiter(config))
            }
            _ => Err(unknown("processor", kind, Self::TYPES, path)),
        }
    }
}

impl ExporterConfig {
    pub const TYPES: &'static [&'static str] = &[
        "otlp",
        "otlphttp",
        "debug",
        "loki",
        "alertmanager",
        "prometheus",
        "prometheusremotewrite",
    ];

    pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, ConfigError> {
        match kind {
            "otlp" | "otlphttp" => {
                let config: OtlpExporterConfig = settings(value, path)?;
                let protocol = if kind == "otlp" {
                    OtlpProtocol::Grpc
                } else {
                    OtlpProtocol::Http
                };
                checked(config.validate(protocol), path)?;
                Ok(match protocol {
                    OtlpProtocol::Grpc => Self::Otlp(config),
                    OtlpProtocol::Http => Self::OtlpHttp(config),
                })
            }
            "debug" => Ok(Self::Debug(settings(value, path)?)),
            "loki" => {
                let config: LokiConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::Loki(config))
            }
            "prometheus" => {
                let config: PrometheusConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::Prometheus(config))
            }
            "prometheusremotewrite" => {
                let config: RemoteWriteConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::RemoteWrite(config))
            }
            "alertmanager" => {
                let config: AlertmanagerConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::Alertmanager(config))
            }
            _ => Err(unknown("exporter", kind, Self::TYPES, path)),
        }
    }
}

impl ExtensionConfig {
    pub const TYPES: &'static [&'static str] = &["health_check"];

    pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, ConfigError> {
        match kind {
            "health_check" => {
                let config: HealthCheckConfig = settings(value, path)?;
                checked(config.validate(), path)?;
                Ok(Self::HealthCheck(config))
            }
            _ => Err(unknown("extension", kind, Self::TYPES, path)),
        }
    }
}

/// Reads a component's settings; an empty section (`debug:`) means all defaults.
fn settings<C: DeserializeOwned>(value: Value, path: &str) -> Result<C, ConfigError> {
    let value = if value.is_null() {
        Value::Object(Default::default())
    } else {
        value
    };
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.path().to_string();
        let at = if inner == "." {
            path.to_string()
        } else {
            format!("{path}.{inner}")
        };
        ConfigError::new(at, err.into_inner().to_string())
    })
}

fn checked(result: Result<(), FieldError>, path: &str) -> Result<(), ConfigError> {
    result.map_err(|e| ConfigError::new(format!("{path}.{}", e.field), e.message))
}

fn unknown(what: &str, kind: &str, known: &[&str], path: &str) -> ConfigError {
    ConfigError::new(
        path,
        format!(
            "unknown {what} type \"{kind}\" (known: {})",
            known.join(", ")
        ),
    )
}
