//! The `reconcile_loop` detector: one object reconciled far more often than its spec
//! changes, with the cause its reconciles and writes point to, and the usual fix.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

use crate::correlator::compact::bounded;
use crate::correlator::intake::events::Outcome;
use crate::correlator::lifecycle::signal::{Finding, figures, severity_for};
use crate::correlator::objects::evidence::{Evidence, LazyReference};
use crate::correlator::objects::field_churn::{Churn, FieldChurn};
use crate::correlator::objects::recent_reconciles::ReconcileNote;
use crate::correlator::objects::writers::SpecWrites;
use crate::correlator::window::{Bucket, BucketRing, nanos};
use opscope_model::config::{FieldError, Validate, duration};
use opscope_model::config::{positive, share};
use opscope_model::signal::MAX_EVIDENCE;
use opscope_model::timestamp::Nanos;

/// Buckets of the sliding window: one per second with the default window.
const BUCKETS: usize = 60;
/// Generation changes within the window that make the generation "changing"; a
/// single spec edit does not hide a loop.
const GENERATION_CHANGING: u16 = 2;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcileLoopConfig {
    /// Reconciles of one object within `window` that make a loop.
    pub min_reconciles: u32,
    /// The sliding window reconciles are counted in.
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
    /// A requeue after at most this long counts toward `fixed_requeue`.
    #[serde(deserialize_with = "duration")]
    pub fast_requeue: Duration,
    /// Share of consecutive status writes on which one field must change for `field_churn`.
    pub field_churn_ratio: f64,
}

impl Default for ReconcileLoopConfig {
    fn default() -> Self {
        Self {
            min_reconciles: 30,
            window: Duration::from_secs(60),
            fast_requeue: Duration::from_secs(1),
            field_churn_ratio: 0.8,
        }
    }
}

impl Validate for ReconcileLoopConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.min_reconciles < 2 {
            return Err(FieldError::new("min_reconciles", "must be at least 2"));
        }
        positive("window", self.window)?;
        share("field_churn_ratio", self.field_churn_ratio)
    }
}

/// What one bucket of the window counts.
#[derive(Debug, Clone, Copy, Default)]
struct LoopCounts {
    reconciles: u16,
    errors: u16,
    status_writes: u16,
    fast_requeues: u16,
    generation_changes: u16,
}

impl Bucket for LoopCounts {
    fn absorb(&mut self, other: &Self) {
        self.reconciles = self.reconciles.saturating_add(other.reconciles);
        self.errors = self.errors.saturating_add(other.errors);
        self.status_writes = self.status_writes.saturating_add(other.status_writes);
        self.fast_requeues = self.fast_requeues.saturating_add(other.fast_requeues);
        self.generation_changes = self
            .generation_changes
            .saturating_add(other.generation_changes);
    }
}

/// What the loop detector keeps about one object.
#[derive(Debug, Clone)]
pub(crate) struct LoopState {
    counts: BucketRing<LoopCounts>,
    churn: FieldChurn,
    spec_writes: SpecWrites,
    /// The highest generation seen.
    generation: Option<i64>,
    evidence: Evidence,
    /// The latest status write near or in a loop (an audit event, whose body shows
    /// the churning field): one place of the evidence of a field churn, kept apart
    /// so the reconciles' own records, arriving at another pace, keep theirs.
    churn_write: Option<Box<str>>,
    /// The latest error of a reconcile near or in a loop (`error: <text>`): what a
    /// retry storm retries.
    last_error: Option<Box<str>>,
}

impl LoopState {
    pub(crate) fn new(config: &ReconcileLoopConfig) -> Self {
        Self {
            counts: BucketRing::new(config.window, BUCKETS),
            churn: FieldChurn::default(),
            spec_writes: SpecWrites::default(),
            generation: None,
            evidence: Evidence::default(),
            churn_write: None,
            last_error: None,
        }
    }

