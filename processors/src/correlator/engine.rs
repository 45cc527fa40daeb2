//! The correlator itself, built from its parts: events taken on event time into the
//! object table and the instance detectors, and, as time advances, the objects due or
//! touched evaluated, the instance detectors swept and idle state expired.

use std::collections::BTreeSet;

use opscope_model::kubernetes::ObjectKey;
use opscope_model::signal::{Signal, SignalState, SignalType};
use opscope_model::timestamp::Nanos;

use crate::correlator::compact::bound_object;
use crate::correlator::config::CorrelatorConfig;
use crate::correlator::detectors::api_request_storm::StormDetector;
use crate::correlator::detectors::operator_counters::OperatorCounters;
use crate::correlator::detectors::resource_leak::LeakDetector;
use crate::correlator::intake::events::{
    ApiTrafficEvent, CounterEvent, Event, GaugeEvent, ObjectEvent,
};
use crate::correlator::lifecycle::journal::JournalStats;
use crate::correlator::objects::object_state::TrackedObject;
use crate::correlator::objects::object_table::ObjectTable;
use crate::correlator::window::nanos;

/// What the correlator holds and has dropped, for self-telemetry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorrelatorStats {
    pub tracked_objects: usize,
    /// Operator-instance entries held (gauges and counters are held apart).
    pub tracked_instances: usize,
    /// Objects evicted to make room, in total.
    pub evicted_objects: u64,
    /// Operator instances evicted to make room, in total.
    pub evicted_instances: u64,
    /// Idle objects forgotten, in total.
    pub expired_objects: u64,
    /// Events older than the accepted lateness, in total.
    pub late_events_dropped: u64,
    /// Events of no use to the detectors (no object or instance named, a gauge not
    /// watched), in total.
    pub ignored_events: u64,
    /// Events dated further ahead of the wall clock than the accepted lateness (a
    /// wrong clock or unit), in total; counted by the live agent, which knows the
    /// wall clock.
    pub future_events_dropped: u64,
    /// Events of this correlator's own journal handed back by another, of objects it
    /// holds already, in total.
    pub handed_back_events_dropped: u64,
    /// The journal's figures, all zero without `storage`.
    pub journal: JournalStats,
}

/// Correlates events on event time: [`observe`](Self::observe) events, then
/// [`advance`](Self::advance) time to evaluate the detectors and collect signals.
#[derive(Debug)]
pub struct Correlator {
    config: CorrelatorConfig,
    watermark: Nanos,
    objects: ObjectTable,
    leaks: LeakDetector,
    counters: OperatorCounters,
    storms: StormDetector,
    /// Signals resolved because their subject was evicted, sent with the next advance.
    evicted_signals: Vec<Signal>,
    stats: CorrelatorStats,
}

impl Correlator {
    pub fn new(config: CorrelatorConfig) -> Self {
        Self {
            objects: ObjectTable::new(config.max_objects),
            leaks: LeakDetector::new(&config.resource_leak),
            counters: OperatorCounters::new(
                &config.write_conflict,
                config.resource_leak.max_instances,
            ),
            storms: StormDetector::new(&config.api_request_storm),
            config,
            watermark: 0,
            evicted_signals: Vec::new(),
            stats: CorrelatorStats::default(),
        }
    }

    /// Takes one event, in any order within the accepted lateness of the newest event
    /// time; older events are counted and dropped.
    pub fn observe(&mut self, event: Event) {
        let time = event.time();
        if time < self.watermark.saturating_sub(nanos(self.config.lateness)) {
            self.stats.late_events_dropped += 1;
            return;
        }
        self.watermark = self.watermark.max(time);
        let used = match event {
            Event::Object(mut event) => self.observe_object(&mut event),
            Event::Gauge(event) => self.observe_gauge(event),
            Event::Counter(event) => self.observe_counter(event),
            Event::ApiTraffic(event) => self.observe_api_traffic(event),
        };
        if !used {
            self.stats.ignored_events += 1;
        }
    }

    /// Takes an event handed over by the correlator that owned its object before
    /// (its journal, sent on when ownership moved), whatever its age: the object is
    /// new here, so its events come in late but in their order. The caller has
    /// refused events dated ahead of the wall clock.
    pub fn observe_handed_over(&mut self, event: Event) {
        let Event::Object(mut event) = event else {
            // Operator-instance evidence is not routed by object, and not handed over.
            return;
        };
        // Event time moves on with it, as with any event: a loop the old owner was
        // firing is evaluated here at its own time, not a lateness behind it.
        self.watermark = self.watermark.max(event.time);
        if !self.observe_object(&mut event) {
            self.stats.ignored_events += 1;
        }
    }

    /// Takes an event of this correlator's own journal handed back by another (which
    /// held the object meanwhile) only when the object is not tracked here: one
    /// tracked was taken back from the journal at start, or never let go, and holds
    /// the event already.
    pub fn observe_handed_back(&mut self, event: Event) {
        if let Event::Object(object) = &event
            && self.objects.holds(&object.object)
        {
            self.stats.handed_back_events_dropped += 1;
            return;
        }
        self.observe_handed_over(event);
    }

