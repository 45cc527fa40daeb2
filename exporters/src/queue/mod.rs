//! The sending queue in front of every exporter: a bounded in-memory queue drained by
//! a few consumers, each retrying its batch until it is delivered, refused for good,
//! or the retry budget or the shutdown deadline runs out. Every batch that leaves the
//! queue undelivered is counted with its reason and logged.

pub mod durable;
pub mod retry;
pub use opscope_storage::segment_log;
pub mod shedding;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use opscope_model::config::{FieldError, Validate, count_in, storage_directory};
use opscope_model::memory::{MemoryAccount, MemoryHold};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

pub use durable::{DurableLimits, DurableQueue};
pub use retry::{Backoff, RetryConfig};
pub use segment_log::{Fsync, LogError};
pub use shedding::{Shed, SheddableQueue};

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
    /// A directory to keep the queue in, so that it survives restarts and crashes;
    /// in memory when absent.
    pub storage: Option<PathBuf>,
    /// When a durable queue forces its writes to disk.
    pub fsync: FsyncPolicy,
    /// The most a crash can lose with `fsync: interval`.
    #[serde(deserialize_with = "opscope_model::config::duration")]
    pub fsync_interval: Duration,
    /// Disk a durable queue may use.
    pub max_size_mib: u64,
    /// Segment files are this large before the next one starts.
    pub segment_size_mib: u64,
    /// `durable`: a receiver answers only once the batch is in this queue (on disk
    /// for a durable queue); `enqueued`: once the pipeline took it.
    pub ack: AckPolicy,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            queue_size: 1000,
            num_consumers: 10,
            storage: None,
            fsync: FsyncPolicy::Interval,
            fsync_interval: Duration::from_secs(1),
            max_size_mib: 1024,
            segment_size_mib: 8,
            ack: AckPolicy::Enqueued,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    Always,
    Interval,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckPolicy {
    Durable,
    Enqueued,
}

impl QueueConfig {
    /// Whether receivers wait for this queue before they answer.
    pub fn acknowledges_durably(&self) -> bool {
        self.ack == AckPolicy::Durable
    }

    fn durable_limits(&self) -> DurableLimits {
        const MIB: u64 = 1024 * 1024;
        DurableLimits {
            batches: self.queue_size as u64,
            bytes: self.max_size_mib.saturating_mul(MIB),
            segment_bytes: self.segment_size_mib.saturating_mul(MIB),
            fsync: match self.fsync {
                FsyncPolicy::Always => Fsync::Always,
                FsyncPolicy::Interval => Fsync::Interval(self.fsync_interval),
                FsyncPolicy::Never => Fsync::Never,
            },
        }
    }

    fn capacity_and_consumers(&self) -> (usize, usize) {
        if self.enabled {
            (self.queue_size, self.num_consumers)
        } else {
            (1, 1)
        }
    }
}

impl Validate for QueueConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.enabled && self.queue_size == 0 {
            return Err(FieldError::new("queue_size", "must be at least 1"));
        }
        if self.enabled {
            count_in("num_consumers", self.num_consumers, 1..=MAX_CONSUMERS)?;
        }
        if let Some(storage) = &self.storage {
            storage_directory("storage", storage)?;
        }
        if self.storage.is_some() && !self.enabled {
            return Err(FieldError::new("storage", "needs the queue enabled"));
        }
        if self.ack == AckPolicy::Durable && self.storage.is_none() {
            return Err(FieldError::new(
                "ack",
                "durable needs storage (a directory for the queue)",
            ));
        }
        if self.max_size_mib == 0 {
            return Err(FieldError::new("max_size_mib", "must be at least 1"));
        }
        if self.segment_size_mib == 0 || self.segment_size_mib > self.max_size_mib {
            return Err(FieldError::new(
                "segment_size_mib",
                "must be at least 1 and at most max_size_mib",
            ));
        }
        if self.fsync == FsyncPolicy::Interval && self.fsync_interval.is_zero() {
            return Err(FieldError::new("fsync_interval", "must be longer than 0"));
        }
        Ok(())
    }
}

