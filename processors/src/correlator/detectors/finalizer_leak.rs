//! The `finalizer_leak` detector: an object deleted long ago that its finalizers keep
//! alive, and whether its controller fails the cleanup or is not there at all.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

use crate::correlator::compact::bounded;
use crate::correlator::intake::events::{ObjectState, Outcome};
use crate::correlator::lifecycle::signal::{
    CRITICAL_FACTOR, Finding, SignalTrack, figures, severity_for,
};
use crate::correlator::objects::evidence::{Evidence, LazyReference};
use crate::correlator::objects::recent_reconciles::ReconcileNote;
use crate::correlator::window::nanos;
use opscope_model::config::positive;
use opscope_model::config::{FieldError, Validate, duration};
use opscope_model::timestamp::Nanos;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FinalizerLeakConfig {
    /// How long an object may stay deleted but held by finalizers.
    #[serde(deserialize_with = "duration")]
    pub max_age: Duration,
}

impl Default for FinalizerLeakConfig {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(5 * 60),
        }
    }
}

impl Validate for FinalizerLeakConfig {
    fn validate(&self) -> Result<(), FieldError> {
        positive("max_age", self.max_age)
    }
}

/// What the finalizer detector keeps about one object.
#[derive(Debug, Clone, Default)]
pub(crate) struct FinalizerState {
    /// When the object was reported deleted; older records no longer count.
    gone_at: Option<Nanos>,
    /// The time of the latest reconcile seen.
    last_reconcile: Option<Nanos>,
    /// The latest reconcile outcome known: its time, and whether it failed.
    last_outcome: Option<(Nanos, bool)>,
    /// Boxed: most objects are never shown deleted or with finalizers, and this is
    /// most of the state, held for every tracked object.
    held: Option<Box<Held>>,
}

/// What records showed of an object's deletion and finalizers, and what followed.
#[derive(Debug, Clone, Default)]
struct Held {
    /// The object's deletionTimestamp, once a record showed it.
    deletion: Option<Nanos>,
    /// Finalizers the latest record showed, when one did.
    finalizers: Option<usize>,
    /// The first of them, for the hint.
    first_finalizer: String,
    reconciles_since_deletion: u32,
    errors_since_deletion: u32,
    /// The error of the latest failed reconcile since deletion.
    sample_error: String,
    evidence: Evidence,
}

impl Held {
    /// Deleted, and finalizers hold it.
    fn pending(&self) -> bool {
        self.deletion.is_some() && self.finalizers.is_some_and(|count| count > 0)
    }

    fn count_since_deletion(&mut self, note: ReconcileNote, outcome: &Outcome) {
        if note.new {
            self.reconciles_since_deletion = self.reconciles_since_deletion.saturating_add(1);
        }
        if let (true, Outcome::Error(error)) = (note.first_outcome, outcome) {
            self.errors_since_deletion = self.errors_since_deletion.saturating_add(1);
            self.sample_error = bounded(error);
        }
    }

    fn evidence(&self) -> Vec<String> {
        let mut evidence = self.evidence.as_slice().to_vec();
        if !self.sample_error.is_empty() {
            evidence.insert(0, format!("error: {}", self.sample_error));
            evidence.truncate(opscope_model::signal::MAX_EVIDENCE);
        }
        evidence
    }
}

impl FinalizerState {
    /// The object shows deletion and finalizers: a deadline runs.
    pub(crate) fn pending(&self) -> bool {
        self.pending_deletion().is_some()
    }

    /// What is held, and since when, while the object is deleted and held.
    fn pending_deletion(&self) -> Option<(&Held, Nanos)> {
        let held = self.held.as_deref().filter(|held| held.pending())?;
        Some((held, held.deletion?))
    }

