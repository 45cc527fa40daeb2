//! The `correlator` processor: one correlator shared by every pipeline that lists
//! it (traces, logs and metrics all carry evidence), fed with the events of each
//! batch that passes; the batch itself passes on unchanged. With `storage`, each
//! batch is journaled first (but a hand-over), and the journal is taken again at
//! start, a batch at a time, under the same checks as live batches.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Instant;

use opscope_model::Telemetry;
use opscope_model::kubernetes::ObjectKey;
use opscope_model::signal::{Signal, SignalState};
use opscope_model::timestamp::{Nanos, now_unix_nanos};
use opscope_storage::LogError;

use crate::Processor;
use crate::correlator::intake::events::Event;
use crate::correlator::intake::extract::{CorrelatorEvents, Origin};
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
    journal_id: Option<u64>,
    /// The last sequence number journaled here of each other journal whose batches
    /// were handed over.
    journaled_through: Arc<Mutex<HashMap<u64, u64>>>,
    /// Set from [`open`](Self::open) until the journal is taken again: the ticker
    /// must not move event time past what is being replayed.
    replaying: Arc<AtomicBool>,
    /// Which objects this correlator owns, once a gateway's ring says so.
    ownership: Arc<RwLock<Option<Ownership>>>,
}

/// How a batch came to a correlator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    Live,
    /// Handed over by another correlator, from the journal that first took it.
    HandedOver(Option<Origin>),
    /// This correlator's own journal, handed back by one that held its objects.
    HandedBack,
}

