//! The `write_conflict` detector: writes to one object answered 409 again and again,
//! and whether one stale writer, several writers or a split brain is behind them.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

use crate::correlator::compact::hash_text;
use crate::correlator::lifecycle::signal::{Finding, figures, severity_for};
use crate::correlator::objects::evidence::{Evidence, LazyReference};
use crate::correlator::objects::overlap::{ReconcileOverlap, Run};
use crate::correlator::objects::writers::{RecentWriters, Writer};
use crate::correlator::window::{Bucket, BucketRing, nanos};
use opscope_model::config::positive;
use opscope_model::config::{FieldError, Validate, duration};
use opscope_model::timestamp::Nanos;

/// Buckets of the sliding window: one per second with the default window.
const BUCKETS: usize = 60;
/// The HTTP status of a conflicting write.
const CONFLICT: u16 = 409;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WriteConflictConfig {
    /// Writes answered 409 within `window` that make a conflict.
    pub min_conflicts: u32,
    /// The sliding window conflicts are counted in.
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
}

impl Default for WriteConflictConfig {
    fn default() -> Self {
        Self {
            min_conflicts: 5,
            window: Duration::from_secs(60),
        }
    }
}

impl Validate for WriteConflictConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.min_conflicts == 0 {
            return Err(FieldError::new("min_conflicts", "must be at least 1"));
        }
        positive("window", self.window)
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct ConflictCounts {
    conflicts: u16,
}

impl Bucket for ConflictCounts {
    fn absorb(&mut self, other: &Self) {
        self.conflicts = self.conflicts.saturating_add(other.conflicts);
    }
}

/// Reconciles whose conflict on one object is remembered, so that another report of
/// it (the client span and the log line of the same failed write, or a retry within
/// the reconcile) counts once.
const REMEMBERED_CONFLICTS: usize = 8;

/// What the conflict detector keeps about one object.
#[derive(Debug, Clone)]
pub(crate) struct ConflictState {
    counts: BucketRing<ConflictCounts>,
    /// Hashes of the reconcile ids of the latest conflicts (0: none).
    conflicted_reconciles: [u64; REMEMBERED_CONFLICTS],
    next_conflicted: u8,
    writers: RecentWriters,
    overlap: ReconcileOverlap,
    evidence: Evidence,
}

impl ConflictState {
    pub(crate) fn new(config: &WriteConflictConfig) -> Self {
        Self {
            counts: BucketRing::new(config.window, BUCKETS),
            conflicted_reconciles: [0; REMEMBERED_CONFLICTS],
            next_conflicted: 0,
            writers: RecentWriters::default(),
            overlap: ReconcileOverlap::default(),
            evidence: Evidence::default(),
        }
    }

    /// How often a firing conflict is looked at again as its window slides.
    pub(crate) fn recheck_interval(&self) -> Nanos {
        self.counts.width()
    }

    /// A write by `writer` answered with `code`, within the reconcile `reconcile_id`
    /// (empty: not known). A reconcile's conflicts on the object count once.
    pub(crate) fn record_write(
        &mut self,
        time: Nanos,
        code: u16,
        reconcile_id: &str,
        writer: Writer,
        reference: &LazyReference,
    ) {
        self.writers.record(writer, time);
        if code != CONFLICT || self.already_conflicted(reconcile_id) {
            return;
        }
        if let Some(reference) = reference.get() {
            self.evidence.push(reference);
        }
        if let Some(bucket) = self.counts.bucket_mut(time) {
            bucket.conflicts = bucket.conflicts.saturating_add(1);
        }
    }

    /// Whether the reconcile's conflict was counted already; remembers it if not.
    fn already_conflicted(&mut self, reconcile_id: &str) -> bool {
        if reconcile_id.is_empty() {
            return false;
        }
        // 0 marks an empty slot: a hash of 0 is taken as 1.
        let hash = hash_text(reconcile_id).max(1);
        if self.conflicted_reconciles.contains(&hash) {
            return true;
        }
        let slot = usize::from(self.next_conflicted) % REMEMBERED_CONFLICTS;
        if let Some(remembered) = self.conflicted_reconciles.get_mut(slot) {
            *remembered = hash;
        }
        self.next_conflicted = self.next_conflicted.wrapping_add(1);
        false
    }