/// The most consumers a queue runs. Each is a task with a batch and a request in
/// flight; a thousand already outnumber the connections a destination takes, and a
/// million were a million tasks spinning on an empty queue.
const MAX_CONSUMERS: usize = 1024;

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
    /// Durable queue: segments found with a torn or corrupt tail at start.
    pub corrupt_segments: Counter,
    /// Durable queue: failed disk operations.
    pub storage_errors: Counter,
}

impl QueueMetrics {
    fn count_failed(&self, reason: &str, items: u64) {
        let mut labels = self.labels.clone();
        labels.push(("reason".into(), reason.into()));
        self.failed_items.get_or_create(&labels).inc_by(items);
    }
}

/// Where a sending queue keeps its batches.
pub enum QueueStore<'a> {
    /// In memory, counted in this account (the process's) while queued.
    Memory(&'a MemoryAccount),
    /// On disk in this directory (within the configured storage).
    Disk(&'a Path),
}

/// A batch in an in-memory queue, with its bytes counted until it leaves.
pub(crate) struct Queued<T> {
    pub(crate) batch: T,
    pub(crate) hold: MemoryHold,
}

/// The pipeline's end of a sending queue.
pub struct QueueSender<T> {
    inner: SenderKind<T>,
}

impl<T> Clone for QueueSender<T> {
    fn clone(&self) -> Self {
        let inner = match &self.inner {
            SenderKind::Memory {
                sender,
                queue_size,
                account,
            } => SenderKind::Memory {
                sender: sender.clone(),
                queue_size: queue_size.clone(),
                account: account.clone(),
            },
            SenderKind::Durable { queue, closer } => SenderKind::Durable {
                queue: Arc::clone(queue),
                closer: Arc::clone(closer),
            },
        };
        Self { inner }
    }
}

enum SenderKind<T> {
    Memory {
        sender: async_channel::Sender<Queued<T>>,
        queue_size: Gauge,
        /// This queue's share of the process's account.
        account: MemoryAccount,
    },
    Durable {
        queue: Arc<DurableQueue<T>>,
        closer: Arc<CloseOnDrop>,
    },
}

/// Closes a durable queue when the last sender is dropped.
struct CloseOnDrop(Arc<dyn durable::Close>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl<T: Batch> QueueSender<T> {
    /// Waits for room in the queue, which is how a slow exporter pushes back on the
    /// pipeline; a durable queue has the batch in its log when this returns. Fails
    /// only when the queue has shut down.
    pub async fn send(&self, batch: T) -> Result<(), T> {
        match &self.inner {
            SenderKind::Memory {
                sender,
                queue_size,
                account,
            } => {
                // Counted before it is in the queue, so a consumer's decrement never comes first.
                queue_size.inc();
                let hold = account.hold(account.size_of(|| batch.memory_size()));
                sender.send(Queued { batch, hold }).await.map_err(|err| {
                    queue_size.dec();
                    err.into_inner().batch
                })
            }
            SenderKind::Durable { queue, .. } => {
                queue.push(&batch).await;
                Ok(())
            }
        }
    }
}

/// Where the consumers take batches from.
enum Source<T: Batch> {
    Memory(async_channel::Receiver<Queued<T>>),
    Durable(Arc<DurableQueue<T>>),
}

impl<T: Batch> Clone for Source<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Memory(receiver) => Self::Memory(receiver.clone()),
            Self::Durable(queue) => Self::Durable(Arc::clone(queue)),
        }
    }
}

/// The running consumers of a sending queue.
pub struct SendingQueue {
    /// The exporter the consumers send with.
    exporter: String,
    consumers: JoinSet<()>,
    /// The memory limiter's handle on an in-memory queue.
    sheddable: Option<Arc<dyn SheddableQueue>>,
}

