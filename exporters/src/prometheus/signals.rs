//! Signals as series: `opscope_signal_active` is 1 while a signal fires (one series
//! per signal id, replaced when its cause or severity changes, removed when it
//! resolves) and `opscope_signals_total` counts signals that start firing.

use std::collections::HashMap;
use std::sync::Arc;

use opscope_model::signal::{Signal, SignalState};

use super::model::{Change, FamilyDesc, Kind, Labels, Op, Value};
use super::names::LabelSet;

pub const SIGNAL_ACTIVE: &str = "opscope_signal_active";
pub const SIGNALS: &str = "opscope_signals";

/// Signals tracked as firing at most; more are refused (and counted).
const MAX_ACTIVE_SIGNALS: usize = 10_000;

/// The series of each firing signal, by signal id.
#[derive(Debug, Default)]
pub struct ActiveSignals(HashMap<String, Labels>);

impl ActiveSignals {
    /// Records what a committed batch did to signals: labels while firing, `None`
    /// once resolved.
    pub fn remember(&mut self, marks: Vec<(String, Option<Labels>)>) {
        for (id, labels) in marks {
            match labels {
                Some(labels) => self.0.insert(id, labels),
                None => self.0.remove(&id),
            };
        }
    }
}

/// The series changes of a batch of signal changes, and what to remember.
pub struct SignalChanges {
    pub series: Vec<Change>,
    pub marks: Vec<(String, Option<Labels>)>,
    /// Signals that started firing beyond [`MAX_ACTIVE_SIGNALS`].
    pub refused: u64,
}

pub fn signal_changes(signals: &[Signal], active: &ActiveSignals, extra: &Labels) -> SignalChanges {
    let families = Families::new();
    let mut batch: HashMap<&str, Option<Labels>> = HashMap::new();
    let mut started = 0usize;
    let mut out = SignalChanges {
        series: Vec::new(),
        marks: Vec::new(),
        refused: 0,
    };
    for signal in signals {
        let current = match batch.get(signal.id.as_str()) {
            Some(labels) => labels.as_ref(),
            None => active.0.get(&signal.id),
        };
        let next = (signal.state == SignalState::Firing).then(|| active_labels(signal, extra));
        if current.is_none() && next.is_some() {
            if active.0.len() + started >= MAX_ACTIVE_SIGNALS {
                out.refused += 1;
                continue;
            }
            started += 1;
            out.series.push(families.started(signal, extra));
        }
        families.replace(current, next.as_ref(), &mut out.series);
        batch.insert(&signal.id, next);
    }
    out.marks = batch
        .into_iter()
        .map(|(id, labels)| (id.to_string(), labels))
        .collect();
    out
}

struct Families {
    active: Arc<FamilyDesc>,
    started: Arc<FamilyDesc>,
}

impl Families {
    fn new() -> Self {
        let family = |name: &str, help: &str, kind| {
            Arc::new(FamilyDesc {
                name: name.into(),
                help: help.into(),
                unit: String::new(),
                kind,
                expires: false,
            })
        };
        Self {
            active: family(
                SIGNAL_ACTIVE,
                "1 while an opscope signal fires about an object.",
                Kind::Gauge,
            ),
            started: family(
                SIGNALS,
                "opscope signals that started firing.",
                Kind::Counter,
            ),
        }
    }

    /// One more start of this signal type and cause.
    fn started(&self, signal: &Signal, extra: &Labels) -> Change {
        let mut labels = LabelSet::default();
        labels.set("signal", signal.signal.name());
        labels.set("cause", &signal.cause);
        labels.add_defaults(extra);
        Change {
            family: Arc::clone(&self.started),
            labels: labels.into_labels(),
            op: Op::Add(Value::Number(1.0)),
        }
    }

    /// The active series moves from `current` labels to `next` (none: resolved).
    fn replace(&self, current: Option<&Labels>, next: Option<&Labels>, out: &mut Vec<Change>) {
        if let Some(old) = current.filter(|old| Some(*old) != next) {
            out.push(Change {
                family: Arc::clone(&self.active),
                labels: old.clone(),
                op: Op::Remove,
            });
        }
        if let Some(labels) = next {
            out.push(Change {
                family: Arc::clone(&self.active),
                labels: labels.clone(),
                op: Op::Set(Value::Number(1.0)),
            });
        }
    }
}

