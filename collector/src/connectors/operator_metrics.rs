//! The `operator_metrics` connector: an exporter of traces and logs pipelines that
//! derives the operator metrics from their records' correlator events and hands them,
//! as OTLP metrics, to the metrics pipelines that list it as a receiver, where any
//! metrics exporter takes them.
//!
//! A batch's metrics are derived and handed on under one lock, and what it took from
//! reconciles is remembered only once the metrics pipelines took them: a batch the
//! sending queue tries again (the metrics pipelines were full) is counted once.

use std::sync::Arc;

use opscope_exporters::{Batch, Delivery, ExportError, Exporter, QueueConfig, RetryConfig};
use opscope_processors::CorrelatorEvents;
use opscope_processors::operator_metrics::{OperatorMetrics, OperatorMetricsConfig};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use tokio::sync::Mutex;

use crate::consumer::Consumer;
use crate::receivers::Consumers;
use crate::sending::BuiltExporter;

/// The connector `id`: an exporter of the traces and logs pipelines that list it,
/// handing the operator metrics to `fed`'s metrics pipelines.
pub fn build(id: &str, config: &OperatorMetricsConfig, fed: Consumers) -> BuiltExporter {
    let connector = Arc::new(OperatorMetricsConnector::new(id, config, fed.metrics));
    BuiltExporter::new(QueueConfig::default(), RetryConfig::default())
        .carrying::<ExportTraceServiceRequest, _>(&connector)
        .carrying::<ExportLogsServiceRequest, _>(&connector)
}

pub struct OperatorMetricsConnector {
    /// The connector's id, for errors.
    id: String,
    metrics: Consumer<ExportMetricsServiceRequest>,
    derivation: Mutex<OperatorMetrics>,
}

impl OperatorMetricsConnector {
    pub fn new(
        id: &str,
        config: &OperatorMetricsConfig,
        metrics: Consumer<ExportMetricsServiceRequest>,
    ) -> Self {
        Self {
            id: id.to_string(),
            metrics,
            derivation: Mutex::new(OperatorMetrics::new(config)),
        }
    }
}

impl<T: Batch + CorrelatorEvents> Exporter<T> for OperatorMetricsConnector {
    async fn export(&self, batch: &T) -> Result<Delivery, ExportError> {
        // Records give one or two events each.
        let mut events = Vec::with_capacity(batch.items().saturating_mul(2));
        batch.correlator_events(&mut events);
        let mut derivation = self.derivation.lock().await;
        let mut derived = derivation.derive(&events);
        if let Some(request) = derived.request.take() {
            self.metrics.deliver(request).await.map_err(|refusal| {
                let reason = format!(
                    "connector {}: the metrics pipelines refused the operator metrics: {}",
                    self.id,
                    refusal.reason()
                );
                if refusal.is_retryable() {
                    ExportError::retryable(reason)
                } else {
                    ExportError::permanent(reason)
                }
            })?;
        }
        derivation.commit(derived);
        Ok(Delivery::default())
    }
}