impl SendingQueue {
    /// Starts the consumers. They run until every [`QueueSender`] is dropped and the
    /// queue is empty, or until `abort` fires (then what is left of an in-memory queue
    /// is counted as dropped at shutdown; a durable queue keeps it for the next start).
    /// Opening a durable queue fails only on disk errors.
    pub fn start<T: Batch, E: Exporter<T>>(
        name: &str,
        exporter: E,
        queue: &QueueConfig,
        retry: &RetryConfig,
        metrics: QueueMetrics,
        abort: CancellationToken,
        store: QueueStore<'_>,
    ) -> Result<(QueueSender<T>, SendingQueue), LogError> {
        let (capacity, consumers) = queue.capacity_and_consumers();
        metrics.queue_capacity.set(capacity as i64);
        let mut sheddable: Option<Arc<dyn SheddableQueue>> = None;
        let (inner, source) = match store {
            QueueStore::Disk(dir) => {
                let durable =
                    DurableQueue::open(name, dir, queue.durable_limits(), metrics.clone())?;
                let closer = Arc::new(CloseOnDrop(durable.clone()));
                let sender = SenderKind::Durable {
                    queue: Arc::clone(&durable),
                    closer,
                };
                (sender, Source::Durable(durable))
            }
            QueueStore::Memory(process) => {
                let (sender, receiver) = async_channel::bounded(capacity);
                let account = process.sub_account();
                sheddable = Some(Arc::new(shedding::MemoryQueue {
                    receiver: receiver.clone(),
                    account: account.clone(),
                    metrics: metrics.clone(),
                }));
                let queue_size = metrics.queue_size.clone();
                let sender = SenderKind::Memory {
                    sender,
                    queue_size,
                    account,
                };
                (sender, Source::Memory(receiver))
            }
        };
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
            let source = source.clone();
            set.spawn(async move { consumer.run(source).await });
        }
        let running = SendingQueue {
            exporter: name.to_string(),
            consumers: set,
            sheddable,
        };
        Ok((QueueSender { inner }, running))
    }

    /// What the memory limiter may drop from, for an in-memory queue.
    pub fn sheddable(&self) -> Option<Arc<dyn SheddableQueue>> {
        self.sheddable.clone()
    }

    /// Waits until the consumers have finished.
    pub async fn join(&mut self) {
        while self.consumers.join_next().await.is_some() {}
    }

    /// The exporter the queue's consumers send with.
    pub fn exporter(&self) -> &str {
        &self.exporter
    }

    /// Polls for a consumer that panicked: ready with its error once one has, for the
    /// agent to stop rather than take data no consumer will send. A consumer that ends
    /// by itself (every sender gone, the queue drained) is passed over.
    pub fn poll_panicked(&mut self, cx: &mut Context<'_>) -> Poll<JoinError> {
        while let Poll::Ready(Some(ended)) = self.consumers.poll_join_next(cx) {
            if let Err(error) = ended
                && error.is_panic()
            {
                return Poll::Ready(error);
            }
        }
        Poll::Pending
    }
}

/// How one batch's delivery ended.
enum Delivered {
    /// Delivered, or given up for good (counted), whole or in parts.
    Done,
    /// Cut short by the shutdown deadline, with `items` not delivered yet.
    Interrupted { detail: &'static str, items: u64 },
}

/// How sending one batch, or one part of a batch, ended.
enum Sent {
    /// Delivered, or given up for good (counted).
    Done,
    /// Refused for its size: it may pass in parts.
    TooLarge(String),
    Interrupted(&'static str),
}

/// A request refused for its size is cut in halves, but not below this: no OTLP
/// destination's limit is so low, so such a refusal is about something else (a
/// quota), and cutting further would only multiply the requests.
const MIN_CUT_SIZE: usize = 64 * 1024;

struct Consumer<E> {
    name: String,
    exporter: E,
    retry: RetryConfig,
    metrics: QueueMetrics,
    abort: CancellationToken,
}

impl<E> Consumer<E> {
    async fn run<T: Batch>(&self, source: Source<T>)
    where
        E: Exporter<T>,
    {
        match source {
            Source::Memory(receiver) => {
                // The batch's bytes stay counted until it is delivered or given up.
                while let Ok(Queued { batch, hold: _hold }) = receiver.recv().await {
                    self.metrics.queue_size.dec();
                    if self.abort.is_cancelled() {
                        self.give_up(&batch, "shutdown", "the shutdown deadline passed");
                        continue;
                    }
                    if let Delivered::Interrupted { detail, items } = self.deliver(&batch).await {
                        self.give_up_items::<T>(items, "shutdown", detail);
                    }
                }
            }
            Source::Durable(queue) => self.run_durable(&queue).await,
        }
    }

