//! The sending queue in front of every exporter: a bounded in-memory queue drained by
//! a few consumers, each retrying its batch until it is delivered, refused for good,
//! or the retry budget or the shutdown deadline runs out. Every batch that leaves the
//! queue undelivered is counted with its reason and logged.

pub mod retry;

use std::sync::Arc;
use std::time::{Duration, Instant};

use opscope_processors::config::FieldError;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use retry::{Backoff, RetryConfig};

use crate::batch::Batch;
use crate::exporter::{ExportError, Exporter};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Without a queue, the exporter holds at most one batch waiting and one in
    /// flight, so the pipeline waits on it almost at once.
    pub enabled: bool,
    /// Batches the queue holds before it pushes back.
    pub queue_size: usize,
    /// Batches sent concurrently.
    pub num_consumers: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            queue_size: 1000,
            num_consumers: 10,
        }
    }
}

impl QueueConfig {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.enabled && self.queue_size == 0 {
            return Err(FieldError::new("queue_size", "must be at least 1"));
        }
        if self.enabled && self.num_consumers == 0 {
            return Err(FieldError::new("num_consumers", "must be at least 1"));
        }
        Ok(())
    }

    fn capacity_and_consumers(&self) -> (usize, usize) {
        if self.enabled {
            (self.queue_size, self.num_consumers)
        } else {
            (1, 1)
        }
    }
}

/// The longest pause a destination's `Retry-After` or retry delay can impose.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Label pairs of a self-telemetry series.
pub type Labels = Vec<(String, String)>;

/// The self-telemetry series one sending queue updates.
#[derive(Clone, Default)]
pub struct QueueMetrics {
    pub sent_items: Counter,
    pub failed_items: Family<Labels, Counter>,
    /// Labels of this queue (exporter, pipeline); `reason` is added per failure.
    pub labels: Labels,
    pub queue_size: Gauge,
    pub queue_capacity: Gauge,
}

impl QueueMetrics {
    fn count_failed(&self, reason: &str, items: u64) {
        let mut labels = self.labels.clone();
        labels.push(("reason".into(), reason.into()));
        self.failed_items.get_or_create(&labels).inc_by(items);
    }
}

/// The pipeline's end of a sending queue.
#[derive(Clone)]
pub struct QueueSender<T> {
    sender: async_channel::Sender<T>,
    queue_size: Gauge,
}

impl<T> QueueSender<T> {
    /// Waits for room in the queue, which is how a slow exporter pushes back on the
    /// pipeline. Fails only when the queue has shut down.
    pub async fn send(&self, batch: T) -> Result<(), T> {
        // Counted before it is in the queue, so a consumer's decrement never comes first.
        self.queue_size.inc();
        self.sender.send(batch).await.map_err(|err| {
            self.queue_size.dec();
            err.into_inner()
        })
    }
}

/// The running consumers of a sending queue.
pub struct SendingQueue {
    consumers: JoinSet<()>,
}

impl SendingQueue {
    /// Starts the consumers. They run until every [`QueueSender`] is dropped and the
    /// queue is empty, or until `abort` fires (then what is left is counted as
    /// dropped at shutdown).
    pub fn start<T: Batch, E: Exporter<T>>(
        name: &str,
        exporter: E,
        queue: &QueueConfig,
        retry: &RetryConfig,
        metrics: QueueMetrics,
        abort: CancellationToken,
    ) -> (QueueSender<T>, SendingQueue) {
        let (capacity, consumers) = queue.capacity_and_consumers();
        let (sender, receiver) = async_channel::bounded(capacity);
        metrics.queue_capacity.set(capacity as i64);
        let queue_size = metrics.queue_size.clone();
        let consumer = Arc::new(Consumer {
            name: name.to_string(),
            exporter,
            retry: retry.clone(),
            metrics,
            abort,
        });
        let mut set = JoinSet::new();
        for _ in 0..consumers {
            let consumer = Arc::clone(&consumer);
            let receiver = receiver.clone();
            set.spawn(async move { consumer.run(receiver).await });
        }
        (
            QueueSender { sender, queue_size },
            SendingQueue { consumers: set },
        )
    }

    /// Waits until the consumers have finished.
    pub async fn join(&mut self) {
        while self.consumers.join_next().await.is_some() {}
    }
}

struct Consumer<E> {
    name: String,
    exporter: E,
    retry: RetryConfig,
    metrics: QueueMetrics,
    abort: CancellationToken,
}

impl<E> Consumer<E> {
    async fn run<T: Batch>(&self, receiver: async_channel::Receiver<T>)
    where
        E: Exporter<T>,
    {
        while let Ok(batch) = receiver.recv().await {
            self.metrics.queue_size.dec();
            if self.abort.is_cancelled() {
                self.give_up(&batch, "shutdown", "the shutdown deadline passed");
                continue;
            }
            self.deliver(batch).await;
        }
    }