    /// How often a firing loop is looked at again as its window slides.
    pub(crate) fn recheck_interval(&self) -> Nanos {
        self.counts.width()
    }

    /// Counts a reconcile record; `firing` says whether the object's loop signal is.
    pub(crate) fn record_reconcile(
        &mut self,
        note: ReconcileNote,
        outcome: &Outcome,
        config: &ReconcileLoopConfig,
        reference: &LazyReference,
        firing: bool,
    ) {
        if let Some(bucket) = self.counts.bucket_mut(note.at) {
            count_reconcile(bucket, note, outcome, config);
        }
        if !(firing || self.near_threshold(note.at, config)) {
            return;
        }
        if note.new
            && let Some(reference) = reference.get()
        {
            self.evidence.push(reference);
        } else if reference.traced()
            && self.evidence.awaits_trace(reference.reconcile_id())
            && let Some(reference) = reference.get()
        {
            self.evidence.add_trace(reference);
        }
        let kept_error = self.last_error.as_deref();
        if let (true, Outcome::Error(error)) = (note.first_outcome, outcome)
            && kept_error.and_then(|kept| kept.strip_prefix("error: ")) != Some(error.as_str())
        {
            self.last_error = Some(bounded(&format!("error: {error}")));
        }
    }

    /// Whether the latest reconciles could be the evidence of a loop: within
    /// [`MAX_EVIDENCE`] reconciles of the threshold. Below it, references would only
    /// be replaced before any finding reads them; most objects never come near, and
    /// the references are a quarter of what an object holds.
    fn near_threshold(&self, at: Nanos, config: &ReconcileLoopConfig) -> bool {
        let reconciles = u32::from(self.counts.total(at).reconciles);
        reconciles.saturating_add(MAX_EVIDENCE as u32) > config.min_reconciles
    }

    /// Notes a generation shown at `time`; a higher one than seen is a spec change.
    pub(crate) fn record_generation(&mut self, time: Nanos, generation: Option<i64>) {
        let Some(generation) = generation else {
            return;
        };
        let changed = self.generation.is_some_and(|known| generation > known);
        self.generation = self.generation.max(Some(generation));
        if let (true, Some(bucket)) = (changed, self.counts.bucket_mut(time)) {
            bucket.generation_changes = bucket.generation_changes.saturating_add(1);
        }
    }

    /// A successful write of the status subresource.
    pub(crate) fn record_status_write(&mut self, time: Nanos) {
        if let Some(bucket) = self.counts.bucket_mut(time) {
            bucket.status_writes = bucket.status_writes.saturating_add(1);
        }
    }

    /// The digest of a written status, compared with the previous one. Near or in a
    /// loop, the write is kept as evidence of a churn.
    pub(crate) fn record_status_digest(
        &mut self,
        time: Nanos,
        digest: &[String],
        config: &ReconcileLoopConfig,
        reference: &LazyReference,
        firing: bool,
    ) {
        self.churn.record(digest, time, config.field_churn_ratio);
        // The first write is kept whatever the rate: the audit events that show a
        // churn may lag the reconciles' own records by seconds on a loaded API
        // server, so the loop can fire on a churn seen before it came near.
        if (firing || self.churn_write.is_none() || self.near_threshold(time, config))
            && let Some(reference) = reference.get()
            && self.churn_write.as_deref() != Some(reference)
        {
            self.churn_write = Some(bounded(reference));
        }
    }

    /// A successful write of the spec by `actor`.
    pub(crate) fn record_spec_write(&mut self, time: Nanos, actor: u64) {
        self.spec_writes.record(actor, time);
    }

