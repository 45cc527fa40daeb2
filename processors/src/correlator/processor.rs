//! The `correlator` processor: one correlator shared by every pipeline that lists
//! it (traces, logs and metrics all carry evidence), fed with the events of each
//! batch that passes; the batch itself passes on unchanged. With `storage`, each
//! batch is journaled first, and the journal is taken again at start.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Instant;

use opscope_model::Telemetry;
use opscope_model::kubernetes::ObjectKey;
use opscope_model::signal::{Signal, SignalState};
use opscope_model::timestamp::{Nanos, now_unix_nanos};
use opscope_storage::LogError;

use crate::Processor;
use crate::correlator::intake::events::Event;
use crate::correlator::intake::extract::CorrelatorEvents;
use crate::correlator::lifecycle::journal::{Journal, Journaled};
use crate::correlator::lifecycle::tick::tick_time;
use crate::correlator::{Correlator, CorrelatorConfig, CorrelatorStats};

/// Receives signal changes (firing, updated, resolved) as the correlator emits them.
pub type SignalSink = Arc<dyn Fn(Vec<Signal>) + Send + Sync>;

#[derive(Clone)]
pub struct SharedCorrelator {
    correlator: Arc<Mutex<Correlator>>,
    sink: SignalSink,
    /// How far event time may lag the wall clock, and lead it.
    lateness: u64,
    future_events: Arc<AtomicU64>,
    journal: Option<Arc<Mutex<Journal>>>,
    /// Which objects this correlator owns, once a gateway's ring says so.
    ownership: Arc<RwLock<Option<Ownership>>>,
}

/// Whether the object of a key is this correlator's (a gateway's, by its ring).
pub type Ownership = Arc<dyn Fn(&ObjectKey) -> bool + Send + Sync>;

impl SharedCorrelator {
    /// A correlator that keeps no journal, whatever `config.storage` says.
    pub fn new(config: CorrelatorConfig, sink: SignalSink) -> Self {
        Self {
            lateness: u64::try_from(config.lateness.as_nanos()).unwrap_or(u64::MAX),
            correlator: Arc::new(Mutex::new(Correlator::new(config))),
            sink,
            future_events: Arc::default(),
            journal: None,
            ownership: Arc::default(),
        }
    }

    /// The correlator of `config`; with `storage`, it first takes again what its
    /// journal holds (a previous run's batches within the correlator's horizon) and
    /// then emits each signal that is firing at the end of it once, so that a
    /// restarted process raises again what it had raised, as one more `firing`.
    pub fn open(config: CorrelatorConfig, sink: SignalSink) -> Result<Self, LogError> {
        let storage = config.storage.clone();
        let horizon = config.horizon();
        let mut correlator = Self::new(config, sink);
        if let Some(storage) = storage {
            let started = Instant::now();
            let (journal, batches) = Journal::open(&storage, horizon, now_unix_nanos())?;
            let replayed = batches.len();
            let firing = correlator.replay(batches);
            tracing::info!(directory = %storage.directory.display(), batches = replayed,
                firing = firing.len(), elapsed = ?started.elapsed(),
                "correlator: state rebuilt from its journal");
            correlator.emit(firing);
            correlator.journal = Some(Arc::new(Mutex::new(journal)));
        }
        Ok(correlator)
    }

