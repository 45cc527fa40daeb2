//! The `correlator` processor: one correlator shared by every pipeline that lists
//! it (traces, logs and metrics all carry evidence), fed with the events of each
//! batch that passes; the batch itself passes on unchanged.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::events::{Event, Nanos};
use super::signal::Signal;
use super::{Correlator, CorrelatorConfig, CorrelatorStats};
use crate::{Processor, Telemetry};

/// Receives signal changes (firing, updated, resolved) as the correlator emits them.
pub type SignalSink = Arc<dyn Fn(Vec<Signal>) + Send + Sync>;

#[derive(Clone)]
pub struct SharedCorrelator {
    correlator: Arc<Mutex<Correlator>>,
    sink: SignalSink,
}

impl SharedCorrelator {
    pub fn new(config: CorrelatorConfig, sink: SignalSink) -> Self {
        Self {
            correlator: Arc::new(Mutex::new(Correlator::new(config))),
            sink,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Correlator> {
        // A panic while holding the lock leaves counts, not broken invariants.
        self.correlator
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Observes events and evaluates the detectors at the newest event time.
    pub fn observe(&self, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let signals = {
            let mut correlator = self.lock();
            for event in events {
                correlator.observe(event);
            }
            let now = correlator.watermark();
            correlator.advance(now)
        };
        self.emit(signals);
    }

    /// Moves event time to the wall clock when input is idle, so leak ages and
    /// resolutions progress without new data.
    pub fn tick(&self, wall_clock: Nanos) {
        let signals = {
            let mut correlator = self.lock();
            let now = correlator.watermark().max(wall_clock);
            correlator.advance(now)
        };
        self.emit(signals);
    }

    pub fn stats(&self) -> CorrelatorStats {
        self.lock().stats()
    }

    fn emit(&self, signals: Vec<Signal>) {
        if !signals.is_empty() {
            (self.sink)(signals);
        }
    }
}

impl<T: Telemetry> Processor<T> for SharedCorrelator {
    fn process(&mut self, data: T, _: Instant, out: &mut Vec<T>) {
        let mut events = Vec::new();
        data.correlator_events(&mut events);
        self.observe(events);
        out.push(data);
    }
}