    fn cause(
        &self,
        counts: &LoopCounts,
        config: &ReconcileLoopConfig,
        now: Nanos,
    ) -> LoopCause<'_> {
        let reconciles = u32::from(counts.reconciles);
        let most = |count: u16| u32::from(count) * 2 > reconciles;
        if most(counts.errors) && !self.backing_off(now) {
            return LoopCause::ErrorRetryStorm;
        }
        if most(counts.fast_requeues) {
            return LoopCause::FixedRequeue;
        }
        let wrote_status = u32::from(counts.status_writes) * 2 >= reconciles;
        if !wrote_status || most(counts.errors) {
            return LoopCause::Unknown;
        }
        let since = now.saturating_sub(nanos(config.window));
        match self.churn.churning(config.field_churn_ratio, since) {
            Some(churn) => LoopCause::FieldChurn(churn),
            None => LoopCause::SelfTriggeredStatusWrite,
        }
    }

    /// Reconciles grow sparse: from the first reconcile in the window to `now`, the
    /// later half holds less than half as many as the earlier half, as with backoff.
    fn backing_off(&self, now: Nanos) -> bool {
        let active = || {
            self.counts
                .window(now)
                .filter(|(_, counts)| counts.reconciles > 0)
                .map(|(place, counts)| (place, u32::from(counts.reconciles)))
        };
        let Some((first, _)) = active().next() else {
            return false;
        };
        let middle = (first + self.counts.count()).div_ceil(2);
        let (earlier, later) = active().fold((0, 0), |(earlier, later), (place, count)| {
            if place < middle {
                (earlier + count, later)
            } else {
                (earlier, later + count)
            }
        });
        later * 2 < earlier
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.counts.footprint()
            + self.churn.footprint()
            + self.spec_writes.footprint()
            + self.evidence.footprint()
            + self.churn_write.as_deref().map_or(0, str::len)
            + self.last_error.as_deref().map_or(0, str::len)
    }
}

/// Counts one reconcile record in its bucket: once per reconcile, its outcome once.
fn count_reconcile(
    bucket: &mut LoopCounts,
    note: ReconcileNote,
    outcome: &Outcome,
    config: &ReconcileLoopConfig,
) {
    if note.new {
        bucket.reconciles = bucket.reconciles.saturating_add(1);
    }
    if !note.first_outcome {
        return;
    }
    match outcome {
        Outcome::Error(_) => bucket.errors = bucket.errors.saturating_add(1),
        Outcome::RequeueAfter(after) if *after <= config.fast_requeue => {
            bucket.fast_requeues = bucket.fast_requeues.saturating_add(1);
        }
        _ => {}
    }
}

/// Whether the object loops at `now`, and why.
pub(crate) fn evaluate<'a>(
    state: &'a LoopState,
    config: &ReconcileLoopConfig,
    now: Nanos,
    firing: bool,
) -> Option<Finding<'a>> {
    let counts = state.counts.total(now);
    let reconciles = u32::from(counts.reconciles);
    let holds = if firing {
        reconciles * 2 >= config.min_reconciles
    } else {
        reconciles >= config.min_reconciles
    };
    if !holds {
        return None;
    }
    let since = now.saturating_sub(nanos(config.window));
    let generation_changing = counts.generation_changes >= GENERATION_CHANGING;
    let fight = generation_changing && state.spec_writes.alternating_since(since);
    if generation_changing && !fight && !firing {
        return None;
    }
    let cause = if fight {
        LoopCause::SpecFight
    } else {
        state.cause(&counts, config, now)
    };
    Some(finding(state, &counts, &cause, config))
}