    /// Delivers from a durable queue until it is drained and closed, or until the
    /// shutdown deadline: then what is left stays on disk for the next start.
    async fn run_durable<T: Batch>(&self, queue: &DurableQueue<T>)
    where
        E: Exporter<T>,
    {
        loop {
            let next = tokio::select! {
                next = queue.next() => next,
                () = self.abort.cancelled() => None,
            };
            let Some((sequence, batch)) = next else {
                break;
            };
            // An interrupted batch stays whole in the log: the parts of it already
            // delivered are sent again at the next start (at least once).
            match self.deliver(&batch).await {
                Delivered::Done => queue.complete(sequence).await,
                Delivered::Interrupted { .. } => break,
            }
        }
        if self.abort.is_cancelled() {
            let kept = queue.pending().await;
            if kept > 0 {
                tracing::warn!(exporter = %self.name, batches = kept,
                    "shutdown deadline: undelivered batches stay in the durable queue for the next start");
            }
        }
    }

    /// Delivers one batch: whole, or in parts when it is over the exporter's
    /// `max_request_size` or the destination refuses it for its size. Each part is
    /// retried on its own, within the batch's one retry budget, so a part delivered
    /// is never sent again because another failed.
    async fn deliver<T: Batch>(&self, batch: &T) -> Delivered
    where
        E: Exporter<T>,
    {
        let started = Instant::now();
        let limit = self.exporter.max_request_size();
        let mut pending = match limit {
            Some(max) if batch.request_size() > max => self.cut(batch, max),
            _ => match self.send(batch, started).await {
                Sent::Done => return Delivered::Done,
                Sent::Interrupted(detail) => {
                    let items = batch.items() as u64;
                    return Delivered::Interrupted { detail, items };
                }
                Sent::TooLarge(reason) => self.cut_refused(batch, &reason),
            },
        };
        // A stack: the next part to send is last.
        pending.reverse();
        while let Some(part) = pending.pop() {
            match self.send(&part, started).await {
                Sent::Done => {}
                Sent::Interrupted(detail) => {
                    let items = part.items() + pending.iter().map(Batch::items).sum::<usize>();
                    return Delivered::Interrupted {
                        detail,
                        items: items as u64,
                    };
                }
                Sent::TooLarge(reason) => {
                    pending.extend(self.cut_refused(&part, &reason).into_iter().rev());
                }
            }
        }
        Delivered::Done
    }

    /// The parts of a batch over `max` request bytes; an item over it alone is given
    /// up (counted as `too_large`), as is a batch that cannot be cut.
    fn cut<T: Batch>(&self, batch: &T, max: usize) -> Vec<T> {
        let parts = match batch.cut(max) {
            Ok(parts) => parts,
            Err(detail) => {
                self.give_up(
                    batch,
                    "permanent_error",
                    &format!("cannot cut the batch: {detail}"),
                );
                return Vec::new();
            }
        };
        tracing::debug!(exporter = %self.name, size = batch.request_size(), max, parts = parts.len(),
            "batch over max_request_size sent in parts");
        parts
            .into_iter()
            .filter(|part| {
                let size = part.request_size();
                if size <= max {
                    return true;
                }
                let detail =
                    format!("one item makes a request of {size} bytes, over the limit of {max}");
                self.give_up(part, "too_large", &detail);
                false
            })
            .collect()
    }

