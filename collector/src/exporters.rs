//! Every exporter the pipelines list, built once: pipelines that list the same
//! exporter share it (one Prometheus endpoint, one set of firing alerts), each
//! through a sending queue of its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use opscope_exporters::alertmanager::AlertmanagerExporter;
use opscope_exporters::debug::DebugExporter;
use opscope_exporters::loki::LokiExporter;
use opscope_exporters::otlp::{GrpcExporter, HttpExporter};
use opscope_exporters::prometheus::{PrometheusExporter, RemoteWriteExporter};
use opscope_exporters::{
    Batch, Encoded, LogError, QueueConfig, QueueMetrics, QueueSender, QueueStore, RetryConfig,
    SendingQueue, SignalBatch,
};
use opscope_model::config::FieldError;
use opscope_model::memory::MemoryAccount;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConnectorConfig, ExporterConfig};
use crate::connectors::operator_metrics::OperatorMetricsConnector;
use crate::consumer::Consumer;
use crate::consumer::OtlpBatch;
use crate::self_telemetry::SelfTelemetry;

/// A built exporter of one of the known types.
pub enum Built {
    Otlp(Arc<GrpcExporter>),
    OtlpHttp(Arc<HttpExporter>),
    Debug(Arc<DebugExporter>),
    Loki(Arc<LokiExporter>),
    Alertmanager(Arc<AlertmanagerExporter>),
    Prometheus(Arc<PrometheusExporter>),
    RemoteWrite(Arc<RemoteWriteExporter>),
    /// A connector, as the exporter of the pipelines that list it.
    OperatorMetrics(Arc<OperatorMetricsConnector>),
}

struct BuiltExporter {
    exporter: Built,
    queue: QueueConfig,
    retry: RetryConfig,
}

pub struct Exporters(BTreeMap<String, BuiltExporter>);

impl Exporters {
    /// Builds the exporters that some pipeline lists (binding the endpoints of those
    /// that serve one).
    pub fn build(config: &Config, telemetry: &SelfTelemetry) -> Result<Self, FieldError> {
        let mut built = BTreeMap::new();
        let listed = config.service.pipelines.values().flat_map(|p| &p.exporters);
        for name in listed {
            if built.contains_key(name) {
                continue;
            }
            let Some(exporter) = config.exporters.get(name) else {
                continue;
            };
            let at = |e: FieldError| e.within(&format!("exporters.{name}"));
            built.insert(name.clone(), build(name, exporter, telemetry).map_err(at)?);
        }
        Ok(Self(built))
    }

    /// Adds a connector built from the pipelines it feeds, as the exporter `id` of
    /// those that list it: in memory, with the default queue and retries.
    pub fn add_connector(&mut self, id: &str, connector: Built) {
        let built = BuiltExporter {
            exporter: connector,
            queue: QueueConfig::default(),
            retry: RetryConfig::default(),
        };
        self.0.insert(id.to_string(), built);
    }

    /// Starts the sending queue of `queue.exporter` in `queue.pipeline` for data of
    /// type `T`.
    pub fn start<T: PipelineData>(
        &self,
        queue: QueueFor<'_>,
    ) -> Result<(QueueSender<T>, SendingQueue), FieldError> {
        self.start_queue(queue, T::start)
    }

    /// Whether `exporter` sends OTLP on, and so takes its data encoded.
    pub fn sends_otlp(&self, exporter: &str) -> bool {
        self.0
            .get(exporter)
            .is_some_and(|built| matches!(built.exporter, Built::Otlp(_) | Built::OtlpHttp(_)))
    }

    /// Starts the sending queue of `queue.exporter` in `queue.pipeline` for OTLP data:
    /// an exporter that sends OTLP on takes it encoded, the others take it decoded.
    pub fn start_output<T: PipelineData + OtlpBatch>(
        &self,
        queue: QueueFor<'_>,
    ) -> Result<(Output<T>, SendingQueue), FieldError> {
        if self.sends_otlp(queue.exporter) {
            let (sender, queue) = self.start_queue(queue, start_encoded::<T>)?;
            Ok((Output::Encoded(sender), queue))
        } else {
            let (sender, queue) = self.start_queue(queue, T::start)?;
            Ok((Output::Decoded(sender), queue))
        }
    }

