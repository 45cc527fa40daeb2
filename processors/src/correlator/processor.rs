//! The `correlator` processor: one correlator shared by every pipeline that lists
//! it (traces, logs and metrics all carry evidence), fed with the events of each
//! batch that passes; the batch itself passes on unchanged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use opscope_model::Telemetry;
use opscope_model::signal::Signal;
use opscope_model::timestamp::{Nanos, now_unix_nanos};

use super::events::Event;
use super::extract::CorrelatorEvents;
use super::{Correlator, CorrelatorConfig, CorrelatorStats};
use crate::Processor;

/// Receives signal changes (firing, updated, resolved) as the correlator emits them.
pub type SignalSink = Arc<dyn Fn(Vec<Signal>) + Send + Sync>;

#[derive(Clone)]
pub struct SharedCorrelator {
    correlator: Arc<Mutex<Correlator>>,
    sink: SignalSink,
    /// How far event time may lag the wall clock, and lead it.
    lateness: u64,
    future_events: Arc<AtomicU64>,
}

impl SharedCorrelator {
    pub fn new(config: CorrelatorConfig, sink: SignalSink) -> Self {
        Self {
            lateness: u64::try_from(config.lateness.as_nanos()).unwrap_or(u64::MAX),
            correlator: Arc::new(Mutex::new(Correlator::new(config))),
            sink,
            future_events: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Correlator> {
        // A panic while holding the lock leaves counts, not broken invariants.
        self.correlator
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Observes events and evaluates the detectors at the newest event time. An
    /// event dated beyond the wall clock by more than the lateness is dropped and
    /// counted: taking it would move event time ahead and make every later event late.
    pub fn observe(&self, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let horizon = now_unix_nanos().saturating_add(self.lateness);
        let signals = {
            let mut correlator = self.lock();
            for event in events {
                if event.time() > horizon {
                    self.future_events.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                correlator.observe(event);
            }
            let now = correlator.watermark();
            correlator.advance(now)
        };
        self.emit(signals);
    }

    /// Moves event time along with the wall clock, less the lateness, so leak ages and
    /// resolutions progress without new data while data that arrives late within the
    /// lateness still counts.
    pub fn tick(&self, wall_clock: Nanos) {
        let signals = {
            let mut correlator = self.lock();
            let now = correlator
                .watermark()
                .max(wall_clock.saturating_sub(self.lateness));
            correlator.advance(now)
        };
        self.emit(signals);
    }

    pub fn stats(&self) -> CorrelatorStats {
        CorrelatorStats {
            future_events_dropped: self.future_events.load(Ordering::Relaxed),
            ..self.lock().stats()
        }
    }

    fn emit(&self, signals: Vec<Signal>) {
        if !signals.is_empty() {
            (self.sink)(signals);
        }
    }
}

impl<T: Telemetry + CorrelatorEvents> Processor<T> for SharedCorrelator {
    fn process(&mut self, data: T, _: Instant, out: &mut Vec<T>) {
        // Records give one or two events each, and events are large: growing the
        // vector would copy them again and again.
        let mut events = Vec::with_capacity(data.item_count().saturating_mul(2));
        data.correlator_events(&mut events);
        self.observe(events);
        out.push(data);
    }
}