    pub(crate) fn record_state(&mut self, time: Nanos, state: &ObjectState) {
        if self.gone_at.is_some_and(|gone| time <= gone) {
            return;
        }
        // Showing no deletion and no finalizers changes nothing until either is shown.
        let shows_finalizers = state.finalizers.as_ref().is_some_and(|f| !f.is_empty());
        if self.held.is_none() && state.deletion_timestamp.is_none() && !shows_finalizers {
            return;
        }
        let held = self.held.get_or_insert_default();
        if let Some(deletion) = state.deletion_timestamp {
            if held.deletion != Some(deletion) {
                held.reconciles_since_deletion = 0;
                held.errors_since_deletion = 0;
            }
            held.deletion = Some(deletion);
        }
        if let Some(finalizers) = &state.finalizers {
            held.finalizers = Some(finalizers.len());
            held.first_finalizer = finalizers
                .first()
                .map(|name| bounded(name))
                .unwrap_or_default();
        }
    }

    pub(crate) fn record_gone(&mut self, time: Nanos) {
        self.gone_at = self.gone_at.max(Some(time));
        if let Some(held) = self.held.as_deref_mut() {
            held.deletion = None;
            held.finalizers = None;
        }
    }

    pub(crate) fn record_reconcile(
        &mut self,
        note: ReconcileNote,
        outcome: &Outcome,
        reference: &LazyReference,
    ) {
        self.last_reconcile = self.last_reconcile.max(Some(note.at));
        if note.first_outcome && self.last_outcome.is_none_or(|(at, _)| note.at >= at) {
            self.last_outcome = Some((note.at, matches!(outcome, Outcome::Error(_))));
        }
        let Some(held) = self.held.as_deref_mut() else {
            return;
        };
        if held.deletion.is_none_or(|deletion| note.at < deletion) {
            return;
        }
        if let Some(reference) = reference.get() {
            held.evidence.push(reference);
        }
        held.count_since_deletion(note, outcome);
    }

    /// When the object must be looked at again whatever happens: its deadline, and
    /// while firing, the next update of its age or its turning critical.
    pub(crate) fn next_check(
        &self,
        config: &FinalizerLeakConfig,
        signal: Option<&SignalTrack>,
        now: Nanos,
        update_interval: Nanos,
    ) -> Option<Nanos> {
        let (_, deletion) = self.pending_deletion()?;
        let max_age = nanos(config.max_age);
        if signal.is_none() {
            return Some(deletion.saturating_add(max_age).saturating_add(1));
        }
        let critical_at = deletion
            .saturating_add(critical_age(max_age))
            .saturating_add(1);
        let next_update = now.saturating_add(update_interval);
        Some(if now < critical_at {
            next_update.min(critical_at)
        } else {
            next_update
        })
    }

    fn cause(&self, deletion: Nanos) -> FinalizerCause {
        if self
            .last_reconcile
            .is_none_or(|at| at < deletion_passed(deletion))
        {
            FinalizerCause::NoController
        } else if self
            .last_outcome
            .is_some_and(|(at, failed)| failed && at >= deletion)
        {
            FinalizerCause::CleanupFailing
        } else {
            FinalizerCause::FinalizerNotRemoved
        }
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.held.as_deref().map_or(0, |held| {
            std::mem::size_of::<Held>()
                + held.first_finalizer.capacity()
                + held.sample_error.capacity()
                + held.evidence.footprint()
        })
    }
}

/// When the deletion had surely happened. The API server writes `deletionTimestamp`
/// in whole seconds: the deletion was somewhere within that second, so a reconcile in
/// it may have come before (the one that added the finalizer, say) and does not show
/// that a controller is there to clean up.
fn deletion_passed(deletion: Nanos) -> Nanos {
    const SECOND: Nanos = 1_000_000_000;
    if deletion.is_multiple_of(SECOND) {
        deletion.saturating_add(SECOND)
    } else {
        deletion
    }
}

fn critical_age(max_age: Nanos) -> Nanos {
    (max_age as f64 * CRITICAL_FACTOR) as Nanos
}