    fn start_queue<B: Batch>(
        &self,
        queue: QueueFor<'_>,
        start_with: impl FnOnce(&Built, Start<'_>) -> Option<Started<B>>,
    ) -> Result<(QueueSender<B>, SendingQueue), FieldError> {
        let QueueFor {
            exporter: name,
            pipeline,
            metrics,
            memory,
            abort,
        } = queue;
        let missing = || FieldError::new(format!("exporters.{name}"), "was not built");
        let built = self.0.get(name).ok_or_else(missing)?;
        // Each pipeline has a queue of its own, so a directory of its own.
        let dir = built
            .queue
            .storage
            .as_ref()
            .map(|storage| storage.join(file_name(&format!("{name}-{pipeline}"))));
        let store = match &dir {
            Some(dir) => QueueStore::Disk(dir),
            None => QueueStore::Memory(memory),
        };
        let start = Start {
            name,
            queue: &built.queue,
            retry: &built.retry,
            metrics,
            abort,
            store,
        };
        let started = start_with(&built.exporter, start).ok_or_else(|| {
            FieldError::new(
                format!("exporters.{name}"),
                format!("cannot carry {}", B::item_name()),
            )
        })?;
        started.map_err(|error| {
            FieldError::new(
                format!("exporters.{name}.sending_queue.storage"),
                format!("cannot open the durable queue: {error}"),
            )
        })
    }

    /// Whether receivers of a pipeline sending to `name` wait for its queue to hold a
    /// batch before they answer.
    pub fn acknowledges_durably(&self, name: &str) -> bool {
        self.0
            .get(name)
            .is_some_and(|built| built.queue.acknowledges_durably())
    }
}

/// `name` with every character a file name should not hold replaced.
fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn build(
    name: &str,
    config: &ExporterConfig,
    telemetry: &SelfTelemetry,
) -> Result<BuiltExporter, FieldError> {
    let queued = |exporter, queue: &QueueConfig, retry: &RetryConfig| BuiltExporter {
        exporter,
        queue: queue.clone(),
        retry: retry.clone(),
    };
    Ok(match config {
        ExporterConfig::Otlp(otlp) => queued(
            Built::Otlp(Arc::new(GrpcExporter::new(otlp)?)),
            &otlp.sending_queue,
            &otlp.retry_on_failure,
        ),
        ExporterConfig::OtlpHttp(otlp) => queued(
            Built::OtlpHttp(Arc::new(HttpExporter::new(otlp)?)),
            &otlp.sending_queue,
            &otlp.retry_on_failure,
        ),
        ExporterConfig::Debug(debug) => queued(
            Built::Debug(Arc::new(DebugExporter::new(name, debug))),
            &QueueConfig::default(),
            &RetryConfig::default(),
        ),
        ExporterConfig::Loki(loki) => queued(
            Built::Loki(Arc::new(LokiExporter::new(name, loki)?)),
            &loki.sending_queue,
            &loki.retry_on_failure,
        ),
        // Serving a scrape endpoint cannot fail: the default queue suffices.
        ExporterConfig::Prometheus(prometheus) => queued(
            Built::Prometheus(Arc::new(PrometheusExporter::start(
                name,
                prometheus,
                telemetry.certificate_reloads(&format!("exporters.{name}"), "http"),
                telemetry.server_connections(&format!("exporters.{name}"), "http"),
            )?)),
            &QueueConfig::default(),
            &RetryConfig::default(),
        ),
        ExporterConfig::RemoteWrite(remote_write) => queued(
            Built::RemoteWrite(Arc::new(RemoteWriteExporter::new(name, remote_write)?)),
            &remote_write.sending_queue,
            &remote_write.retry_on_failure,
        ),
        ExporterConfig::Alertmanager(alertmanager) => queued(
            Built::Alertmanager(Arc::new(AlertmanagerExporter::new(name, alertmanager)?)),
            &alertmanager.sending_queue,
            &alertmanager.retry_on_failure,
        ),
    })
}

/// Builds the connector `id` of `config`, handing what it makes to `metrics`: the
/// inputs of the metrics pipelines that list it as a receiver.
pub fn build_connector(
    id: &str,
    config: &ConnectorConfig,
    metrics: Consumer<ExportMetricsServiceRequest>,
) -> Built {
    match config {
        ConnectorConfig::OperatorMetrics(_) => {
            Built::OperatorMetrics(Arc::new(OperatorMetricsConnector::new(id, metrics)))
        }
    }
}

/// What starting a sending queue needs besides the exporter.
pub struct Start<'a> {
    name: &'a str,
    queue: &'a QueueConfig,
    retry: &'a RetryConfig,
    metrics: QueueMetrics,
    abort: CancellationToken,
    store: QueueStore<'a>,
}

