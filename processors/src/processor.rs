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
            if self.processors[index].deadline().is_some_and(|d| d <= now) {
                let mut released = Vec::new();
                self.processors[index].on_deadline(now, &mut released);
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
            self.processors[index].flush(&mut released);
            done.extend(self.run_from(index + 1, released, now));
        }
        done
    }

    fn run_from(&mut self, first: usize, mut batches: Vec<T>, now: Instant) -> Vec<T> {
        for processor in &mut self.processors[first..] {
            let mut out = Vec::with_capacity(batches.len());
            for batch in batches {
                processor.process(batch, now, &mut out);
            }
            batches = out;
        }
        batches
    }
}
