//! The life of one signal: `firing` when its detector first finds it, updates at most
//! once per update interval while it changes, `resolved` when the detector stops finding it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use opscope_model::timestamp::Nanos;

use opscope_model::kubernetes::{ObjectKey, ObjectRef, OperatorRef};
use opscope_model::signal::{Severity, Signal, SignalState, SignalType};

/// A signal turns critical at this many times its threshold.
pub(crate) const CRITICAL_FACTOR: f64 = 10.0;

/// `critical` when `measured` reaches [`CRITICAL_FACTOR`] times `threshold`.
pub(crate) fn severity_for(measured: f64, threshold: f64) -> Severity {
    if measured >= threshold * CRITICAL_FACTOR {
        Severity::Critical
    } else {
        Severity::Warning
    }
}

/// What a detector finds while its signal holds. A firing signal is evaluated on
/// every batch, so what a finding says is borrowed where it can be (static causes,
/// hints and figure names, the detector's evidence) and copied into the signal
/// only when it changed. Figures have distinct names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finding<'a> {
    pub(crate) cause: Cow<'a, str>,
    pub(crate) severity: Severity,
    pub(crate) figures: Figures,
    pub(crate) evidence: Cow<'a, [String]>,
    pub(crate) hint: Cow<'a, str>,
    /// The signal holds only because it has not yet fallen below its resolve level:
    /// it keeps what it showed when last above its threshold.
    pub(crate) below_threshold: bool,
}

/// A finding's measured figures, by name.
pub(crate) type Figures = Vec<(&'static str, f64)>;

/// Names the figures of a finding: `figures([("reconciles", 42.0)])`.
pub(crate) fn figures<const N: usize>(named: [(&'static str, f64); N]) -> Figures {
    Vec::from(named)
}

/// What a signal is about.
pub(crate) struct Subject<'a> {
    pub(crate) signal: SignalType,
    pub(crate) key: &'a ObjectKey,
    pub(crate) object: &'a ObjectRef,
    pub(crate) operator: &'a OperatorRef,
    pub(crate) controller: &'a str,
}

impl Subject<'_> {
    fn id(&self) -> String {
        let key = self.key;
        let subject = if key.namespace.is_empty() {
            format!("{}/{}", key.resource, key.name)
        } else {
            format!("{}/{}/{}", key.resource, key.namespace, key.name)
        };
        Signal::id_for(self.signal, &subject)
    }
}

/// What was last sent of a firing signal, to tell whether it changed since.
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    cause: String,
    severity: Severity,
    figures: BTreeMap<String, f64>,
}

impl Sent {
    fn of(signal: &Signal) -> Self {
        Self {
            cause: signal.cause.clone(),
            severity: signal.severity,
            figures: signal.figures.clone(),
        }
    }

    fn matches(&self, signal: &Signal) -> bool {
        self.cause == signal.cause
            && self.severity == signal.severity
            && self.figures == signal.figures
    }
}

/// A firing signal: its latest state and what was last sent of it. Boxed whole, so
/// that an object with nothing firing holds one pointer per detector.
#[derive(Debug, Clone)]
pub(crate) struct SignalTrack(Box<Tracked>);

#[derive(Debug, Clone)]
struct Tracked {
    current: Signal,
    sent: Sent,
    sent_at: Nanos,
}

impl SignalTrack {
    /// The latest state of the signal.
    pub(crate) fn signal(&self) -> &Signal {
        &self.0.current
    }

    /// Resolves the signal at `now`.
    pub(crate) fn resolve(self, now: Nanos) -> Signal {
        let mut signal = self.0.current;
        signal.state = SignalState::Resolved;
        signal.last_seen = signal.last_seen.max(now);
        signal
    }

    fn start(finding: Finding, subject: &Subject, now: Nanos) -> (Self, Signal) {
        let signal = Signal {
            id: subject.id(),
            signal: subject.signal,
            cause: finding.cause.into_owned(),
            severity: finding.severity,
            state: SignalState::Firing,
            object: subject.object.clone(),
            operator: subject.operator.clone(),
            controller: subject.controller.to_string(),
            first_seen: now,
            last_seen: now,
            figures: finding
                .figures
                .iter()
                .map(|(name, value)| (name.to_string(), *value))
                .collect(),
            evidence: finding.evidence.into_owned(),
            hint: finding.hint.into_owned(),
        };
        let track = Self(Box::new(Tracked {
            sent: Sent::of(&signal),
            current: signal.clone(),
            sent_at: now,
        }));
        (track, signal)
    }

    /// Takes the latest finding; returns an update when it changed and is due.
    fn update(
        &mut self,
        finding: Finding,
        subject: &Subject,
        now: Nanos,
        interval: Nanos,
    ) -> Option<Signal> {
        if finding.below_threshold {
            return None;
        }
        let track = &mut *self.0;
        let signal = &mut track.current;
        refresh_text(&mut signal.cause, finding.cause);
        signal.severity = finding.severity;
        refresh_figures(&mut signal.figures, &finding.figures);
        refresh_all(&mut signal.evidence, &finding.evidence);
        refresh_text(&mut signal.hint, finding.hint);
        refresh(&mut signal.object, subject.object);
        refresh(&mut signal.operator, subject.operator);
        if signal.controller != subject.controller {
            signal.controller = subject.controller.to_string();
        }
        signal.last_seen = signal.last_seen.max(now);
        // A new cause is news at once: the first finding of a loop often comes from
        // the fastest source (pod logs) before the one that names its cause (audit
        // bodies, traces, a second later). Figures alone wait for the interval.
        let due = now >= track.sent_at.saturating_add(interval)
            || track.sent.cause != track.current.cause;
        if !due || track.sent.matches(&track.current) {
            return None;
        }
        track.sent = Sent::of(&track.current);
        track.sent_at = now;
        Some(track.current.clone())
    }
}

