//! What a sending queue carries: OTLP requests, and batches of signal changes for
//! the exporters that carry signals.

use opscope_processors::Telemetry;
use opscope_processors::correlator::Signal;

/// A batch that knows how many items it holds.
pub trait Batch: Send + Sync + 'static {
    /// What one item is called in logs (`spans`, `signals`).
    fn item_name() -> &'static str;
    fn items(&self) -> usize;
}

impl<T: Telemetry> Batch for T {
    fn item_name() -> &'static str {
        T::KIND.item_name()
    }

    fn items(&self) -> usize {
        self.item_count()
    }
}

/// Signal changes (firing, updated, resolved) on their way to an exporter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SignalBatch(pub Vec<Signal>);

impl Batch for SignalBatch {
    fn item_name() -> &'static str {
        "signals"
    }

    fn items(&self) -> usize {
        self.0.len()
    }
}
