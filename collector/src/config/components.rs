//! The component types opscope knows, and how each section of the config is read
//! into them: `type[/name]` keys, typed settings, and errors that name their path.

use std::sync::Arc;

use opscope_exporters::alertmanager::{AlertmanagerConfig, AlertmanagerExporter};
use opscope_exporters::debug::{DebugConfig, DebugExporter};
use opscope_exporters::loadbalancing::{LoadBalancingConfig, LoadBalancingExporter};
use opscope_exporters::loki::{LokiConfig, LokiExporter};
use opscope_exporters::otlp::{GrpcExporter, HttpExporter, OtlpExporterConfig, OtlpProtocol};
use opscope_exporters::prometheus::{
    PrometheusConfig, PrometheusExporter, RemoteWriteConfig, RemoteWriteExporter,
};
use opscope_exporters::{Encoded, QueueConfig, RetryConfig, SignalBatch};
use opscope_model::TelemetryKind;
use opscope_model::config::{FieldError, Validate};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest as Logs;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest as Metrics;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest as Traces;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::task::JoinSet;

use crate::extensions::health_check::HealthCheckConfig;
use crate::receivers::ebpf::EbpfConfig;
use crate::receivers::filelog::FilelogConfig;
use crate::receivers::k8s_audit::K8sAuditConfig;
use crate::receivers::otlp::OtlpReceiverConfig;
use crate::receivers::prometheus_scrape::PrometheusScrapeConfig;
use crate::receivers::{self, ReceiverContext, ReceiverError};
use crate::self_telemetry::SelfTelemetry;
use crate::sending::{BuiltExporter, Carried, CarriedAs};

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

/// Declares the receiver types, one row each: as [`component_types!`], plus the
/// signal types the receiver produces and the function that starts it.
macro_rules! receiver_types {
    ($($type_name:literal => $variant:ident($config:ty) {
        feeds: [$($kind:ident),+],
        start: $start:path $(,)?
    })+) => {
        component_types! {
            "receiver": ReceiverConfig {
                $($type_name => $variant($config),)+
            }
        }

        impl ReceiverConfig {
            /// Whether the receiver produces data of this signal type.
            pub fn feeds(&self, kind: TelemetryKind) -> bool {
                match self {
                    $(Self::$variant(_) => [$(TelemetryKind::$kind),+].contains(&kind),)+
                }
            }

            /// Binds the receiver's listeners (so a port in use fails the start) and
            /// spawns its servers into `tasks`; they end after the context's
            /// `shutdown` fires and in-flight requests are answered.
            pub async fn start(
                &self,
                context: ReceiverContext,
                tasks: &mut JoinSet<()>,
            ) -> Result<(), ReceiverError> {
                match self {
                    $(Self::$variant(config) => Ok($start(config, context, tasks).await?),)+
                }
            }
        }
    };
}

receiver_types! {
    "otlp" => Otlp(OtlpReceiverConfig) {
        feeds: [Traces, Logs, Metrics],
        start: receivers::otlp::start,
    }
    "filelog" => Filelog(FilelogConfig) {
        feeds: [Logs],
        start: receivers::filelog::start,
    }
    "k8s_audit" => K8sAudit(K8sAuditConfig) {
        feeds: [Logs],
        start: receivers::k8s_audit::start,
    }
    "prometheus_scrape" => PrometheusScrape(PrometheusScrapeConfig) {
        feeds: [Metrics],
        start: receivers::prometheus_scrape::start,
    }
    "ebpf" => Ebpf(EbpfConfig) {
        feeds: [Metrics],
        start: receivers::ebpf::start,
    }
}