fn finding<'a>(
    state: &'a LoopState,
    counts: &LoopCounts,
    cause: &LoopCause,
    config: &ReconcileLoopConfig,
) -> Finding<'a> {
    let reconciles = f64::from(counts.reconciles);
    let mut figures = figures([
        ("reconciles", reconciles),
        (
            "reconciles_per_minute",
            reconciles * 60.0 / config.window.as_secs_f64(),
        ),
        (
            "error_ratio",
            f64::from(counts.errors) / reconciles.max(1.0),
        ),
        ("status_writes", f64::from(counts.status_writes)),
        ("fast_requeues", f64::from(counts.fast_requeues)),
        ("generation_changes", f64::from(counts.generation_changes)),
    ]);
    // What the cause rests on goes with the reconciles: the write that shows the
    // churning field, or the error retried.
    let cause_evidence = match cause {
        LoopCause::FieldChurn(churn) => {
            figures.push(("field_churn_ratio", churn.ratio));
            state.churn_write.as_deref()
        }
        LoopCause::ErrorRetryStorm => state.last_error.as_deref(),
        _ => None,
    };
    let evidence = match cause_evidence {
        Some(reference) => {
            let reconciles = state.evidence.as_slice();
            let older = reconciles.len().saturating_sub(MAX_EVIDENCE - 1);
            let mut evidence: Vec<String> = reconciles.iter().skip(older).cloned().collect();
            evidence.push(reference.to_string());
            Cow::Owned(evidence)
        }
        None => Cow::Borrowed(state.evidence.as_slice()),
    };
    Finding {
        cause: cause.name(),
        severity: severity_for(reconciles, f64::from(config.min_reconciles)),
        figures,
        evidence,
        hint: cause.hint(),
        below_threshold: reconciles < f64::from(config.min_reconciles),
    }
}

enum LoopCause<'a> {
    SelfTriggeredStatusWrite,
    FieldChurn(Churn<'a>),
    ErrorRetryStorm,
    FixedRequeue,
    SpecFight,
    Unknown,
}