    /// Takes journaled batches, oldest first, as they were taken live; returns the
    /// signals firing at the end (their last change, once each).
    fn replay(&self, batches: Vec<Journaled>) -> Vec<Signal> {
        let mut last: BTreeMap<String, Signal> = BTreeMap::new();
        let mut correlator = self.lock();
        let mut events = Vec::new();
        for batch in batches {
            let handed_over = match &batch {
                Journaled::Traces(traces) => {
                    traces.correlator_events(&mut events);
                    traces.handed_over()
                }
                Journaled::Logs(logs) => {
                    logs.correlator_events(&mut events);
                    logs.handed_over()
                }
                Journaled::Metrics(metrics) => {
                    metrics.correlator_events(&mut events);
                    false
                }
            };
            for event in events.drain(..) {
                if handed_over {
                    correlator.observe_handed_over(event);
                } else {
                    correlator.observe(event);
                }
            }
            let now = correlator.watermark();
            for signal in correlator.advance(now) {
                last.insert(signal.id.clone(), signal);
            }
        }
        last.into_values()
            .filter(|signal| signal.state == SignalState::Firing)
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Correlator> {
        // A panic while holding the lock leaves counts, not broken invariants.
        self.correlator
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes events of objects another correlator owned before, whatever their age,
    /// and evaluates the detectors.
    pub fn observe_handed_over(&self, events: Vec<Event>) {
        let signals = {
            let mut correlator = self.lock();
            for event in events {
                correlator.observe_handed_over(event);
            }
            let now = correlator.watermark();
            correlator.advance(now)
        };
        self.emit(signals);
    }

    /// Forgets, without resolving their signals, the objects `keep` says no to (their
    /// new owner carries them on); returns how many.
    pub fn release(&self, keep: impl FnMut(&ObjectKey) -> bool) -> usize {
        self.lock().release(keep)
    }

    /// Up to `limit` batches of the journal from sequence number `first` on, oldest
    /// first (none without `storage`): what to hand over to the new owners of the
    /// objects let go. Read a few at a time, so that appends wait little.
    pub fn journaled(&self, first: u64, limit: usize) -> Vec<(u64, Journaled)> {
        match &self.journal {
            Some(journal) => journal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .read_kept(first, limit),
            None => Vec::new(),
        }
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

    /// Moves event time along with the wall clock, less the lateness (see
    /// [`Ticker`](crate::correlator::Ticker)), and emits what that fires or resolves.
    pub fn tick(&self, wall_clock: Nanos) {
        let signals = {
            let mut correlator = self.lock();
            let now = tick_time(correlator.watermark(), wall_clock, self.lateness);
            correlator.advance(now)
        };
        self.emit(signals);
    }

    pub fn stats(&self) -> CorrelatorStats {
        let journal = self.journal.as_ref().map(|journal| {
            journal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .stats()
        });
        CorrelatorStats {
            future_events_dropped: self.future_events.load(Ordering::Relaxed),
            journal: journal.unwrap_or_default(),
            ..self.lock().stats()
        }
    }

    /// From now on, a `resolved` of an object `owns` says no to is not sent: records
    /// still routed here by agents that have not resolved the new ring yet may make
    /// an object this gateway let go fire again here (one duplicate `firing`), and
    /// its end must not resolve what the new owner keeps firing.
    pub fn own(&self, owns: Ownership) {
        *self
            .ownership
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(owns);
    }

    fn emit(&self, mut signals: Vec<Signal>) {
        if let Some(owns) = self
            .ownership
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            signals.retain(|signal| {
                signal.state != SignalState::Resolved
                    || !signal.object.is_known()
                    || owns(&signal.object.key())
            });
        }
        if !signals.is_empty() {
            (self.sink)(signals);
        }
    }
}

impl<T: Telemetry + CorrelatorEvents> Processor<T> for SharedCorrelator {
    fn process(&mut self, data: T, _: Instant, out: &mut Vec<T>) {
        if let Some(journal) = &self.journal {
            // Written from the pipeline's task: one write(2) into the page cache, the
            // fsync every second is the log's.
            journal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .append(&data, now_unix_nanos());
        }
        // Records give one or two events each, and events are large: growing the
        // vector would copy them again and again.
        let mut events = Vec::with_capacity(data.item_count().saturating_mul(2));
        data.correlator_events(&mut events);
        if data.handed_over() {
            self.observe_handed_over(events);
        } else {
            self.observe(events);
        }
        out.push(data);
    }
}