/// Journals whose hand-overs are remembered at most.
const MAX_ORIGINS: usize = 256;

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
            journal_id: None,
            journaled_through: Arc::default(),
            replaying: Arc::default(),
            ownership: Arc::default(),
        }
    }

    /// The correlator of `config`; with `storage`, its journal opened, to be taken
    /// again with [`replay_journal`](Self::replay_journal) before any batch comes.
    pub fn open(config: CorrelatorConfig, sink: SignalSink) -> Result<Self, LogError> {
        let storage = config.storage.clone();
        let horizon = config.horizon();
        let mut correlator = Self::new(config, sink);
        if let Some(storage) = storage {
            let journal = Journal::open(&storage, horizon)?;
            correlator.journal_id = Some(journal.id());
            correlator.journal = Some(Arc::new(Mutex::new(journal)));
            correlator.replaying.store(true, Ordering::Release);
        }
        Ok(correlator)
    }

    /// Whether batches are journaled (and so acknowledged only once written).
    pub fn journals(&self) -> bool {
        self.journal.is_some()
    }

    /// Takes again what the journal holds (a previous run's batches within the
    /// correlator's horizon), a batch at a time, as each was taken live: events the
    /// live checks refused (dated ahead of the wall clock it was appended at by more
    /// than the lateness) are refused again. Then emits each signal firing at the end
    /// once, so that a restarted process raises again what it had raised. Blocking:
    /// run it off the runtime's threads.
    pub fn replay_journal(&self) -> Result<(), LogError> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        let started = Instant::now();
        let now = now_unix_nanos();
        let mut last: BTreeMap<String, Signal> = BTreeMap::new();
        let mut events = Vec::new();
        let mut batches = 0u64;
        let replayed = loop {
            let next = journal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .replay_next(now);
            let (appended, batch) = match next {
                Ok(Some(next)) => next,
                Ok(None) => break Ok(()),
                Err(error) => break Err(error),
            };
            batches += 1;
            let arrival = match &batch {
                Journaled::Traces(traces) => {
                    traces.correlator_events(&mut events);
                    self.arrival_of(traces)
                }
                Journaled::Logs(logs) => {
                    logs.correlator_events(&mut events);
                    self.arrival_of(logs)
                }
                Journaled::Metrics(metrics) => {
                    metrics.correlator_events(&mut events);
                    Arrival::Live
                }
            };
            if let Arrival::HandedOver(Some(origin)) = arrival {
                self.first_journaling(origin);
            }
            drop(batch);
            let horizon = appended.min(now).saturating_add(self.lateness);
            for signal in self.take(events.drain(..), arrival, horizon) {
                last.insert(signal.id.clone(), signal);
            }
        };
        self.replaying.store(false, Ordering::Release);
        let firing: Vec<Signal> = last
            .into_values()
            .filter(|signal| signal.state == SignalState::Firing)
            .collect();
        tracing::info!(batches, firing = firing.len(), elapsed = ?started.elapsed(),
            "correlator: state rebuilt from its journal");
        self.emit(firing);
        replayed
    }

    /// Takes events, refusing (and counting) those dated after `horizon`, and
    /// evaluates the detectors; returns the signal changes.
    fn take(
        &self,
        events: impl Iterator<Item = Event>,
        arrival: Arrival,
        horizon: Nanos,
    ) -> Vec<Signal> {
        let mut correlator = self.lock();
        for event in events {
            // Taking an event from the future would move event time ahead and make
            // every later event late: whatever path it took.
            if event.time() > horizon {
                self.future_events.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match arrival {
                Arrival::Live => correlator.observe(event),
                Arrival::HandedOver(_) => correlator.observe_handed_over(event),
                Arrival::HandedBack => correlator.observe_handed_back(event),
            }
        }
        let now = correlator.watermark();
        correlator.advance(now)
    }

    /// How a batch came, by its hand-over marks.
    fn arrival_of<T: CorrelatorEvents>(&self, data: &T) -> Arrival {
        if !data.handed_over() {
            return Arrival::Live;
        }
        match data.handover_origin() {
            Some(origin) if Some(origin.journal) == self.journal_id => Arrival::HandedBack,
            origin => Arrival::HandedOver(origin),
        }
    }

    /// Whether a batch handed over from `origin` is journaled here for the first
    /// time (hand-overs go in sequence order, so one at or before the last taken
    /// from its journal is a copy already held), and notes it.
    fn first_journaling(&self, origin: Origin) -> bool {
        let mut journaled = self
            .journaled_through
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if journaled.len() >= MAX_ORIGINS && !journaled.contains_key(&origin.journal) {
            // As many journals as gateways ever seen: forgetting them costs copies
            // on disk, never evidence.
            journaled.clear();
        }
        let through = journaled.entry(origin.journal).or_insert(0);
        let first = *through == 0 || origin.sequence > *through;
        *through = (*through).max(origin.sequence);
        first
    }

    /// The id of the journal (none without `storage`), which the hand-over marks
    /// the batches it sends with.
    pub fn journal_id(&self) -> Option<u64> {
        self.journal_id
    }

    fn lock(&self) -> MutexGuard<'_, Correlator> {
        // A panic while holding the lock leaves counts, not broken invariants.
        self.correlator
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes events of objects another correlator owned before, whatever their age
    /// (but not dated ahead of the wall clock), and evaluates the detectors.
    pub fn observe_handed_over(&self, events: Vec<Event>) {
        let horizon = now_unix_nanos().saturating_add(self.lateness);
        let signals = self.take(events.into_iter(), Arrival::HandedOver(None), horizon);
        self.emit(signals);
    }

    /// Forgets the objects `keep` says no to (their new owner carries them on) and
    /// withdraws their firing signals ([`SignalState::HandedOver`]); returns how many
    /// objects were let go.
    pub fn release(&self, mut keep: impl FnMut(&ObjectKey) -> bool) -> usize {
        let mut released = 0;
        let signals = self.lock().release(|key| {
            let kept = keep(key);
            released += usize::from(!kept);
            kept
        });
        // Not through `emit`: these objects are no longer owned here, and their
        // withdrawal must go out.
        if !signals.is_empty() {
            (self.sink)(signals);
        }
        released
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
    /// counted.
    pub fn observe(&self, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let horizon = now_unix_nanos().saturating_add(self.lateness);
        let signals = self.take(events.into_iter(), Arrival::Live, horizon);
        self.emit(signals);
    }

    /// Moves event time along with the wall clock, less the lateness (see
    /// [`Ticker`](crate::correlator::Ticker)), and emits what that fires or resolves.
    pub fn tick(&self, wall_clock: Nanos) {
        if self.replaying.load(Ordering::Acquire) {
            return;
        }
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

    /// From now on, no signal change of an object `owns` says no to is sent: such an
    /// object was let go (and its signals withdrawn) or was never this gateway's, and
    /// records still routed here by agents that have not resolved the new ring yet
    /// must not make it fire or resolve here while its new owner reports it.
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
            signals.retain(|signal| !signal.object.is_known() || owns(&signal.object.key()));
        }
        if !signals.is_empty() {
            (self.sink)(signals);
        }
    }
}

impl<T: Telemetry + CorrelatorEvents> Processor<T> for SharedCorrelator {
    fn process(&mut self, data: T, _: Instant, out: &mut Vec<T>) {
        let arrival = self.arrival_of(&data);
        // Handed back, a batch is in this journal already; handed over twice, in it
        // once. A hand-over is journaled, so that it can be handed on again.
        let journaled = match arrival {
            Arrival::Live | Arrival::HandedOver(None) => true,
            Arrival::HandedOver(Some(origin)) => self.first_journaling(origin),
            Arrival::HandedBack => false,
        };
        if let Some(journal) = self.journal.as_ref().filter(|_| journaled) {
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
        if !events.is_empty() {
            let horizon = now_unix_nanos().saturating_add(self.lateness);
            let signals = self.take(events.into_iter(), arrival, horizon);
            self.emit(signals);
        }
        out.push(data);
    }
}