/// Whether the object is held by its finalizers past the age allowed at `now`, and why.
pub(crate) fn evaluate<'a>(
    state: &'a FinalizerState,
    config: &FinalizerLeakConfig,
    now: Nanos,
) -> Option<Finding<'a>> {
    let (held, deletion) = state.pending_deletion()?;
    let age = now.saturating_sub(deletion);
    let max_age = nanos(config.max_age);
    if age <= max_age {
        return None;
    }
    let cause = state.cause(deletion);
    let age_seconds = age as f64 / 1e9;
    Some(Finding {
        cause: Cow::Borrowed(cause.name()),
        severity: severity_for(age as f64, max_age as f64),
        figures: figures([
            ("age_seconds", age_seconds.floor()),
            ("finalizers", held.finalizers.unwrap_or_default() as f64),
            (
                "reconciles_since_deletion",
                f64::from(held.reconciles_since_deletion),
            ),
            (
                "errors_since_deletion",
                f64::from(held.errors_since_deletion),
            ),
        ]),
        evidence: Cow::Owned(held.evidence()),
        hint: Cow::Owned(cause.hint(&held.first_finalizer)),
        below_threshold: false,
    })
}

enum FinalizerCause {
    CleanupFailing,
    NoController,
    FinalizerNotRemoved,
}