    /// A reconcile run with known start and end.
    pub(crate) fn record_run(&mut self, run: Run, reference: &LazyReference) {
        if self.overlap.record(run)
            && let Some(reference) = reference.get()
        {
            self.evidence.push(reference);
        }
    }

    fn cause(&self, since: Nanos) -> ConflictCause {
        if self.overlap.overlapped_since(since) {
            ConflictCause::SplitBrain
        } else if self.writers.actors_since(since) >= 2 || self.writers.instances_since(since) >= 2
        {
            ConflictCause::ConcurrentWriters
        } else {
            ConflictCause::StaleCache
        }
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.counts.footprint()
            + self.writers.footprint()
            + self.overlap.footprint()
            + self.evidence.footprint()
    }
}

/// Whether writes to the object conflict at `now`, and why.
pub(crate) fn evaluate<'a>(
    state: &'a ConflictState,
    config: &WriteConflictConfig,
    now: Nanos,
    firing: bool,
) -> Option<Finding<'a>> {
    let conflicts = u32::from(state.counts.total(now).conflicts);
    let holds = if firing {
        conflicts > 0
    } else {
        conflicts >= config.min_conflicts
    };
    if !holds {
        return None;
    }
    let since = now.saturating_sub(nanos(config.window));
    let cause = state.cause(since);
    let conflicts = f64::from(conflicts);
    Some(Finding {
        cause: Cow::Borrowed(cause.name()),
        severity: severity_for(conflicts, f64::from(config.min_conflicts)),
        figures: figures([
            ("conflicts", conflicts),
            (
                "conflicts_per_minute",
                conflicts * 60.0 / config.window.as_secs_f64(),
            ),
            ("writers", state.writers.actors_since(since) as f64),
            ("instances", state.writers.instances_since(since) as f64),
        ]),
        evidence: Cow::Borrowed(state.evidence.as_slice()),
        hint: Cow::Borrowed(cause.hint()),
        below_threshold: conflicts < f64::from(config.min_conflicts),
    })
}

pub(crate) enum ConflictCause {
    StaleCache,
    ConcurrentWriters,
    SplitBrain,
}