fn refresh_text(mine: &mut String, latest: Cow<str>) {
    if *mine != latest {
        *mine = latest.into_owned();
    }
}

/// Takes the latest values; the names are written anew only when they changed.
fn refresh_figures(mine: &mut BTreeMap<String, f64>, latest: &[(&str, f64)]) {
    let same_names =
        mine.len() == latest.len() && latest.iter().all(|(name, _)| mine.contains_key(*name));
    if !same_names {
        *mine = latest
            .iter()
            .map(|(name, value)| (name.to_string(), *value))
            .collect();
        return;
    }
    for (name, value) in latest {
        if let Some(held) = mine.get_mut(*name) {
            *held = *value;
        }
    }
}

/// Takes `latest` when it differs, reusing the strings already held.
fn refresh_all(mine: &mut Vec<String>, latest: &[String]) {
    if mine.as_slice() == latest {
        return;
    }
    mine.truncate(latest.len());
    for (at, text) in latest.iter().enumerate() {
        match mine.get_mut(at) {
            Some(held) => held.clone_from(text),
            None => mine.push(text.clone()),
        }
    }
}

/// Takes `latest` when it differs, sparing a copy when it does not.
fn refresh<T: PartialEq + Clone>(mine: &mut T, latest: &T) {
    if mine != latest {
        mine.clone_from(latest);
    }
}

/// Moves the signal of `subject` on with the detector's latest `finding` at `now`
/// and returns the signal to send, if any.
pub(crate) fn step(
    track: &mut Option<SignalTrack>,
    finding: Option<Finding>,
    subject: &Subject,
    now: Nanos,
    update_interval: Nanos,
) -> Option<Signal> {
    match (track.take(), finding) {
        (None, None) => None,
        (None, Some(finding)) => {
            let (started, signal) = SignalTrack::start(finding, subject, now);
            *track = Some(started);
            Some(signal)
        }
        (Some(mut firing), Some(finding)) => {
            let update = firing.update(finding, subject, now, update_interval);
            *track = Some(firing);
            update
        }
        (Some(firing), None) => Some(firing.resolve(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(cause: &'static str, reconciles: f64) -> Finding<'static> {
        Finding {
            cause: cause.into(),
            severity: Severity::Warning,
            figures: figures([("reconciles", reconciles)]),
            evidence: Cow::Owned(vec!["trace abc".into()]),
            hint: "fix it".into(),
            below_threshold: false,
        }
    }

    fn steps(findings: &[(Nanos, Option<Finding>)]) -> Vec<(Nanos, SignalState, f64)> {
        let key = ObjectKey {
            namespace: "ns".into(),
            resource: "widgets".into(),
            name: "w".into(),
        };
        let object = ObjectRef::default();
        let operator = OperatorRef::default();
        let subject = Subject {
            signal: SignalType::ReconcileLoop,
            key: &key,
            object: &object,
            operator: &operator,
            controller: "widget",
        };
        let mut track = None;
        findings
            .iter()
            .filter_map(|(now, finding)| step(&mut track, finding.clone(), &subject, *now, 30))
            .map(|signal| {
                assert_eq!(signal.id, "reconcile_loop:widgets/ns/w");
                (signal.last_seen, signal.state, signal.figures["reconciles"])
            })
            .collect()
    }

    #[test]
    fn fires_updates_when_changed_and_due_then_resolves() {
        let sent = steps(&[
            (0, Some(finding("c", 30.0))),
            (10, Some(finding("c", 40.0))),
            (20, Some(finding("c", 40.0))),
            (30, Some(finding("c", 45.0))),
            (40, Some(finding("c", 45.0))),
            (70, Some(finding("c", 45.0))),
            (80, None),
            (90, None),
        ]);
        assert_eq!(
            sent,
            [
                (0, SignalState::Firing, 30.0),
                (30, SignalState::Firing, 45.0),
                (80, SignalState::Resolved, 45.0),
            ]
        );
    }

    #[test]
    fn a_new_cause_is_sent_at_once() {
        let sent = steps(&[
            (0, Some(finding("unknown", 30.0))),
            (1, Some(finding("unknown", 31.0))),
            (
                2,
                Some(finding("field_churn:status.lastReconcileTime", 32.0)),
            ),
            (
                3,
                Some(finding("field_churn:status.lastReconcileTime", 33.0)),
            ),
        ]);
        assert_eq!(
            sent,
            [
                (0, SignalState::Firing, 30.0),
                (2, SignalState::Firing, 32.0),
            ]
        );
    }

    #[test]
    fn severity_turns_critical_at_ten_times_the_threshold() {
        assert_eq!(severity_for(299.0, 30.0), Severity::Warning);
        assert_eq!(severity_for(300.0, 30.0), Severity::Critical);
    }
}