/// A started sending queue, or why its durable storage cannot be opened.
type Started<T> = Result<(QueueSender<T>, SendingQueue), LogError>;

impl Start<'_> {
    fn queue<T: Batch, E: opscope_exporters::Exporter<T>>(self, exporter: &Arc<E>) -> Started<T> {
        SendingQueue::start(
            self.name,
            Arc::clone(exporter),
            self.queue,
            self.retry,
            self.metrics,
            self.abort,
            self.store,
        )
    }
}

/// Which sending queue to start: one per exporter and pipeline; in memory, its
/// batches count in `memory`.
pub struct QueueFor<'a> {
    pub exporter: &'a str,
    pub pipeline: &'a str,
    pub metrics: QueueMetrics,
    pub memory: &'a MemoryAccount,
    pub abort: CancellationToken,
}

/// A pipeline's sending queue to one exporter, which takes OTLP decoded or encoded.
pub enum Output<T> {
    Decoded(QueueSender<T>),
    Encoded(QueueSender<Encoded<T>>),
}

/// A sending queue of encoded OTLP, to an exporter that sends OTLP on.
fn start_encoded<T: OtlpBatch>(exporter: &Built, start: Start<'_>) -> Option<Started<Encoded<T>>> {
    match exporter {
        Built::Otlp(exporter) => Some(start.queue(exporter)),
        Built::OtlpHttp(exporter) => Some(start.queue(exporter)),
        _ => None,
    }
}

/// The data of a pipeline, and which exporters carry it decoded.
pub trait PipelineData: Batch + Clone {
    /// A sending queue to the exporter, or `None` if it cannot carry this data
    /// (which config validation already refuses).
    fn start(exporter: &Built, start: Start<'_>) -> Option<Started<Self>>;
}

/// Implements [`PipelineData`] for a data type and the exporters that carry it.
macro_rules! carried_by {
    ($data:ty: $($variant:ident),+) => {
        impl PipelineData for $data {
            fn start(exporter: &Built, start: Start<'_>) -> Option<Started<Self>> {
                #[allow(unreachable_patterns)]
                match exporter {
                    $(Built::$variant(exporter) => Some(start.queue(exporter)),)+
                    _ => None,
                }
            }
        }
    };
}

// OTLP exporters take OTLP data encoded (see `start_encoded`).
carried_by!(ExportTraceServiceRequest: Debug, OperatorMetrics);
carried_by!(ExportLogsServiceRequest: Debug, Loki, OperatorMetrics);
carried_by!(ExportMetricsServiceRequest: Debug, Prometheus, RemoteWrite);
carried_by!(SignalBatch: Otlp, OtlpHttp, Debug, Loki, Alertmanager, Prometheus, RemoteWrite);
