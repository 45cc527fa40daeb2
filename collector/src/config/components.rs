//! The component types opscope knows: one table per component kind, one row per
//! type, naming the type as written in the config, its settings, and what the kind
//! needs besides (what a receiver produces and the function that starts it, what an
//! exporter carries, the function that builds a processor or a connector). What a
//! row becomes is `component_types.rs`'s.

use opscope_exporters::alertmanager::{AlertmanagerConfig, AlertmanagerExporter};
use opscope_exporters::debug::{DebugConfig, DebugExporter};
use opscope_exporters::loadbalancing::{LoadBalancingConfig, LoadBalancingExporter};
use opscope_exporters::loki::{LokiConfig, LokiExporter};
use opscope_exporters::otlp::{GrpcExporter, HttpExporter, OtlpExporterConfig, OtlpProtocol};
use opscope_exporters::prometheus::{
    PrometheusConfig, PrometheusExporter, RemoteWriteConfig, RemoteWriteExporter,
};
use opscope_exporters::{Encoded, SignalBatch};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest as Logs;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest as Metrics;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest as Traces;

use super::component_types::{
    component_types, connector_types, exporter_types, processor_types, receiver_types,
};
use crate::extensions::health_check::HealthCheckConfig;
use crate::receivers;
use crate::receivers::ebpf::EbpfConfig;
use crate::receivers::filelog::FilelogConfig;
use crate::receivers::k8s_audit::K8sAuditConfig;
use crate::receivers::k8s_objects::K8sObjectsConfig;
use crate::receivers::otlp::OtlpReceiverConfig;
use crate::receivers::prometheus_scrape::PrometheusScrapeConfig;
use crate::self_telemetry::SelfTelemetry;

// The receivers: the signal types each produces, so that only pipelines of those may
// list it, and the function of its folder that starts it.
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
    "k8s_objects" => K8sObjects(K8sObjectsConfig) {
        feeds: [Logs],
        start: receivers::k8s_objects::start,
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

/// The processor types: each row names the function that gives a pipeline its
/// instance, which lives beside the others in `pipeline/processors/` (`batch::build`
/// is `pipeline/processors/batch.rs`'s `build`). The table is read twice, each
/// reader passing its macro: by the config for the settings (`processor_types!`),
/// and by `pipeline/processors/` for the building, so that the config needs nothing
/// of the pipeline.
macro_rules! processor_table {
    ($read:ident) => {
        $read! {
            "batch" => Batch(opscope_processors::batch::BatchConfig) {
                build: batch::build,
            }
            "resource" => Resource(opscope_processors::resource::ResourceConfig) {
                build: resource::build,
            }
            "operator_tagger" => OperatorTagger(opscope_processors::tagger::TaggerConfig) {
                build: operator_tagger::build,
            }
            // Boxed: its many detectors' settings would make every processor's settings
            // as large.
            "correlator" => Correlator(Box<opscope_processors::correlator::CorrelatorConfig>) {
                build: correlator::build,
            }
            "memory_limiter" => MemoryLimiter(opscope_processors::memory_limiter::MemoryLimiterConfig) {
                build: memory_limiter::build,
            }
        }
    };
}
pub(crate) use processor_table;

processor_table!(processor_types);

// The exporters: how each is built from its name, settings and the agent's
// telemetry, which of its settings hold its queue and retry settings (the defaults
// when the row names none), and what it carries: decoded OTLP, OTLP `Encoded` for
// those that send it on as it is, signals. Pipelines then start their queues to it
// by the type of their data (`sending.rs`).
exporter_types! {
    "otlp" => Otlp(OtlpExporterConfig) {
        check: |config: &OtlpExporterConfig| config.validate(OtlpProtocol::Grpc),
        build: |_, config, _| GrpcExporter::new(config),
        queue: sending_queue, retry: retry_on_failure,
        carries: [Encoded<Traces>, Encoded<Logs>, Encoded<Metrics>, SignalBatch],
    }
    "otlphttp" => OtlpHttp(OtlpExporterConfig) {
        check: |config: &OtlpExporterConfig| config.validate(OtlpProtocol::Http),
        build: |_, config, _| HttpExporter::new(config),
        queue: sending_queue, retry: retry_on_failure,
        carries: [Encoded<Traces>, Encoded<Logs>, Encoded<Metrics>, SignalBatch],
    }
    "debug" => Debug(DebugConfig) {
        check: |_: &DebugConfig| Ok(()),
        build: |name, config, _| Ok(DebugExporter::new(name, config)),
        carries: [Traces, Logs, Metrics, SignalBatch],
    }
    "loki" => Loki(LokiConfig) {
        build: |name, config, _| LokiExporter::new(name, config),
        queue: sending_queue, retry: retry_on_failure,
        carries: [Logs, SignalBatch],
    }
    "alertmanager" => Alertmanager(AlertmanagerConfig) {
        build: |name, config, _| AlertmanagerExporter::new(name, config),
        queue: sending_queue, retry: retry_on_failure,
        carries: [SignalBatch],
    }
    // Serving a scrape endpoint cannot fail: the default queue suffices.
    "prometheus" => Prometheus(PrometheusConfig) {
        build: |name: &str, config, telemetry: &SelfTelemetry| {
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
        queue: sending_queue, retry: retry_on_failure,
        carries: [Encoded<Traces>, Encoded<Logs>],
    }
    "prometheusremotewrite" => RemoteWrite(RemoteWriteConfig) {
        build: |name, config, _| RemoteWriteExporter::new(name, config),
        queue: sending_queue, retry: retry_on_failure,
        carries: [Metrics, SignalBatch],
    }
}

/// The connector types: each row gives the signal types of the pipelines the
/// connector is an exporter of (`takes`) and a receiver of (`feeds`), and names the
/// function that builds it, which lives in the connector's file in `connectors/`.
/// The service builds the pipelines a connector feeds first and the connector from
/// their inputs, before the pipelines that list it as an exporter. Read twice, as
/// the processor table is: by the config for the settings and what pipelines may
/// list a connector (`connector_types!`), and by `connectors/` for the building.
macro_rules! connector_table {
    ($read:ident) => {
        $read! {
            "operator_metrics" => OperatorMetrics(
                opscope_processors::operator_metrics::OperatorMetricsConfig
            ) {
                takes: [Traces, Logs],
                feeds: [Metrics],
                build: operator_metrics::build,
            }
        }
    };
}
pub(crate) use connector_table;

connector_table!(connector_types);

component_types! {
    "extension": ExtensionConfig {
        "health_check" => HealthCheck(HealthCheckConfig),
    }
}