    async fn deliver<T: Batch>(&self, batch: T)
    where
        E: Exporter<T>,
    {
        let started = Instant::now();
        let mut backoff = Backoff::new(&self.retry);
        loop {
            let attempt = tokio::select! {
                result = self.exporter.export(&batch) => result,
                () = self.abort.cancelled() => {
                    return self.give_up(&batch, "shutdown", "the shutdown deadline passed during a send");
                }
            };
            let (reason, retry_after) = match attempt {
                Ok(delivery) => {
                    let items = batch.items() as u64;
                    let rejected = delivery.rejected_items.min(items);
                    self.metrics.sent_items.inc_by(items - rejected);
                    if rejected > 0 {
                        self.metrics.count_failed("rejected", rejected);
                        tracing::warn!(exporter = %self.name, rejected, message = %delivery.message,
                            "destination rejected part of a batch");
                    }
                    return;
                }
                Err(ExportError::Permanent { reason }) => {
                    return self.give_up(&batch, "permanent_error", &reason);
                }
                Err(ExportError::Retryable {
                    reason,
                    retry_after,
                }) => (reason, retry_after),
            };
            if !self.retry.enabled {
                return self.give_up(&batch, "retry_disabled", &reason);
            }
            // A destination may ask for a long pause, but not for longer than this.
            let delay = retry_after
                .map_or_else(|| backoff.next_delay(), |asked| asked.min(MAX_RETRY_AFTER));
            if self.out_of_budget(started, delay) {
                return self.give_up(&batch, "retries_exhausted", &reason);
            }
            tracing::debug!(exporter = %self.name, ?delay, %reason, "export failed, will retry");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.abort.cancelled() => {
                    return self.give_up(&batch, "shutdown", "the shutdown deadline passed while waiting to retry");
                }
            }
        }
    }

    fn out_of_budget(&self, started: Instant, delay: Duration) -> bool {
        let budget = self.retry.max_elapsed_time;
        !budget.is_zero() && started.elapsed().saturating_add(delay) > budget
    }

    fn give_up<T: Batch>(&self, batch: &T, reason: &str, detail: &str) {
        let items = batch.items() as u64;
        self.metrics.count_failed(reason, items);
        tracing::error!(exporter = %self.name, items, reason, %detail,
            "dropping {} {}", items, T::item_name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::Delivery;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use std::sync::Mutex;

    /// Answers with the scripted results in order, then succeeds.
    struct Scripted {
        script: Mutex<Vec<Result<Delivery, ExportError>>>,
        delivered: Mutex<usize>,
    }

    impl Exporter<ExportTraceServiceRequest> for Scripted {
        async fn export(&self, batch: &ExportTraceServiceRequest) -> Result<Delivery, ExportError> {
            let next = {
                let mut script = self.script.lock().unwrap();
                if script.is_empty() {
                    Ok(Delivery::default())
                } else {
                    script.remove(0)
                }
            };
            if next.is_ok() {
                *self.delivered.lock().unwrap() += batch.items();
            }
            next
        }
    }

    fn spans(n: usize) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span::default(); n],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn fast_retry() -> RetryConfig {
        RetryConfig {
            initial_interval: Duration::from_millis(1),
            max_interval: Duration::from_millis(5),
            max_elapsed_time: Duration::from_secs(5),
            ..Default::default()
        }
    }

    async fn run(
        script: Vec<Result<Delivery, ExportError>>,
        retry: RetryConfig,
    ) -> (usize, QueueMetrics) {
        let exporter = Arc::new(Scripted {
            script: Mutex::new(script),
            delivered: Mutex::new(0),
        });
        let metrics = QueueMetrics::default();
        let (sender, mut queue) = SendingQueue::start(
            "test",
            Arc::clone(&exporter),
            &QueueConfig::default(),
            &retry,
            metrics.clone(),
            CancellationToken::new(),
        );
        sender.send(spans(3)).await.unwrap();
        drop(sender);
        queue.join().await;
        let delivered = *exporter.delivered.lock().unwrap();
        (delivered, metrics)
    }

    fn failed(metrics: &QueueMetrics, reason: &str) -> u64 {
        let labels = vec![("reason".to_string(), reason.to_string())];
        metrics.failed_items.get_or_create(&labels).get()
    }

    #[tokio::test]
    async fn retryable_errors_are_retried_until_delivered() {
        let script = vec![
            Err(ExportError::retryable("unavailable")),
            Err(ExportError::retryable("unavailable")),
        ];
        let (delivered, metrics) = run(script, fast_retry()).await;
        assert_eq!(delivered, 3);
        assert_eq!(metrics.sent_items.get(), 3);
    }

    #[tokio::test]
    async fn permanent_errors_are_dropped_and_counted() {
        let (delivered, metrics) =
            run(vec![Err(ExportError::permanent("bad"))], fast_retry()).await;
        assert_eq!(delivered, 0);
        assert_eq!(failed(&metrics, "permanent_error"), 3);
    }

    #[tokio::test]
    async fn retries_stop_at_the_elapsed_time_budget() {
        let retry = RetryConfig {
            max_elapsed_time: Duration::from_millis(20),
            ..fast_retry()
        };
        let script = (0..1000)
            .map(|_| Err(ExportError::retryable("down")))
            .collect();
        let (delivered, metrics) = run(script, retry).await;
        assert_eq!(delivered, 0);
        assert_eq!(failed(&metrics, "retries_exhausted"), 3);
    }

    #[tokio::test]
    async fn partial_rejections_are_counted() {
        let script = vec![Ok(Delivery {
            rejected_items: 1,
            message: "one bad".into(),
        })];
        let (_, metrics) = run(script, fast_retry()).await;
        assert_eq!(metrics.sent_items.get(), 2);
        assert_eq!(failed(&metrics, "rejected"), 1);
    }
}