/// The processor types, one row each: the type name written in the config, its
/// variant and settings, and how a pipeline gets its instance (its name, its
/// settings and the processors shared by every pipeline given: a processor that is
/// one instance for all pipelines, like the tagger, is made once in
/// `SharedProcessors::new`). The table is read twice, each reader passing its macro:
/// here for the settings (`processor_types!`) and by `pipeline/processors.rs` for
/// the building, so the config needs nothing of the pipeline.
macro_rules! processor_table {
    ($read:ident) => {
        $read! {
            "batch" => Batch(opscope_processors::batch::BatchConfig) {
                build: |_, config, _| Ok(Box::new(BatchProcessor::new(config.clone()))),
            }
            "resource" => Resource(opscope_processors::resource::ResourceConfig) {
                build: |name, config, _| {
                    let processor = ResourceProcessor::new(config)
                        .map_err(|e| e.within(&format!("processors.{name}")))?;
                    Ok(Box::new(processor))
                },
            }
            "operator_tagger" => OperatorTagger(opscope_processors::tagger::TaggerConfig) {
                build: |name, _, shared| Ok(Box::new(shared.instance(&shared.taggers, name)?)),
            }
            // Boxed: its many detectors' settings would make every processor's settings
            // as large.
            "correlator" => Correlator(Box<opscope_processors::correlator::CorrelatorConfig>) {
                build: |name, _, shared| Ok(Box::new(shared.instance(&shared.correlators, name)?)),
            }
            "memory_limiter" => MemoryLimiter(opscope_processors::memory_limiter::MemoryLimiterConfig) {
                build: |name, _, shared| {
                    Ok(Box::new(shared.instance(&shared.memory_limiters, name)?))
                },
            }
        }
    };
}
pub(crate) use processor_table;

/// Reads the processor table for the settings.
macro_rules! processor_types {
    ($($type_name:literal => $variant:ident($config:ty) { build: $build:expr $(,)? })+) => {
        component_types! {
            "processor": ProcessorConfig {
                $($type_name => $variant($config),)+
            }
        }
    };
}

processor_table!(processor_types);

/// Declares the exporter types, one row each: as [`component_types!`], plus how the
/// exporter is built from its settings (its name, settings and the agent's
/// telemetry), its queue and retry settings (the defaults unless the row says), and
/// what it carries (decoded OTLP, OTLP `Encoded` for those that send it on as it
/// is, signals).
macro_rules! exporter_types {
    (
        $($type_name:literal => $variant:ident($config:ty) {
            $(check: $check:expr,)?
            build: $build:expr,
            $(queue: $queue:expr,)?
            carries: [$($data:ty),+ $(,)?] $(,)?
        })+
    ) => {
        component_types! {
            "exporter": ExporterConfig {
                $($type_name => $variant($config) $(checked by $check)?,)+
            }
        }

        impl ExporterConfig {
            /// Whether the exporter can take what a pipeline carries.
            pub fn carries(&self, carried: Carried) -> bool {
                match self {
                    $(Self::$variant(_) => [$(<$data as CarriedAs>::CARRIED),+].contains(&carried),)+
                }
            }

            /// Builds the exporter `name` (binding the endpoint of one that serves one).
            pub fn build(
                &self,
                name: &str,
                telemetry: &SelfTelemetry,
            ) -> Result<BuiltExporter, FieldError> {
                match self {
                    $(Self::$variant(config) => {
                        let exporter = Arc::new(build_with(name, config, telemetry, $build)?);
                        let (queue, retry) = exporter_types!(@queue config $(, $queue)?);
                        Ok(BuiltExporter::new(queue, retry).holding(&exporter)$(.carrying::<$data, _>(&exporter))+)
                    })+
                }
            }
        }
    };
    (@queue $config:ident) => { (QueueConfig::default(), RetryConfig::default()) };
    (@queue $config:ident, $queue:expr) => { queue_with($config, $queue) };
}

/// Calls a row's builder, its argument types given by the row's settings type.
fn build_with<C, E>(
    name: &str,
    config: &C,
    telemetry: &SelfTelemetry,
    build: impl FnOnce(&str, &C, &SelfTelemetry) -> Result<E, FieldError>,
) -> Result<E, FieldError> {
    build(name, config, telemetry)
}

/// Reads a row's queue and retry settings out of its exporter's settings.
fn queue_with<C>(
    config: &C,
    queue: impl FnOnce(&C) -> (&QueueConfig, &RetryConfig),
) -> (QueueConfig, RetryConfig) {
    let (queue, retry) = queue(config);
    (queue.clone(), retry.clone())
}

