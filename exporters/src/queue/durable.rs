//! A sending queue kept on disk: batches are appended to a [`SegmentLog`] before the
//! pipeline moves on, consumers read them back in order, and a batch is marked done
//! only once delivered or given up for good. What is left at shutdown or after a
//! crash is delivered after the next start (at least once: a batch in flight when the
//! process died is sent again).

use std::marker::PhantomData;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opscope_model::repeated_warning::RepeatedWarning;
use tokio::sync::Notify;

use super::QueueMetrics;
use super::segment_log::{Fsync, LogError, Recovery, SegmentLog};
use crate::batch::Batch;

/// How long an append that failed (a full disk, say) waits before it is tried again.
const STORAGE_RETRY: Duration = Duration::from_secs(1);

/// The limits of a durable queue.
#[derive(Debug, Clone, Copy)]
pub struct DurableLimits {
    /// Batches held at most.
    pub batches: u64,
    /// Bytes of segment files at most.
    pub bytes: u64,
    pub segment_bytes: u64,
    pub fsync: Fsync,
}

pub struct DurableQueue<T> {
    name: String,
    log: Arc<Mutex<SegmentLog>>,
    limits: DurableLimits,
    /// Signalled when batches are done, so that a waiting append may find room.
    room: Notify,
    /// Signalled when a batch is appended, or the queue closes.
    arrivals: Notify,
    closed: std::sync::atomic::AtomicBool,
    metrics: QueueMetrics,
    /// A failing disk fails every append and every delivery record: said once a
    /// minute each, the rest counted in `storage_errors`.
    append_failures: Mutex<RepeatedWarning>,
    complete_failures: Mutex<RepeatedWarning>,
    _batches: PhantomData<fn() -> T>,
}

impl<T: Batch> DurableQueue<T> {
    /// Opens the queue in `dir`, with what a previous run left in it.
    pub fn open(
        name: &str,
        dir: &Path,
        limits: DurableLimits,
        metrics: QueueMetrics,
    ) -> Result<Arc<Self>, LogError> {
        let (log, recovery) = SegmentLog::open(dir, limits.segment_bytes, limits.fsync)?;
        let Recovery {
            pending,
            truncated_bytes,
            truncated_segments,
            skipped_frames,
            skipped_bytes,
            skipped_files,
        } = recovery;
        if pending > 0 || truncated_segments > 0 || skipped_frames > 0 || skipped_files > 0 {
            tracing::info!(exporter = %name, dir = %dir.display(), pending, truncated_bytes,
                truncated_segments, skipped_frames, skipped_bytes, skipped_files,
                "durable queue: delivering what the previous run left");
        }
        if truncated_segments > 0 {
            metrics.corrupt_segments.inc_by(truncated_segments);
        }
        metrics.queue_size.set(to_gauge(pending));
        Ok(Arc::new(Self {
            name: name.to_string(),
            log: Arc::new(Mutex::new(log)),
            limits,
            room: Notify::new(),
            arrivals: Notify::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
            metrics,
            append_failures: Mutex::default(),
            complete_failures: Mutex::default(),
            _batches: PhantomData,
        }))
    }

