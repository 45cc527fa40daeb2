//! Every exporter the pipelines list, built once: pipelines that list the same
//! exporter share it (one Prometheus endpoint, one set of firing alerts), each
//! through a sending queue of its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use opscope_exporters::prometheus::PrometheusExporter;
use opscope_exporters::{Batch, Encoded, QueueMetrics, QueueSender, QueueStore, SendingQueue};
use opscope_model::Telemetry;
use opscope_model::config::FieldError;
use opscope_model::memory::MemoryAccount;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::listening::Listening;
use crate::self_telemetry::SelfTelemetry;
use crate::sending::{BuiltExporter, Start, Started};

pub struct Exporters(BTreeMap<String, BuiltExporter>);

impl Exporters {
    /// Builds the exporters that some pipeline lists (binding the endpoints of those
    /// that serve one, whose addresses are recorded in `listening`).
    pub fn build(
        config: &Config,
        telemetry: &SelfTelemetry,
        listening: &Listening,
    ) -> Result<Self, FieldError> {
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
            let exporter = exporter.build(name, telemetry).map_err(at)?;
            if let Some(served) = exporter.instance::<PrometheusExporter>() {
                listening.record(format!("exporters.{name}"), served.local_addr());
            }
            built.insert(name.clone(), exporter);
        }
        Ok(Self(built))
    }

    /// Adds a connector built from the pipelines it feeds, as the exporter `id` of
    /// those that list it.
    pub fn add_connector(&mut self, id: &str, connector: BuiltExporter) {
        self.0.insert(id.to_string(), connector);
    }

    /// The exporter `name`, when it is an `E`.
    pub fn instance<E: Send + Sync + 'static>(&self, name: &str) -> Option<Arc<E>> {
        self.0.get(name)?.instance()
    }

    /// Whether `exporter` sends OTLP on, and so takes data of `T` encoded.
    pub fn sends_otlp<T: Batch>(&self, exporter: &str) -> bool {
        self.0
            .get(exporter)
            .is_some_and(BuiltExporter::carries::<Encoded<T>>)
    }

    /// Starts the sending queue of `queue.exporter` in `queue.pipeline` for OTLP data:
    /// an exporter that sends OTLP on takes it encoded, the others take it decoded.
    pub fn start_output<T: Telemetry>(
        &self,
        queue: QueueFor<'_>,
    ) -> Result<(Output<T>, SendingQueue), FieldError> {
        if self.sends_otlp::<T>(queue.exporter) {
            let (sender, queue) = self.start::<Encoded<T>>(queue)?;
            Ok((Output::Encoded(sender), queue))
        } else {
            let (sender, queue) = self.start::<T>(queue)?;
            Ok((Output::Decoded(sender), queue))
        }
    }

    /// Starts the sending queue of `queue.exporter` in `queue.pipeline` for data of
    /// type `B`.
    pub fn start<B: Batch>(
        &self,
        queue: QueueFor<'_>,
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
        let started: Started<B> = built.start(start).ok_or_else(|| {
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
