//! The processor contract of the pipeline and the chain that runs processors in the
//! order a pipeline lists them.

use std::time::Instant;

/// One stage of a pipeline. Processors are synchronous and own their state; a
/// processor that holds data back (batching) asks for a wake-up with [`deadline`].
///
/// [`deadline`]: Processor::deadline
pub trait Processor<T>: Send {
    /// Takes one batch and pushes zero or more batches to `out`.
    fn process(&mut self, data: T, now: Instant, out: &mut Vec<T>);

    /// When the processor wants [`on_deadline`](Processor::on_deadline) to be called.
    fn deadline(&self) -> Option<Instant> {
        None
    }

    /// Called at or after [`deadline`](Processor::deadline).
    fn on_deadline(&mut self, _now: Instant, _out: &mut Vec<T>) {}

    /// Releases everything held back; called once at shutdown.
    fn flush(&mut self, _out: &mut Vec<T>) {}
}

/// The processors of one pipeline, in order.
pub struct ProcessorChain<T> {
    processors: Vec<Box<dyn Processor<T>>>,
}

impl<T> ProcessorChain<T> {
    pub fn new(processors: Vec<Box<dyn Processor<T>>>) -> Self {
        Self { processors }
    }

    /// Runs `data` through every processor and returns what comes out of the last.
    pub fn process(&mut self, data: T, now: Instant) -> Vec<T> {
        self.run_from(0, vec![data], now)
    }

    /// The earliest wake-up any processor asked for.
    pub fn deadline(&self) -> Option<Instant> {
        self.processors.iter().filter_map(|p| p.deadline()).min()
    }

    /// Lets every processor whose deadline has passed release its data, and passes
    /// that data through the rest of the chain.
    pub fn on_deadline(&mut self, now: Instant) -> Vec<T> {
        let mut done = Vec::new();
        for index in 0..self.processors.len() {
            let Some(processor) = self.processors.get_mut(index) else {
                break;
            };
            if processor.deadline().is_some_and(|d| d <= now) {
                let mut released = Vec::new();
                processor.on_deadline(now, &mut released);
                done.extend(self.run_from(index + 1, released, now));
            }
        }
        done
    }

    /// Flushes every processor in order, each flush passing through the rest.
    pub fn flush(&mut self, now: Instant) -> Vec<T> {
        let mut done = Vec::new();
        for index in 0..self.processors.len() {
            let mut released = Vec::new();
            if let Some(processor) = self.processors.get_mut(index) {
                processor.flush(&mut released);
            }
            done.extend(self.run_from(index + 1, released, now));
        }
        done
    }

    fn run_from(&mut self, first: usize, mut batches: Vec<T>, now: Instant) -> Vec<T> {
        for processor in self.processors.iter_mut().skip(first) {
            let mut out = Vec::with_capacity(batches.len());
            for batch in batches {
                processor.process(batch, now, &mut out);
            }
            batches = out;
        }
        batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchConfig, BatchProcessor};
    use opscope_model::telemetry::Telemetry;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_testkit::otlp_batches::traces;
    use std::time::Duration;

    /// Counts what passes through it.
    struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Processor<ExportTraceServiceRequest> for Counting {
        fn process(
            &mut self,
            data: ExportTraceServiceRequest,
            _: Instant,
            out: &mut Vec<ExportTraceServiceRequest>,
        ) {
            self.0
                .fetch_add(data.item_count(), std::sync::atomic::Ordering::SeqCst);
            out.push(data);
        }
    }

    #[test]
    fn data_released_at_a_deadline_passes_through_the_rest_of_the_chain() {
        let seen = std::sync::Arc::default();
        let batch = BatchProcessor::new(BatchConfig {
            send_batch_size: 100,
            send_batch_max_size: 0,
            timeout: Duration::from_millis(10),
        });
        let mut chain = ProcessorChain::new(vec![
            Box::new(batch),
            Box::new(Counting(std::sync::Arc::clone(&seen))),
        ]);
        let start = Instant::now();
        assert!(chain.process(traces(1, 3), start).is_empty());
        assert_eq!(chain.deadline(), Some(start + Duration::from_millis(10)));
        assert!(chain.on_deadline(start).is_empty(), "not due yet");
        let released = chain.on_deadline(start + Duration::from_millis(10));
        assert_eq!(released.iter().map(Telemetry::item_count).sum::<usize>(), 3);
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(chain.deadline(), None);
    }

    #[test]
    fn flush_empties_every_processor() {
        let batch = BatchProcessor::new(BatchConfig::default());
        let mut chain: ProcessorChain<ExportTraceServiceRequest> =
            ProcessorChain::new(vec![Box::new(batch)]);
        let now = Instant::now();
        chain.process(traces(2, 2), now);
        assert_eq!(
            chain
                .flush(now)
                .iter()
                .map(Telemetry::item_count)
                .sum::<usize>(),
            4
        );
        assert!(chain.flush(now).is_empty());
    }
}
