//! A built exporter as the pipelines see it: the sending queues it can start, one
//! for each kind of data it carries, and the queue and retry settings they get.
//! Which kinds those are is said once, where the exporter type is listed (the
//! exporter table of `config/components.rs`); pipelines then ask for a queue of
//! their data and get one or `None`, with no list of exporter types of their own.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use opscope_exporters::{
    Batch, Encoded, Exporter, LogError, QueueConfig, QueueMetrics, QueueSender, QueueStore,
    RetryConfig, SendingQueue, SignalBatch,
};
use opscope_model::TelemetryKind;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use tokio_util::sync::CancellationToken;

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

/// What a pipeline's batches of this type carry, whether an exporter takes them
/// decoded or, to send OTLP on, encoded.
pub trait CarriedAs {
    const CARRIED: Carried;
}

impl CarriedAs for ExportTraceServiceRequest {
    const CARRIED: Carried = Carried::Telemetry(TelemetryKind::Traces);
}

impl CarriedAs for ExportLogsServiceRequest {
    const CARRIED: Carried = Carried::Telemetry(TelemetryKind::Logs);
}

impl CarriedAs for ExportMetricsServiceRequest {
    const CARRIED: Carried = Carried::Telemetry(TelemetryKind::Metrics);
}

impl<T: CarriedAs> CarriedAs for Encoded<T> {
    const CARRIED: Carried = T::CARRIED;
}

impl CarriedAs for SignalBatch {
    const CARRIED: Carried = Carried::Signals;
}

/// What starting a sending queue needs besides the exporter.
pub struct Start<'a> {
    pub name: &'a str,
    pub queue: &'a QueueConfig,
    pub retry: &'a RetryConfig,
    pub metrics: QueueMetrics,
    pub abort: CancellationToken,
    pub store: QueueStore<'a>,
}

/// A started sending queue, or why its durable storage cannot be opened.
pub type Started<B> = Result<(QueueSender<B>, SendingQueue), LogError>;

/// Starts a queue of `B` to one exporter.
type Starter<B> = Box<dyn Fn(Start<'_>) -> Started<B> + Send + Sync>;

/// An exporter built from its settings, shared by the queues of every pipeline that
/// lists it.
pub struct BuiltExporter {
    /// A [`Starter`] of each data type the exporter carries, by the type's id.
    starters: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    pub queue: QueueConfig,
    pub retry: RetryConfig,
    /// The exporter itself, for a component that uses it directly (a gateway's
    /// hand-over sends through its `loadbalancing` exporter).
    instance: Option<Arc<dyn Any + Send + Sync>>,
}

impl BuiltExporter {
    pub fn new(queue: QueueConfig, retry: RetryConfig) -> Self {
        Self {
            starters: HashMap::new(),
            queue,
            retry,
            instance: None,
        }
    }

    /// Keeps `exporter` for [`instance`](Self::instance).
    pub fn holding<E: Send + Sync + 'static>(mut self, exporter: &Arc<E>) -> Self {
        let instance: Arc<dyn Any + Send + Sync> = Arc::clone(exporter) as _;
        self.instance = Some(instance);
        self
    }

    /// The exporter, when it is an `E`.
    pub fn instance<E: Send + Sync + 'static>(&self) -> Option<Arc<E>> {
        Arc::clone(self.instance.as_ref()?).downcast::<E>().ok()
    }

    /// The exporter carries `B`: pipelines of `B` may start queues to it.
    pub fn carrying<B: Batch, E: Exporter<B>>(mut self, exporter: &Arc<E>) -> Self {
        let exporter = Arc::clone(exporter);
        let starter: Starter<B> = Box::new(move |start: Start<'_>| {
            SendingQueue::start(
                start.name,
                Arc::clone(&exporter),
                start.queue,
                start.retry,
                start.metrics,
                start.abort,
                start.store,
            )
        });
        self.starters.insert(TypeId::of::<B>(), Box::new(starter));
        self
    }

    /// Whether the exporter carries `B`.
    pub fn carries<B: 'static>(&self) -> bool {
        self.starters.contains_key(&TypeId::of::<B>())
    }

    /// Starts a queue of `B` to the exporter; `None` when it does not carry `B`
    /// (which config validation already refuses).
    pub fn start<B: Batch>(&self, start: Start<'_>) -> Option<Started<B>> {
        let starter = self.starters.get(&TypeId::of::<B>())?;
        starter
            .downcast_ref::<Starter<B>>()
            .map(|start_queue| start_queue(start))
    }
}
