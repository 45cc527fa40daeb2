//! The component types opscope knows, and how each section of the config is read
//! into them: `type[/name]` keys, typed settings, and errors that name their path.

use opscope_exporters::alertmanager::AlertmanagerConfig;
use opscope_exporters::debug::DebugConfig;
use opscope_exporters::loki::LokiConfig;
use opscope_exporters::otlp::{OtlpExporterConfig, OtlpProtocol};
use opscope_exporters::prometheus::{PrometheusConfig, RemoteWriteConfig};
use opscope_model::TelemetryKind;
use opscope_model::config::{FieldError, Validate};
use opscope_processors::batch::BatchConfig;
use opscope_processors::correlator::CorrelatorConfig;
use opscope_processors::memory_limiter::MemoryLimiterConfig;
use opscope_processors::operator_metrics::OperatorMetricsConfig;
use opscope_processors::resource::ResourceConfig;
use opscope_processors::tagger::TaggerConfig;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::extensions::health_check::HealthCheckConfig;
use crate::receivers::filelog::FilelogConfig;
use crate::receivers::k8s_audit::K8sAuditConfig;
use crate::receivers::otlp::OtlpReceiverConfig;
use crate::receivers::prometheus_scrape::PrometheusScrapeConfig;

/// Declares the types of one component kind, one row each: the type name written in
/// the config, the variant and its settings, and how they are checked once read
/// (the settings' [`Validate`] unless the row says otherwise). Generates the enum,
/// its list of type names and its parsing.
macro_rules! component_types {
    (
        $(#[$meta:meta])*
        $what:literal: $kind:ident {
            $($type_name:literal => $variant:ident($config:ty) $(checked by $check:expr)?,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub enum $kind {
            $($variant($config),)+
        }

        impl $kind {
            pub const TYPES: &'static [&'static str] = &[$($type_name),+];

            pub fn parse(kind: &str, value: Value, path: &str) -> Result<Self, Vec<FieldError>> {
                match kind {
                    $($type_name => read(value, path, component_types!(@check $config $(, $check)?))
                        .map(Self::$variant),)+
                    _ => Err(vec![unknown($what, kind, Self::TYPES, path)]),
                }
            }

            /// The type name the component is written with.
            pub fn type_name(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => $type_name,)+
                }
            }
        }
    };
    (@check $config:ty) => { <$config as Validate>::validate };
    (@check $config:ty, $check:expr) => { $check };
}

component_types! {
    "receiver": ReceiverConfig {
        "otlp" => Otlp(OtlpReceiverConfig),
        "filelog" => Filelog(FilelogConfig),
        "k8s_audit" => K8sAudit(K8sAuditConfig),
        "prometheus_scrape" => PrometheusScrape(PrometheusScrapeConfig),
    }
}

component_types! {
    "processor": ProcessorConfig {
        "batch" => Batch(BatchConfig),
        "resource" => Resource(ResourceConfig),
        "operator_tagger" => OperatorTagger(TaggerConfig),
        "correlator" => Correlator(CorrelatorConfig),
        "memory_limiter" => MemoryLimiter(MemoryLimiterConfig),
    }
}

component_types! {
    "exporter": ExporterConfig {
        "otlp" => Otlp(OtlpExporterConfig)
            checked by |config: &OtlpExporterConfig| config.validate(OtlpProtocol::Grpc),
        "otlphttp" => OtlpHttp(OtlpExporterConfig)
            checked by |config: &OtlpExporterConfig| config.validate(OtlpProtocol::Http),
        "debug" => Debug(DebugConfig) checked by |_: &DebugConfig| Ok(()),
        "loki" => Loki(LokiConfig),
        "alertmanager" => Alertmanager(AlertmanagerConfig),
        "prometheus" => Prometheus(PrometheusConfig),
        "prometheusremotewrite" => RemoteWrite(RemoteWriteConfig),
    }
}

component_types! {
    /// Components that are an exporter of some pipelines and a receiver of others.
    "connector": ConnectorConfig {
        "operator_metrics" => OperatorMetrics(OperatorMetricsConfig),
    }
}

component_types! {
    "extension": ExtensionConfig {
        "health_check" => HealthCheck(HealthCheckConfig),
    }
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
        use TelemetryKind::{Logs, Metrics};
        match self {
            Self::Otlp(_) | Self::OtlpHttp(_) | Self::Debug(_) => true,
            Self::Loki(_) => matches!(carried, Carried::Telemetry(Logs) | Carried::Signals),
            Self::Prometheus(_) | Self::RemoteWrite(_) => {
                matches!(carried, Carried::Telemetry(Metrics) | Carried::Signals)
            }
            Self::Alertmanager(_) => carried == Carried::Signals,
        }
    }
}

impl ConnectorConfig {
    /// Whether pipelines of this type may list the connector as an exporter.
    pub fn takes(&self, kind: TelemetryKind) -> bool {
        match self {
            Self::OperatorMetrics(_) => kind != TelemetryKind::Metrics,
        }
    }

    /// Whether pipelines of this type may list the connector as a receiver.
    pub fn feeds(&self, kind: TelemetryKind) -> bool {
        match self {
            Self::OperatorMetrics(_) => kind == TelemetryKind::Metrics,
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
) -> Result<C, Vec<FieldError>> {
    let mut value = if value.is_null() {
        Value::Object(Default::default())
    } else {
        value
    };
    let mut errors: Vec<FieldError> = Vec::new();
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
        if errors.iter().any(|known| known.field == at) {
            break;
        }
        errors.push(FieldError::new(at, message));
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

fn unknown(what: &str, kind: &str, known: &[&str], path: &str) -> FieldError {
    FieldError::new(
        path,
        format!(
            "unknown {what} type \"{kind}\" (known: {})",
            known.join(", ")
        ),
    )
}