    /// The parts a batch refused for its size is sent again in: halves, down to a
    /// single item, which is given up (counted as `too_large`).
    fn cut_refused<T: Batch>(&self, batch: &T, reason: &str) -> Vec<T> {
        let size = batch.request_size();
        if batch.items() <= 1 {
            self.give_up(batch, "too_large", reason);
            return Vec::new();
        }
        if size < MIN_CUT_SIZE {
            let detail = format!("{reason} (a request of {size} bytes is not cut further)");
            self.give_up(batch, "permanent_error", &detail);
            return Vec::new();
        }
        tracing::warn!(exporter = %self.name, size, %reason,
            "the destination refused a request for its size; sending it in halves");
        match batch.cut(size / 2) {
            Ok(parts) => parts,
            Err(detail) => {
                self.give_up(
                    batch,
                    "permanent_error",
                    &format!("cannot cut the batch: {detail}"),
                );
                Vec::new()
            }
        }
    }

    /// Sends one batch until it is delivered, given up for good, refused for its
    /// size, or interrupted by the shutdown deadline.
    async fn send<T: Batch>(&self, batch: &T, started: Instant) -> Sent
    where
        E: Exporter<T>,
    {
        let mut backoff = Backoff::new(&self.retry);
        loop {
            let attempt = tokio::select! {
                result = self.exporter.export(batch) => result,
                () = self.abort.cancelled() => {
                    return Sent::Interrupted("the shutdown deadline passed during a send");
                }
            };
            let (reason, retry_after) = match attempt {
                Ok(delivery) => {
                    let items = batch.items() as u64;
                    let rejected = delivery.rejected_items.min(items);
                    self.metrics.sent_items.inc_by(items - rejected);
                    if rejected > 0 {
                        let reason = delivery.rejected_reason.unwrap_or("rejected");
                        self.metrics.count_failed(reason, rejected);
                        tracing::warn!(exporter = %self.name, rejected, reason, message = %delivery.message,
                            "destination rejected part of a batch");
                    }
                    return Sent::Done;
                }
                Err(ExportError::Permanent { reason }) => {
                    self.give_up(batch, "permanent_error", &reason);
                    return Sent::Done;
                }
                Err(ExportError::TooLarge { reason }) => return Sent::TooLarge(reason),
                Err(ExportError::Retryable {
                    reason,
                    retry_after,
                }) => (reason, retry_after),
            };
            if !self.retry.enabled {
                self.give_up(batch, "retry_disabled", &reason);
                return Sent::Done;
            }
            // A destination may ask for a long pause, but not for longer than this.
            let delay = retry_after
                .map_or_else(|| backoff.next_delay(), |asked| asked.min(MAX_RETRY_AFTER));
            if self.out_of_budget(started, delay) {
                self.give_up(batch, "retries_exhausted", &reason);
                return Sent::Done;
            }
            tracing::debug!(exporter = %self.name, ?delay, %reason, "export failed, will retry");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.abort.cancelled() => {
                    return Sent::Interrupted("the shutdown deadline passed while waiting to retry");
                }
            }
        }
    }

    fn out_of_budget(&self, started: Instant, delay: Duration) -> bool {
        let budget = self.retry.max_elapsed_time;
        !budget.is_zero() && started.elapsed().saturating_add(delay) > budget
    }

    fn give_up<T: Batch>(&self, batch: &T, reason: &str, detail: &str) {
        self.give_up_items::<T>(batch.items() as u64, reason, detail);
    }

    fn give_up_items<T: Batch>(&self, items: u64, reason: &str, detail: &str) {
        self.metrics.count_failed(reason, items);
        tracing::error!(exporter = %self.name, items, reason, %detail,
            "dropping {} {}", items, T::item_name());
    }
}

#[cfg(test)]
mod tests;