    /// Appends a batch once there is room: when this returns, the batch is in the log
    /// (and on disk with `fsync: always`). A failing disk makes it wait and try again,
    /// which pushes back on the pipeline rather than losing the batch.
    pub async fn push(&self, batch: &T) {
        let record = Arc::new(batch.to_record());
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let limits = self.limits;
            let size = record.len() as u64;
            let attempt = {
                let record = Arc::clone(&record);
                let queue_size = self.metrics.queue_size.clone();
                self.with_log(move |log| {
                    let full = log.pending() >= limits.batches
                        || (log.pending() > 0 && log.bytes() + size > limits.bytes);
                    if full {
                        return Ok(false);
                    }
                    log.append(&record)?;
                    // Set under the lock, so that sizes are set in the order they were.
                    queue_size.set(to_gauge(log.pending()));
                    Ok(true)
                })
                .await
            };
            match attempt {
                Ok(true) => {
                    self.arrivals.notify_waiters();
                    return;
                }
                Ok(false) => room.await,
                Err(error) => {
                    self.metrics.storage_errors.inc();
                    if let Some(not_logged) = occurred(&self.append_failures) {
                        tracing::error!(exporter = %self.name, %error, not_logged,
                            "durable queue: cannot append, holding the batch and trying again");
                    }
                    tokio::time::sleep(STORAGE_RETRY).await;
                }
            }
        }
    }

    /// The next batch and its sequence number, in order; `None` once the queue is
    /// closed and everything was handed out. Records that cannot be read or decoded
    /// are counted, logged and skipped.
    pub async fn next(&self) -> Option<(u64, T)> {
        loop {
            let arrival = self.arrivals.notified();
            tokio::pin!(arrival);
            arrival.as_mut().enable();
            let closed = self.closed.load(std::sync::atomic::Ordering::SeqCst);
            match self.with_log(SegmentLog::read_next).await {
                Ok(Some((sequence, record))) => match T::from_record(&record) {
                    Ok(batch) => return Some((sequence, batch)),
                    Err(error) => {
                        tracing::error!(exporter = %self.name, sequence, %error,
                            "durable queue: dropping a record that does not decode");
                        self.metrics.count_failed("undecodable", 1);
                        self.complete(sequence).await;
                    }
                },
                Ok(None) if closed => return None,
                Ok(None) => arrival.await,
                Err(error) => {
                    tracing::error!(exporter = %self.name, %error, "durable queue: skipping a record");
                    self.metrics.count_failed("unreadable", 1);
                }
            }
        }
    }

    /// Marks a batch done (delivered or given up), freeing its room.
    pub async fn complete(&self, sequence: u64) {
        let queue_size = self.metrics.queue_size.clone();
        let done = self
            .with_log(move |log| {
                log.complete(sequence)?;
                queue_size.set(to_gauge(log.pending()));
                Ok(())
            })
            .await;
        if let Err(error) = done {
            self.metrics.storage_errors.inc();
            if let Some(not_logged) = occurred(&self.complete_failures) {
                tracing::error!(exporter = %self.name, %error, not_logged,
                    "durable queue: cannot record a delivery; it may be sent again after a restart");
            }
        }
        self.room.notify_waiters();
    }

    /// Batches not yet done.
    pub async fn pending(&self) -> u64 {
        self.with_log(|log| Ok(log.pending())).await.unwrap_or(0)
    }

    /// Runs `work` on the log on a blocking thread: appends may wait for the disk.
    async fn with_log<R: Send + 'static>(
        &self,
        work: impl FnOnce(&mut SegmentLog) -> Result<R, LogError> + Send + 'static,
    ) -> Result<R, LogError> {
        let log = Arc::clone(&self.log);
        let joined = tokio::task::spawn_blocking(move || {
            let mut log = log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            work(&mut log)
        })
        .await;
        joined.unwrap_or_else(|error| {
            Err(LogError::Io {
                path: Default::default(),
                source: std::io::Error::other(error.to_string()),
            })
        })
    }
}

/// What the last sender does to a queue: no more batches will be pushed, so
/// consumers stop once the log is drained.
pub(crate) trait Close: Send + Sync {
    fn close(&self);
}

impl<T: Send + Sync> Close for DurableQueue<T> {
    fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.arrivals.notify_waiters();
    }
}

/// Whether a repeated warning is to be said now ([`RepeatedWarning::occurred`]).
fn occurred(warning: &Mutex<RepeatedWarning>) -> Option<u64> {
    let mut warning = warning
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    warning.occurred_now()
}

fn to_gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::SignalBatch;

    fn limits(batches: u64) -> DurableLimits {
        DurableLimits {
            batches,
            bytes: 1 << 30,
            segment_bytes: 1 << 20,
            fsync: Fsync::Never,
        }
    }

    #[tokio::test]
    async fn a_full_queue_makes_the_pusher_wait_until_a_batch_is_done() {
        let dir = tempfile::tempdir().unwrap();
        let queue: Arc<DurableQueue<SignalBatch>> =
            DurableQueue::open("test", dir.path(), limits(1), QueueMetrics::default()).unwrap();
        queue.push(&SignalBatch::default()).await;
        let waiting = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move { queue.push(&SignalBatch::default()).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "no room for a second batch");
        let (sequence, _) = queue.next().await.unwrap();
        queue.complete(sequence).await;
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("room after the first is done")
            .unwrap();
        assert_eq!(queue.pending().await, 1);
    }

    #[tokio::test]
    async fn consumers_end_once_closed_and_drained() {
        let dir = tempfile::tempdir().unwrap();
        let queue: Arc<DurableQueue<SignalBatch>> =
            DurableQueue::open("test", dir.path(), limits(10), QueueMetrics::default()).unwrap();
        queue.push(&SignalBatch::default()).await;
        Close::close(queue.as_ref());
        assert!(queue.next().await.is_some());
        assert!(queue.next().await.is_none());
    }
}