    /// Forgets the objects `keep` says no to (their new owner carries them on) and
    /// returns their firing signals, [`HandedOver`](SignalState::HandedOver): this
    /// correlator stops reporting them without ending them.
    pub fn release(&mut self, keep: impl FnMut(&ObjectKey) -> bool) -> Vec<Signal> {
        let mut signals = self.objects.release(keep);
        for signal in &mut signals {
            signal.state = SignalState::HandedOver;
            signal.last_seen = signal.last_seen.max(self.watermark);
        }
        signals
    }

    /// Moves event time forward to `now` (never backwards), evaluates the detectors,
    /// and returns the signal changes: `Firing` when a signal starts, `Firing` updates
    /// at most once per update interval while it changes, `Resolved` when it ends.
    pub fn advance(&mut self, now: Nanos) -> Vec<Signal> {
        self.watermark = self.watermark.max(now);
        let now = self.watermark;
        let mut out = std::mem::take(&mut self.evicted_signals);
        for slot in self.objects.take_dirty() {
            self.evaluate_object(slot, &mut out);
        }
        while let Some(slot) = self.objects.pop_due(now) {
            self.evaluate_object(slot, &mut out);
        }
        let (idle_expiry, update_interval) = (
            nanos(self.config.idle_expiry),
            nanos(self.config.update_interval),
        );
        self.leaks
            .sweep(now, idle_expiry, update_interval, &mut out);
        self.sweep_counters(now, idle_expiry, update_interval, &mut out);
        self.storms
            .sweep(now, idle_expiry, update_interval, &mut out);
        if let Some(cutoff) = now.checked_sub(idle_expiry) {
            self.stats.expired_objects += self.objects.expire(cutoff) as u64;
        }
        for signal in &mut out {
            self.add_figures(signal, now);
        }
        out
    }

    /// The newest event time seen (or given to [`advance`](Self::advance)).
    pub fn watermark(&self) -> Nanos {
        self.watermark
    }

    /// The signals firing now, in their latest state.
    pub fn active(&self) -> Vec<Signal> {
        let mut active: Vec<Signal> = self
            .objects
            .entries()
            .flat_map(|entry| entry.object.active())
            .chain(self.leaks.active())
            .chain(self.counters.active())
            .chain(self.storms.active())
            .cloned()
            .collect();
        for signal in &mut active {
            self.add_figures(signal, self.watermark);
        }
        active
    }

    pub fn stats(&self) -> CorrelatorStats {
        CorrelatorStats {
            tracked_objects: self.objects.len(),
            tracked_instances: self.leaks.len() + self.counters.len() + self.storms.len(),
            evicted_instances: self.leaks.evicted()
                + self.counters.evicted()
                + self.storms.evicted(),
            ..self.stats.clone()
        }
    }

    /// By reference: an event is a few hundred bytes, and moving it down the calls
    /// would copy it at each.
    fn observe_object(&mut self, event: &mut ObjectEvent) -> bool {
        if !event.object.is_known() {
            return false;
        }
        bound_object(&mut event.object);
        let config = &self.config;
        let (slot, evicted) = self
            .objects
            .slot_for(&event.object, || TrackedObject::new(config, &event.object));
        if let Some(evicted) = evicted {
            self.stats.evicted_objects += 1;
            self.evicted_signals
                .extend(evicted.object.resolve_all(self.watermark));
        }
        let time = event.time;
        if let Some(entry) = self.objects.entry_mut(slot) {
            entry.object.apply(event, &self.config);
        }
        self.objects.touch(slot, time);
        true
    }

    fn observe_gauge(&mut self, event: GaugeEvent) -> bool {
        self.leaks
            .observe(event, self.watermark, &mut self.evicted_signals)
    }

    fn observe_counter(&mut self, event: CounterEvent) -> bool {
        self.counters
            .observe(event, self.watermark, &mut self.evicted_signals)
    }

    fn observe_api_traffic(&mut self, event: ApiTrafficEvent) -> bool {
        self.storms
            .observe(event, self.watermark, &mut self.evicted_signals)
    }

    /// What the operator's own counters and the kernel probe measure of it, on a
    /// firing signal.
    fn add_figures(&self, signal: &mut Signal, now: Nanos) {
        self.counters.add_figures(signal, now);
        self.storms.add_figures(signal, now);
    }

    /// Evaluates the operators' 409 counters, leaving out operators whose conflicts
    /// object signals already show.
    fn sweep_counters(
        &mut self,
        now: Nanos,
        idle_expiry: Nanos,
        update_interval: Nanos,
        out: &mut Vec<Signal>,
    ) {
        let explained: BTreeSet<&str> = if self.counters.len() == 0 {
            BTreeSet::new()
        } else {
            self.objects
                .entries()
                .flat_map(|entry| entry.object.active())
                .filter(|signal| signal.signal == SignalType::WriteConflict)
                .map(|signal| signal.operator.name.as_str())
                .collect()
        };
        self.counters
            .sweep(now, &explained, idle_expiry, update_interval, out);
    }

    fn evaluate_object(&mut self, slot: usize, out: &mut Vec<Signal>) {
        let now = self.watermark;
        let Some(entry) = self.objects.entry_mut(slot) else {
            return;
        };
        let settlement = entry.object.evaluate(&entry.key, &self.config, now, out);
        self.objects.settle(slot, settlement, now);
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