impl ConflictCause {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::StaleCache => "stale_cache",
            Self::ConcurrentWriters => "concurrent_writers",
            Self::SplitBrain => "split_brain",
        }
    }

    pub(crate) fn hint(&self) -> &'static str {
        match self {
            Self::StaleCache => {
                "Updates are made from a stale copy of the object: re-read it before \
                updating, use Patch instead of Update, or wrap the update in retry.RetryOnConflict."
            }
            Self::ConcurrentWriters => {
                "Several writers update this object: use Patch (or server-side \
                apply with field ownership) instead of Update, and retry.RetryOnConflict."
            }
            Self::SplitBrain => {
                "Two instances of the operator reconcile the same object at the same \
                time: enable leader election (--leader-elect) so only one instance reconciles."
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::correlator::test_support::*;
    use opscope_model::signal::{Severity, Signal, SignalState, SignalType};

    fn conflict_signals(signals: &[Signal]) -> Vec<&Signal> {
        signals
            .iter()
            .filter(|s| s.signal == SignalType::WriteConflict)
            .collect()
    }

    fn conflicts(name: &str, count: u64, every_ms: u64) -> Vec<Event> {
        (0..count)
            .map(|n| {
                Ev::write(name, millis(n * every_ms))
                    .code(409)
                    .evidence(&format!("trace t{n}"))
                    .into()
            })
            .collect()
    }

    #[test]
    fn fires_at_the_threshold_with_one_stale_writer() {
        let signals = run(conflicts("w", 5, 1_000));
        let fired = conflict_signals(&signals);
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].cause, "stale_cache");
        assert_eq!(fired[0].severity, Severity::Warning);
        assert_eq!(fired[0].figures["conflicts"], 5.0);
        assert_eq!(fired[0].figures["writers"], 1.0);
        assert_eq!(
            fired[0].evidence,
            ["trace t0", "trace t1", "trace t2", "trace t3", "trace t4"]
        );
        assert!(fired[0].hint.contains("RetryOnConflict"));
    }

    #[test]
    fn does_not_fire_just_under_the_threshold() {
        assert!(conflict_signals(&run(conflicts("w", 4, 1_000))).is_empty());
        assert!(
            conflict_signals(&run(conflicts("w", 10, 16_000))).is_empty(),
            "4 per window"
        );
    }

    #[test]
    fn resolves_after_a_window_without_conflicts() {
        let signals = run_until(conflicts("w", 5, 1_000), secs(120));
        let fired = conflict_signals(&signals);
        let resolved: Vec<&&Signal> = fired
            .iter()
            .filter(|s| s.state == SignalState::Resolved)
            .collect();
        assert_eq!(fired[0].state, SignalState::Firing);
        assert_eq!(resolved.len(), 1);
        assert!(resolved[0].last_seen >= secs(64) && resolved[0].last_seen <= secs(66));
    }

    /// `reconciles` reconciles each failing one write, seen twice: as the client span
    /// and as the log line of the same reconcile.
    fn conflicts_reported_twice(reconciles: u64) -> Vec<Event> {
        (0..reconciles)
            .flat_map(|n| {
                let id = format!("reconcile-{n}");
                [secs(n), secs(n) + millis(5)]
                    .map(|at| Ev::write("w", at).code(409).reconcile_id(&id).into())
            })
            .collect()
    }

    #[test]
    fn one_reconciles_conflict_reported_twice_counts_once() {
        let signals = run(conflicts_reported_twice(5));
        assert_eq!(conflict_signals(&signals)[0].figures["conflicts"], 5.0);
        assert!(conflict_signals(&run(conflicts_reported_twice(4))).is_empty());
    }

    #[test]
    fn two_actors_are_concurrent_writers() {
        let events = (0..6).map(|n| {
            let actor = if n % 2 == 0 {
                "alice"
            } else {
                "system:serviceaccount:ops:widget-operator"
            };
            Ev::write("w", secs(n)).code(409).actor(actor).into()
        });
        let signals = run(events);
        assert_eq!(conflict_signals(&signals)[0].cause, "concurrent_writers");
        assert_eq!(conflict_signals(&signals)[0].figures["writers"], 2.0);
    }

    #[test]
    fn two_instances_reconciling_at_once_are_a_split_brain() {
        let mut events: Vec<Event> = Vec::new();
        for n in 0..6u64 {
            let start = secs(n * 2);
            for instance in ["widget-operator-0", "widget-operator-1"] {
                let id = format!("{instance}-{n}");
                events.push(
                    Ev::reconcile("w", start + millis(800), &id)
                        .instance(instance)
                        .span(start, millis(800))
                        .into(),
                );
                events.push(
                    Ev::write("w", start + millis(700))
                        .instance(instance)
                        .code(409)
                        .into(),
                );
            }
        }
        events.sort_by_key(Event::time);
        let signals = run(events);
        let signal = conflict_signals(&signals)[0];
        assert_eq!(signal.cause, "split_brain");
        assert_eq!(signal.figures["instances"], 2.0);
        assert!(signal.hint.contains("leader election"));
    }

    #[test]
    fn out_of_order_input_within_lateness_fires_the_same() {
        let mut events = conflicts("w", 8, 2_000);
        shuffle_within(&mut events, 20);
        let signals = run(events);
        assert_eq!(conflict_signals(&signals).len(), 1);
        assert_eq!(conflict_signals(&signals)[0].cause, "stale_cache");
    }

    #[test]
    fn ten_times_the_threshold_is_critical() {
        let signals = run_until(conflicts("w", 50, 500), secs(40));
        let last = conflict_signals(&signals).last().copied().unwrap();
        assert_eq!(last.severity, Severity::Critical);
        assert_eq!(last.figures["conflicts"], 50.0);
    }
}