impl LoopCause<'_> {
    fn name(&self) -> Cow<'static, str> {
        match self {
            Self::SelfTriggeredStatusWrite => Cow::Borrowed("self_triggered_status_write"),
            Self::FieldChurn(churn) => Cow::Owned(format!("field_churn:{}", churn.path)),
            Self::ErrorRetryStorm => Cow::Borrowed("error_retry_storm"),
            Self::FixedRequeue => Cow::Borrowed("fixed_requeue"),
            Self::SpecFight => Cow::Borrowed("spec_fight"),
            Self::Unknown => Cow::Borrowed("unknown"),
        }
    }

    fn hint(&self) -> Cow<'static, str> {
        match self {
            Self::SelfTriggeredStatusWrite => Cow::Borrowed(
                "The operator's own status writes re-trigger its watch: \
                filter events with GenerationChangedPredicate, compare the new status with the old one \
                (equality.Semantic.DeepEqual) before updating it, and record ObservedGeneration.",
            ),
            Self::FieldChurn(churn) => Cow::Owned(format!(
                "`{}` changes on every write, so every status update is a real change that re-triggers \
                 the watch: don't write timestamps (time.Now()) into status on every reconcile, set it only \
                 when something else changed, and filter events with GenerationChangedPredicate.",
                churn.path
            )),
            Self::ErrorRetryStorm => Cow::Borrowed(
                "Reconciles keep failing and are retried at a steady pace: return the \
                error so the workqueue's rate limiter backs off exponentially (don't requeue immediately or \
                after a fixed delay), and fix the error in the evidence.",
            ),
            Self::FixedRequeue => Cow::Borrowed(
                "The reconciler asks to be requeued after a second or less every time: \
                use exponential backoff instead of a fixed requeue, or rely on watches instead of polling.",
            ),
            Self::SpecFight => Cow::Borrowed(
                "Two writers keep changing the spec: find the other writer (see the \
                evidence) and give each its own fields with server-side apply field ownership.",
            ),
            Self::Unknown => Cow::Borrowed(
                "The object is reconciled far more often than its spec changes: filter events \
                with GenerationChangedPredicate, compare status before updating it, and check what \
                triggers the watch.",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlator::intake::events::RecordPlace;
    use crate::correlator::test_support::*;
    use opscope_model::signal::{Severity, Signal, SignalState, SignalType};

    fn loop_signals(signals: &[Signal]) -> Vec<&Signal> {
        signals
            .iter()
            .filter(|s| s.signal == SignalType::ReconcileLoop)
            .collect()
    }

    /// `count` reconciles of `name`, one every `every_ms`, each writing its status.
    fn status_loop(name: &str, count: u64, every_ms: u64) -> Vec<Event> {
        (0..count)
            .flat_map(|n| {
                let at = millis(n * every_ms);
                let id = format!("r{n}");
                [
                    Ev::write(name, at).status().reconcile_id(&id).into(),
                    Ev::reconcile(name, at, &id).into(),
                ]
            })
            .collect()
    }

    #[test]
    fn references_are_kept_from_within_five_reconciles_of_the_threshold() {
        let config = ReconcileLoopConfig::default();
        assert_eq!(config.min_reconciles, 30);
        let mut state = LoopState::new(&config);
        let nowhere = RecordPlace::default();
        for n in 0..30u64 {
            let note = ReconcileNote::single(secs(n), true);
            let id = format!("r{n}");
            let reference = LazyReference::new(&nowhere, "", &id);
            state.record_reconcile(note, &Outcome::Ok, &config, &reference, false);
            // The 26th reconcile is the first within five of 30.
            let expected = (n + 1).saturating_sub(25).min(5) as usize;
            assert_eq!(state.evidence.as_slice().len(), expected, "after {n}");
        }
        let latest: Vec<String> = (25..30).map(|n| format!("reconcile r{n}")).collect();
        assert_eq!(state.evidence.as_slice(), latest);

        // While the loop fires, every reconcile is evidence, however few are left.
        let mut firing = LoopState::new(&config);
        let note = ReconcileNote::single(secs(0), true);
        let reference = LazyReference::new(&nowhere, "", "x");
        firing.record_reconcile(note, &Outcome::Ok, &config, &reference, true);
        assert_eq!(firing.evidence.as_slice(), ["reconcile x"]);
    }

    #[test]
    fn fires_at_the_threshold_with_self_triggered_status_writes() {
        let signals = run(status_loop("w", 30, 1_000));
        let fired = loop_signals(&signals);
        assert_eq!(fired.len(), 1, "{signals:#?}");
        let signal = fired[0];
        assert_eq!(signal.state, SignalState::Firing);
        assert_eq!(signal.cause, "self_triggered_status_write");
        assert_eq!(signal.severity, Severity::Warning);
        assert_eq!(signal.figures["reconciles"], 30.0);
        assert_eq!(signal.figures["status_writes"], 30.0);
        assert_eq!(signal.id, "reconcile_loop:widgets/default/w");
        assert_eq!(signal.operator.name, OPERATOR);
        assert_eq!(signal.controller, "widget");
        assert_eq!(signal.evidence.len(), 5);
        assert!(signal.hint.contains("GenerationChangedPredicate"));
    }

    #[test]
    fn does_not_fire_just_under_the_threshold() {
        assert!(loop_signals(&run(status_loop("w", 29, 1_000))).is_empty());
        assert!(
            loop_signals(&run(status_loop("w", 40, 2_100))).is_empty(),
            "29 per window"
        );
    }

    #[test]
    fn records_of_one_reconcile_count_once() {
        let events: Vec<Event> = (0..29u64)
            .flat_map(|n| {
                let id = format!("r{n}");
                [
                    Ev::reconcile("w", secs(n), &id)
                        .outcome(Outcome::Unknown)
                        .into(),
                    Ev::reconcile("w", secs(n), &id).into(),
                    Ev::write("w", secs(n)).status().reconcile_id(&id).into(),
                ]
            })
            .collect();
        assert!(loop_signals(&run(events)).is_empty());
    }

    #[test]
    fn reconciles_without_ids_each_count() {
        let events = (0..30).map(|n| Ev::reconcile("w", secs(n), "").into());
        let signals = run(events);
        assert_eq!(loop_signals(&signals)[0].cause, "unknown");
    }

    #[test]
    fn resolves_once_the_rate_stays_under_half_the_threshold() {
        let mut events = status_loop("w", 60, 500);
        events.extend(
            (0..30).map(|n| Ev::reconcile("w", secs(30 + n * 5), &format!("slow{n}")).into()),
        );
        let signals = run_until(events, secs(200));
        let states: Vec<SignalState> = loop_signals(&signals).iter().map(|s| s.state).collect();
        assert_eq!(states.first(), Some(&SignalState::Firing));
        assert_eq!(states.last(), Some(&SignalState::Resolved));
        assert_eq!(
            states
                .iter()
                .filter(|s| **s == SignalState::Resolved)
                .count(),
            1
        );
        let resolved = loop_signals(&signals).last().copied().unwrap();
        assert!(
            resolved.last_seen < secs(100),
            "resolved at {}",
            resolved.last_seen
        );
    }

    #[test]
    fn failing_reconciles_at_a_steady_pace_are_an_error_retry_storm() {
        let events = (0..40).map(|n| {
            Ev::reconcile("w", secs(n), &format!("r{n}"))
                .error("dial tcp: refused")
                .into()
        });
        let signals = run(events);
        let signal = loop_signals(&signals)[0];
        assert_eq!(signal.cause, "error_retry_storm");
        assert_eq!(signal.figures["error_ratio"], 1.0);
        assert!(signal.hint.contains("backs off exponentially"));
        assert_eq!(
            signal.evidence.last().map(String::as_str),
            Some("error: dial tcp: refused")
        );
    }

    #[test]
    fn failing_reconciles_backing_off_are_no_retry_storm() {
        let burst = (0..25).map(|n| millis(n * 200));
        let spaced = [10, 20, 30, 40, 50].map(secs);
        let events = burst.chain(spaced).enumerate().map(|(n, at)| {
            Ev::reconcile("w", at, &format!("r{n}"))
                .error("conflict")
                .into()
        });
        let signals = run(events);
        assert_eq!(loop_signals(&signals)[0].cause, "unknown");
    }

    #[test]
    fn short_fixed_requeues_are_a_fixed_requeue() {
        let events = (0..40).map(|n| {
            Ev::reconcile("w", millis(n * 600), &format!("r{n}"))
                .outcome(Outcome::RequeueAfter(Duration::from_millis(500)))
                .into()
        });
        let signals = run(events);
        let signal = loop_signals(&signals)[0];
        assert_eq!(signal.cause, "fixed_requeue");
        assert_eq!(
            signal.figures["fast_requeues"], 30.0,
            "figures when it fired"
        );
    }

    #[test]
    fn a_status_field_changing_on_every_write_is_field_churn() {
        let events: Vec<Event> = (0..40u64)
            .flat_map(|n| {
                let id = format!("r{n}");
                let digest = [
                    "status.phase=0000000000000001".to_string(),
                    format!("status.lastSyncTime={n:016x}"),
                ];
                [
                    Ev::reconcile("w", secs(n), &id).into(),
                    Ev::write("w", secs(n))
                        .status()
                        .reconcile_id(&id)
                        .digest(&digest)
                        .into(),
                ]
            })
            .collect();
        let signals = run(events);
        let signal = loop_signals(&signals)[0];
        assert_eq!(signal.cause, "field_churn:status.lastSyncTime");
        assert_eq!(signal.figures["field_churn_ratio"], 1.0);
        assert!(signal.hint.contains("status.lastSyncTime"));
    }

    #[test]
    fn the_latest_write_that_shows_the_churn_is_evidence_beside_the_reconciles() {
        // As an operator's log lines and the API server's audit events of its
        // writes arrive: the audit events name no reconcile.
        let events: Vec<Event> = (0..40u64)
            .flat_map(|n| {
                let digest = [format!("status.lastSyncTime={n:016x}")];
                [
                    Ev::reconcile("w", secs(n), &format!("r{n}"))
                        .evidence(&format!("pod.log:{n}"))
                        .into(),
                    Ev::write("w", secs(n))
                        .status()
                        .digest(&digest)
                        .evidence(&format!("audit a-{n}"))
                        .into(),
                ]
            })
            .collect();
        let signals = run(events);
        let signal = loop_signals(&signals)[0];
        assert_eq!(signal.cause, "field_churn:status.lastSyncTime");
        // Fired on the 30th reconcile's line, before its write came.
        assert_eq!(
            signal.evidence,
            [
                "pod.log:26 reconcile r26",
                "pod.log:27 reconcile r27",
                "pod.log:28 reconcile r28",
                "pod.log:29 reconcile r29",
                "audit a-28"
            ]
        );
    }

    #[test]
    fn a_status_write_storm_alone_fires() {
        let events = (0..40).map(|n| {
            Ev::write("w", secs(n))
                .status()
                .evidence(&format!("audit.log:{n}"))
                .into()
        });
        let signals = run(events);
        let signal = loop_signals(&signals)[0];
        assert_eq!(signal.cause, "self_triggered_status_write");
        assert_eq!(
            signal.evidence.last().map(String::as_str),
            Some("audit.log:29")
        );
    }

    #[test]
    fn writes_by_people_or_failing_writes_are_not_reconciles() {
        let by_people = (0..40).map(|n| Ev::write("w", secs(n)).status().by_person().into());
        assert!(loop_signals(&run(by_people)).is_empty());
        let failing = (0..40).map(|n| Ev::write("w", secs(n)).code(409).into());
        assert!(loop_signals(&run(failing)).is_empty());
    }

    #[test]
    fn two_writers_taking_turns_on_the_spec_are_a_spec_fight() {
        let events: Vec<Event> = (0..40i64)
            .flat_map(|n| {
                let at = secs(n as u64);
                let actor = if n % 2 == 0 {
                    "system:serviceaccount:ops:widget-operator"
                } else {
                    "argocd"
                };
                [
                    Ev::write("w", at).actor(actor).generation(n + 1).into(),
                    Ev::reconcile("w", at, &format!("r{n}"))
                        .generation(n + 1)
                        .into(),
                ]
            })
            .collect();
        let signals = run(events);
        let signal = loop_signals(&signals)[0];
        assert_eq!(signal.cause, "spec_fight");
        assert!(signal.hint.contains("server-side apply"));
    }

    #[test]
    fn reconciles_following_spec_changes_of_one_writer_are_no_loop() {
        let events: Vec<Event> = (0..40i64)
            .flat_map(|n| {
                let at = secs(n as u64);
                [
                    Ev::write("w", at).by_person().generation(n + 1).into(),
                    Ev::reconcile("w", at, &format!("r{n}"))
                        .generation(n + 1)
                        .into(),
                ]
            })
            .collect();
        assert!(loop_signals(&run(events)).is_empty());
    }

    #[test]
    fn out_of_order_input_within_lateness_fires_the_same() {
        let mut events = status_loop("w", 30, 1_000);
        shuffle_within(&mut events, 20);
        let signals = run(events);
        assert_eq!(loop_signals(&signals).len(), 1);
        assert_eq!(
            loop_signals(&signals)[0].cause,
            "self_triggered_status_write"
        );
    }

    #[test]
    fn ten_times_the_threshold_is_critical() {
        let signals = run(status_loop("w", 400, 100));
        let severities: Vec<Severity> = loop_signals(&signals).iter().map(|s| s.severity).collect();
        assert_eq!(severities.first(), Some(&Severity::Warning));
        assert_eq!(severities.last(), Some(&Severity::Critical));
    }

    #[test]
    fn updates_come_at_most_once_per_update_interval() {
        let signals = run(status_loop("w", 600, 200));
        let fired = loop_signals(&signals);
        assert!(fired.len() >= 3, "{}", fired.len());
        for pair in fired.windows(2) {
            assert!(pair[1].last_seen - pair[0].last_seen >= secs(30));
        }
        assert!(fired.iter().all(|s| s.state == SignalState::Firing));
    }
}