exporter_types! {
    "otlp" => Otlp(OtlpExporterConfig) {
        check: |config: &OtlpExporterConfig| config.validate(OtlpProtocol::Grpc),
        build: |_, config, _| GrpcExporter::new(config),
        queue: |config| (&config.sending_queue, &config.retry_on_failure),
        carries: [Encoded<Traces>, Encoded<Logs>, Encoded<Metrics>, SignalBatch],
    }
    "otlphttp" => OtlpHttp(OtlpExporterConfig) {
        check: |config: &OtlpExporterConfig| config.validate(OtlpProtocol::Http),
        build: |_, config, _| HttpExporter::new(config),
        queue: |config| (&config.sending_queue, &config.retry_on_failure),
        carries: [Encoded<Traces>, Encoded<Logs>, Encoded<Metrics>, SignalBatch],
    }
    "debug" => Debug(DebugConfig) {
        check: |_: &DebugConfig| Ok(()),
        build: |name, config, _| Ok(DebugExporter::new(name, config)),
        carries: [Traces, Logs, Metrics, SignalBatch],
    }
    "loki" => Loki(LokiConfig) {
        build: |name, config, _| LokiExporter::new(name, config),
        queue: |config| (&config.sending_queue, &config.retry_on_failure),
        carries: [Logs, SignalBatch],
    }
    "alertmanager" => Alertmanager(AlertmanagerConfig) {
        build: |name, config, _| AlertmanagerExporter::new(name, config),
        queue: |config| (&config.sending_queue, &config.retry_on_failure),
        carries: [SignalBatch],
    }
    // Serving a scrape endpoint cannot fail: the default queue suffices.
    "prometheus" => Prometheus(PrometheusConfig) {
        build: |name, config, telemetry| {
            let at = format!("exporters.{name}");
            let reloads = telemetry.certificate_reloads(&at, "http");
            let connections = telemetry.server_connections(&at, "http");
            PrometheusExporter::start(name, config, reloads, connections)
        },
        carries: [Metrics, SignalBatch],
    }
    // Routes each record to the gateway that owns its object (docs/deploy.md).
    "loadbalancing" => LoadBalancing(LoadBalancingConfig) {
        build: |name, config, _| LoadBalancingExporter::new(name, config),
        queue: |config| (&config.sending_queue, &config.retry_on_failure),
        carries: [Encoded<Traces>, Encoded<Logs>],
    }
    "prometheusremotewrite" => RemoteWrite(RemoteWriteConfig) {
        build: |name, config, _| RemoteWriteExporter::new(name, config),
        queue: |config| (&config.sending_queue, &config.retry_on_failure),
        carries: [Metrics, SignalBatch],
    }
}

/// The connector types, one row each: the type name, variant and settings, the
/// signal types of the pipelines it is an exporter of (`takes`) and a receiver of
/// (`feeds`), and how it is built from its id and the inputs of the metrics
/// pipelines it feeds. Read twice, as the processor table is: here for the settings
/// (`connector_types!`), and by `exporters.rs` for the building.
macro_rules! connector_table {
    ($read:ident) => {
        $read! {
            "operator_metrics" => OperatorMetrics(
                opscope_processors::operator_metrics::OperatorMetricsConfig
            ) {
                takes: [Traces, Logs],
                feeds: [Metrics],
                build: |id, config, metrics| {
                    let connector = Arc::new(OperatorMetricsConnector::new(id, config, metrics));
                    BuiltExporter::new(QueueConfig::default(), RetryConfig::default())
                        .carrying::<ExportTraceServiceRequest, _>(&connector)
                        .carrying::<ExportLogsServiceRequest, _>(&connector)
                },
            }
        }
    };
}
pub(crate) use connector_table;

/// Reads the connector table for the settings.
macro_rules! connector_types {
    ($($type_name:literal => $variant:ident($config:ty) {
        takes: [$($taken:ident),+],
        feeds: [$($fed:ident),+],
        build: $build:expr $(,)?
    })+) => {
        component_types! {
            /// Components that are an exporter of some pipelines and a receiver of others.
            "connector": ConnectorConfig {
                $($type_name => $variant($config),)+
            }
        }

        impl ConnectorConfig {
            /// Whether pipelines of this type may list the connector as an exporter.
            pub fn takes(&self, kind: TelemetryKind) -> bool {
                match self {
                    $(Self::$variant(_) => [$(TelemetryKind::$taken),+].contains(&kind),)+
                }
            }

            /// Whether pipelines of this type may list the connector as a receiver.
            pub fn feeds(&self, kind: TelemetryKind) -> bool {
                match self {
                    $(Self::$variant(_) => [$(TelemetryKind::$fed),+].contains(&kind),)+
                }
            }
        }
    };
}

connector_table!(connector_types);

component_types! {
    "extension": ExtensionConfig {
        "health_check" => HealthCheck(HealthCheckConfig),
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