impl FinalizerCause {
    fn name(&self) -> &'static str {
        match self {
            Self::CleanupFailing => "cleanup_failing",
            Self::NoController => "no_controller",
            Self::FinalizerNotRemoved => "finalizer_not_removed",
        }
    }

    fn hint(&self, finalizer: &str) -> String {
        match self {
            Self::CleanupFailing => format!(
                "The cleanup behind finalizer `{finalizer}` keeps failing (see the error in the evidence): \
                 fix it; the deletion branch should remove the finalizer once cleanup succeeds."
            ),
            Self::NoController => format!(
                "No reconcile of the object since its deletion: check that the controller owning finalizer \
                 `{finalizer}` is running and watching this kind; remove the finalizer by hand only once \
                 its cleanup is done."
            ),
            Self::FinalizerNotRemoved => format!(
                "Reconciles succeed but finalizer `{finalizer}` stays: remove the finalizer in the deletion \
                 branch once cleanup succeeds, and update the object."
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::correlator::test_support::*;
    use opscope_model::signal::{Severity, Signal, SignalState, SignalType};

    fn finalizer_signals(signals: &[Signal]) -> Vec<&Signal> {
        signals
            .iter()
            .filter(|s| s.signal == SignalType::FinalizerLeak)
            .collect()
    }

    #[test]
    fn only_an_object_shown_deleted_or_with_finalizers_holds_their_state() {
        use super::{FinalizerState, Outcome};
        use crate::correlator::intake::events::ObjectState;
        use crate::correlator::objects::recent_reconciles::ReconcileNote;
        let mut state = FinalizerState::default();
        let no_finalizers = ObjectState {
            finalizers: Some(Vec::new()),
            ..ObjectState::default()
        };
        state.record_state(secs(1), &no_finalizers);
        let nowhere = Default::default();
        let reference = super::LazyReference::new(&nowhere, "", "r1");
        state.record_reconcile(
            ReconcileNote::single(secs(2), true),
            &Outcome::Ok,
            &reference,
        );
        assert_eq!(state.footprint(), 0);
        assert!(!state.pending());

        let held = ObjectState {
            finalizers: Some(vec!["example.com/cleanup".into()]),
            ..ObjectState::default()
        };
        state.record_state(secs(3), &held);
        assert!(state.footprint() > 0);
        assert!(!state.pending(), "finalizers alone are no deletion");
        let deleted = ObjectState {
            deletion_timestamp: Some(secs(4)),
            ..ObjectState::default()
        };
        state.record_state(secs(4), &deleted);
        assert!(state.pending(), "the finalizers shown before still hold it");
        state.record_gone(secs(5));
        assert!(!state.pending());
    }

    fn deleting(name: &str, at: u64) -> Event {
        Ev::state(name, secs(at))
            .deleting(secs(at))
            .finalizers(&["widgets.example.com/cleanup"])
            .into()
    }

    #[test]
    fn fires_after_the_allowed_age_without_a_controller() {
        let signals = run_until(vec![deleting("w", 100)], secs(100 + 301));
        let fired = finalizer_signals(&signals);
        assert_eq!(fired.len(), 1, "{signals:#?}");
        assert_eq!(fired[0].cause, "no_controller");
        assert_eq!(fired[0].state, SignalState::Firing);
        assert_eq!(fired[0].severity, Severity::Warning);
        assert_eq!(fired[0].figures["age_seconds"], 301.0);
        assert_eq!(fired[0].figures["finalizers"], 1.0);
        assert!(fired[0].hint.contains("widgets.example.com/cleanup"));
    }

    #[test]
    fn does_not_fire_at_the_allowed_age() {
        let signals = run_until(vec![deleting("w", 100)], secs(400));
        assert!(finalizer_signals(&signals).is_empty());
    }

    #[test]
    fn fires_from_the_wall_clock_when_input_is_idle() {
        let mut correlator = correlator();
        correlator.observe(deleting("w", 100));
        assert!(correlator.advance(secs(100)).is_empty());
        let signals = correlator.advance(secs(1_000));
        assert_eq!(finalizer_signals(&signals).len(), 1);
        assert_eq!(correlator.active().len(), 1);
    }

    #[test]
    fn resolves_when_the_object_is_gone() {
        let events = vec![deleting("w", 0), Ev::gone("w", secs(400)).into()];
        let signals = run_until(events, secs(500));
        let states: Vec<SignalState> = finalizer_signals(&signals)
            .iter()
            .map(|s| s.state)
            .collect();
        assert_eq!(states.first(), Some(&SignalState::Firing));
        assert_eq!(states.last(), Some(&SignalState::Resolved));
        assert_eq!(
            states
                .iter()
                .filter(|s| **s == SignalState::Resolved)
                .count(),
            1
        );
    }

    #[test]
    fn resolves_when_the_finalizers_are_removed() {
        let events = vec![
            deleting("w", 0),
            Ev::state("w", secs(400)).finalizers(&[]).into(),
        ];
        let signals = run_until(events, secs(500));
        let last = finalizer_signals(&signals).last().copied().unwrap();
        assert_eq!(last.state, SignalState::Resolved);
    }

    #[test]
    fn failing_reconciles_since_deletion_are_failing_cleanup() {
        let mut events = vec![deleting("w", 0)];
        events.extend((1..20).map(|n| {
            Ev::reconcile("w", secs(n * 15), &format!("r{n}"))
                .error("deleting bucket: AccessDenied")
                .into()
        }));
        let signals = run_until(events, secs(320));
        let signal = finalizer_signals(&signals)[0];
        assert_eq!(signal.cause, "cleanup_failing");
        assert_eq!(signal.evidence[0], "error: deleting bucket: AccessDenied");
        assert_eq!(signal.figures["errors_since_deletion"], 19.0);
    }

    #[test]
    fn successful_reconciles_that_keep_the_finalizer_are_named() {
        let events = vec![deleting("w", 0), Ev::reconcile("w", secs(10), "r1").into()];
        let signals = run_until(events, secs(320));
        assert_eq!(
            finalizer_signals(&signals)[0].cause,
            "finalizer_not_removed"
        );
    }

    #[test]
    fn a_reconcile_within_the_deletion_second_is_no_controller() {
        // Seen on a real API server: the reconcile that added the finalizer at
        // 44.3 s, the operator stopped, the object deleted at 44.6 s, written
        // `deletionTimestamp: ...:44Z`.
        let events = vec![
            Ev::reconcile("w", millis(44_300), "r1").into(),
            deleting("w", 44),
        ];
        let signals = run_until(events, secs(44 + 301));
        assert_eq!(finalizer_signals(&signals)[0].cause, "no_controller");
    }

    #[test]
    fn out_of_order_input_within_lateness_fires_the_same() {
        let mut events = vec![
            Ev::reconcile("w", secs(30), "r1").error("boom").into(),
            deleting("w", 10),
        ];
        events.push(Ev::reconcile("w", secs(35), "r2").error("boom").into());
        let signals = run_until(events, secs(320));
        assert_eq!(finalizer_signals(&signals)[0].cause, "cleanup_failing");
    }

    #[test]
    fn ten_times_the_allowed_age_is_critical() {
        let signals = run_until(vec![deleting("w", 0)], secs(3_001));
        let last = finalizer_signals(&signals).last().copied().unwrap();
        assert_eq!(last.severity, Severity::Critical);
        let critical = finalizer_signals(&signals)
            .iter()
            .filter(|s| s.severity == Severity::Critical)
            .count();
        assert_eq!(critical, 1);
    }
}
