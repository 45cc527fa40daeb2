//! The component types opscope knows, and how each section of the config is read
//! into them: `type[/name]` keys, typed settings, and errors that name their path.

use opscope_exporters::alertmanager::AlertmanagerConfig;
use opscope_exporters::debug::DebugConfig;
use opscope_exporters::loki::LokiConfig;
use opscope_exporters::otlp::{OtlpExporterConfig, OtlpProtocol};
use opscope_exporters::prometheus::{PrometheusConfig, RemoteWriteConfig};
use opscope_model::TelemetryKind;
use opscope_model::config::FieldError;
use opscope_processors::batch::BatchConfig;
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

    pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, Vec<ConfigError>> {
        match kind {
            "otlp" => read(value, path, OtlpReceiverConfig::validate).map(Self::Otlp),
            "filelog" => read(value, path, FilelogConfig::validate).map(Self::Filelog),
            "k8s_audit" => read(value, path, K8sAuditConfig::validate).map(Self::K8sAudit),
            "prometheus_scrape" => {
                read(value, path, PrometheusScrapeConfig::validate).map(Self::PrometheusScrape)
            }
            _ => Err(vec![unknown("receiver", kind, Self::TYPES, path)]),
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

    pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, Vec<ConfigError>> {
        match kind {
            "batch" => read(value, path, BatchConfig::validate).map(Self::Batch),
            "resource" => read(value, path, ResourceConfig::validate).map(Self::Resource),
            "operator_tagger" => {
                read(value, path, TaggerConfig::validate).map(Self::OperatorTagger)
            }
            "correlator" => read(value, path, CorrelatorConfig::validate).map(Self::Correlator),
            "memory_limiter" => {
                read(value, path, MemoryLimiterConfig::validate).map(Self::MemoryLimiter)
            }
            _ => Err(vec![unknown("processor", kind, Self::TYPES, path)]),
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

    pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, Vec<ConfigError>> {
        match kind {
            "otlp" | "otlphttp" => {
                let protocol = if kind == "otlp" {
                    OtlpProtocol::Grpc
                } else {
                    OtlpProtocol::Http
                };
                let config = read(value, path, |config: &OtlpExporterConfig| {
                    config.validate(protocol)
                })?;
                Ok(match protocol {
                    OtlpProtocol::Grpc => Self::Otlp(config),
                    OtlpProtocol::Http => Self::OtlpHttp(config),
                })
            }
            "debug" => read(value, path, |_: &DebugConfig| Ok(())).map(Self::Debug),
            "loki" => read(value, path, LokiConfig::validate).map(Self::Loki),
            "prometheus" => read(value, path, PrometheusConfig::validate).map(Self::Prometheus),
            "prometheusremotewrite" => {
                read(value, path, RemoteWriteConfig::validate).map(Self::RemoteWrite)
            }
            "alertmanager" => {
                read(value, path, AlertmanagerConfig::validate).map(Self::Alertmanager)
            }
            _ => Err(vec![unknown("exporter", kind, Self::TYPES, path)]),
        }
    }
}

impl ExtensionConfig {
    pub const TYPES: &'static [&'static str] = &["health_check"];

    pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, Vec<ConfigError>> {
        match kind {
            "health_check" => read(value, path, HealthCheckConfig::validate).map(Self::HealthCheck),
            _ => Err(vec![unknown("extension", kind, Self::TYPES, path)]),
        }
    }
}

/// Most problems reported for one component: each costs a new pass over its settings.
const MAX_ERRORS_PER_COMPONENT: usize = 32;

/// Reads a component's settings and validates them, reporting every problem rather
/// than the first: a setting found wrong (an unknown key, a wrong type, a value its
/// validation refuses) is reported, taken out so the setting falls back to its
/// default, and the settings read again. An empty section (`debug:`) means all
/// defaults.
pub(super) fn read<C: DeserializeOwned>(
    value: Value,
    path: &str,
    validate: impl Fn(&C) -> Result<(), FieldError>,
) -> Result<C, Vec<ConfigError>> {
    let mut value = if value.is_null() {
        Value::Object(Default::default())
    } else {
        value
    };
    let mut errors: Vec<ConfigError> = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    while errors.len() < MAX_ERRORS_PER_COMPONENT {
        let (field, message) = match serde_path_to_error::deserialize::<_, C>(value.clone()) {
            Ok(config) => match validate(&config) {
                Ok(()) if errors.is_empty() => return Ok(config),
                Ok(()) => break,
                Err(error) => (error.field, error.message),
            },
            Err(error) => (serde_field(error.path()), error.into_inner().to_string()),
        };
        // A required setting taken out for an earlier problem is now missing: that
        // was already said.
        if removed
            .iter()
            .any(|key| message == format!("missing field `{}`", last_key(key)))
        {
            break;
        }
        let at = if field.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{field}")
        };
        if errors.iter().any(|known| known.path == at) {
            break;
        }
        errors.push(ConfigError::new(at, message));
        if !remove_setting(&mut value, &field) {
            break;
        }
        removed.push(field);
    }
    Err(errors)
}

/// The dotted path (`tls.ca_file`, `targets[1]`) of a deserialization error; empty
/// for the component itself.
fn serde_field(path: &serde_path_to_error::Path) -> String {
    let text = path.to_string();
    if text == "." { String::new() } else { text }
}

fn last_key(field: &str) -> &str {
    field.rsplit('.').next().unwrap_or(field)
}

/// Takes the setting at a dotted path out of the settings; false when there is no
/// such mapping key (or the path names a list element, whose removal would shift the
/// paths of the problems after it).
fn remove_setting(value: &mut Value, field: &str) -> bool {
    let mut keys = field.split('.').peekable();
    let mut current = value;
    while let Some(key) = keys.next() {
        if key.is_empty() || key.contains('[') {
            return false;
        }
        let Value::Object(map) = current else {
            return false;
        };
        if keys.peek().is_none() {
            return map.remove(key).is_some();
        }
        match map.get_mut(key) {
            Some(next) => current = next,
            None => return false,
        }
    }
    false
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
