//! The memory limiter's last resort: dropping batches from in-memory sending queues,
//! oldest first, when the process is over its hard memory limit. Durable queues keep
//! their batches on disk and are never shed.

use std::sync::Arc;

use opscope_model::memory::MemoryAccount;

use super::{QueueMetrics, Queued};
use crate::batch::Batch;

/// The reason label of what shedding drops.
pub const MEMORY_LIMIT: &str = "memory_limit";

/// What one round of shedding dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shed {
    pub batches: u64,
    pub items: u64,
    pub bytes: u64,
}

/// An in-memory sending queue as the memory limiter sees it.
pub trait SheddableQueue: Send + Sync {
    /// Bytes of the batches waiting in the queue.
    fn held_bytes(&self) -> u64;

    /// Drops the queue's oldest batch, counted as failed with reason `memory_limit`;
    /// `None` when the queue is empty.
    fn shed_oldest(&self) -> Option<Shed>;
}

/// Drops batches until `bytes` are freed or the queues are empty, each time the
/// oldest batch of the queue holding the most: the queue that fell furthest behind
/// pays first, and queues that keep up keep their data.
pub fn shed(queues: &[Arc<dyn SheddableQueue>], bytes: u64) -> Shed {
    let mut total = Shed::default();
    while total.bytes < bytes {
        let fullest = queues
            .iter()
            .filter(|queue| queue.held_bytes() > 0)
            .max_by_key(|queue| queue.held_bytes());
        let Some(dropped) = fullest.and_then(|queue| queue.shed_oldest()) else {
            break;
        };
        total.batches += dropped.batches;
        total.items += dropped.items;
        total.bytes += dropped.bytes;
    }
    total
}

/// The limiter's handle on one in-memory queue: a receiver like the consumers'.
pub(crate) struct MemoryQueue<T> {
    pub(crate) receiver: async_channel::Receiver<Queued<T>>,
    pub(crate) account: MemoryAccount,
    pub(crate) metrics: QueueMetrics,
}

impl<T: Batch> SheddableQueue for MemoryQueue<T> {
    fn held_bytes(&self) -> u64 {
        self.account.bytes()
    }

    fn shed_oldest(&self) -> Option<Shed> {
        let queued = self.receiver.try_recv().ok()?;
        self.metrics.queue_size.dec();
        let items = queued.batch.items() as u64;
        self.metrics.count_failed(MEMORY_LIMIT, items);
        Some(Shed {
            batches: 1,
            items,
            bytes: queued.hold.bytes(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};

    type Sender = async_channel::Sender<Queued<ExportTraceServiceRequest>>;

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

    /// A queue holding one batch of 2 spans per size given, oldest first.
    fn queue(
        process: &MemoryAccount,
        sizes: &[u64],
    ) -> (Arc<dyn SheddableQueue>, Sender, QueueMetrics, MemoryAccount) {
        let (sender, receiver) = async_channel::unbounded();
        let account = process.sub_account();
        let metrics = QueueMetrics::default();
        for &size in sizes {
            metrics.queue_size.inc();
            let queued = Queued {
                batch: spans(2),
                hold: account.hold(size),
            };
            sender.try_send(queued).unwrap();
        }
        let shed: Arc<dyn SheddableQueue> = Arc::new(MemoryQueue {
            receiver,
            account: account.clone(),
            metrics: metrics.clone(),
        });
        (shed, sender, metrics, account)
    }

    #[test]
    fn the_fullest_queue_sheds_its_oldest_batches_first() {
        let process = MemoryAccount::default();
        let (behind, _open, behind_metrics, behind_account) = queue(&process, &[300, 200, 100]);
        let (keeping_up, _also_open, _, keeping_up_account) = queue(&process, &[150]);
        assert_eq!(process.bytes(), 750);

        let dropped = shed(&[Arc::clone(&keeping_up), Arc::clone(&behind)], 400);
        assert_eq!(dropped.batches, 2, "300 then 200 (still the fullest queue)");
        assert_eq!((dropped.items, dropped.bytes), (4, 500));
        assert_eq!(behind_account.bytes(), 100);
        assert_eq!(keeping_up_account.bytes(), 150);
        assert_eq!(process.bytes(), 250);
        assert_eq!(behind_metrics.queue_size.get(), 1);
        let failed = behind_metrics
            .failed_items
            .get_or_create(&vec![("reason".into(), MEMORY_LIMIT.into())])
            .get();
        assert_eq!(failed, 4);

        let rest = shed(&[keeping_up, behind], u64::MAX);
        assert_eq!((rest.batches, rest.bytes), (2, 250));
        assert_eq!(process.bytes(), 0);
    }
}