fn active_labels(signal: &Signal, extra: &Labels) -> Labels {
    let object = &signal.object;
    let kind = if object.kind.is_empty() {
        &object.resource
    } else {
        &object.kind
    };
    let mut labels = LabelSet::default();
    labels.set("signal", signal.signal.name());
    labels.set("cause", &signal.cause);
    labels.set("severity", signal.severity.name());
    labels.set("operator_name", &signal.operator.name);
    labels.set("k8s_namespace", &signal.operator.namespace);
    labels.set("kind", kind);
    labels.set("namespace", &object.namespace);
    labels.set("name", &object.name);
    labels.add_defaults(extra);
    labels.into_labels()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use opscope_model::kubernetes::{ObjectRef, OperatorRef};

    use opscope_model::signal::{Severity, SignalType};

    use super::*;

    fn signal(state: SignalState, cause: &str, severity: Severity) -> Signal {
        Signal {
            id: "reconcile_loop:default/widgets/w1".into(),
            signal: SignalType::ReconcileLoop,
            cause: cause.into(),
            severity,
            state,
            object: ObjectRef {
                kind: "Widget".into(),
                namespace: "default".into(),
                name: "w1".into(),
                ..ObjectRef::default()
            },
            operator: OperatorRef {
                name: "widget-operator".into(),
                namespace: "operators".into(),
            },
            controller: "widget".into(),
            first_seen: 1,
            last_seen: 2,
            figures: BTreeMap::new(),
            evidence: Vec::new(),
            hint: String::new(),
        }
    }

    fn summary(changes: &SignalChanges) -> Vec<String> {
        changes
            .series
            .iter()
            .map(|change| {
                let op = match change.op {
                    Op::Set(_) => "set",
                    Op::Add(_) => "add",
                    Op::Remove => "remove",
                };
                let label = |name: &str| {
                    change
                        .labels
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or("", |(_, v)| v.as_str())
                        .to_string()
                };
                format!(
                    "{op} {} {} {}",
                    change.family.name,
                    label("cause"),
                    label("severity")
                )
            })
            .collect()
    }

    #[test]
    fn firing_adds_and_counts_then_changes_replace_and_resolving_removes() {
        let mut active = ActiveSignals::default();
        let firing = signal(
            SignalState::Firing,
            "self_triggered_status_write",
            Severity::Warning,
        );
        let changes = signal_changes(std::slice::from_ref(&firing), &active, &Labels::new());
        assert_eq!(
            summary(&changes),
            vec![
                "add opscope_signals self_triggered_status_write ",
                "set opscope_signal_active self_triggered_status_write warning",
            ]
        );
        let labels = &changes.series.last().expect("set").labels;
        let names: Vec<_> = labels.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "cause",
                "k8s_namespace",
                "kind",
                "name",
                "namespace",
                "operator_name",
                "severity",
                "signal"
            ]
        );
        active.remember(changes.marks);

        let worse = signal(
            SignalState::Firing,
            "field_churn:status.time",
            Severity::Critical,
        );
        let changes = signal_changes(&[firing.clone(), worse], &active, &Labels::new());
        assert_eq!(
            summary(&changes),
            vec![
                "set opscope_signal_active self_triggered_status_write warning",
                "remove opscope_signal_active self_triggered_status_write warning",
                "set opscope_signal_active field_churn:status.time critical",
            ]
        );
        active.remember(changes.marks);

        let resolved = signal(
            SignalState::Resolved,
            "field_churn:status.time",
            Severity::Critical,
        );
        let changes = signal_changes(std::slice::from_ref(&resolved), &active, &Labels::new());
        assert_eq!(
            summary(&changes),
            vec!["remove opscope_signal_active field_churn:status.time critical"]
        );
        active.remember(changes.marks);
        assert!(active.0.is_empty());
        let again = signal_changes(&[resolved], &active, &Labels::new());
        assert!(again.series.is_empty());
    }
}
