//! The operator metrics opscope derives from correlator events: reconciles by result,
//! their duration (with `trace_id`/`reconcile_id` exemplars) and API writes.
//!
//! A reconcile is counted once, when an event first tells its outcome (ok, error,
//! requeue, requeue_after); events that do not tell it are not counted. Its duration
//! is observed once, from the first event that has it (a reconcile span). Records of
//! one reconcile share its id, so the ids of recent reconciles are remembered (a
//! bounded set); a source without ids makes every record one reconcile.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use opscope_processors::correlator::events::{
    Event, ObjectEvent, ObjectEventKind, Outcome, Reconcile, Write,
};

use super::model::{Change, Exemplar, FamilyDesc, HistogramValue, Kind, Labels, Op, Value};
use super::names::LabelSet;

pub const RECONCILES: &str = "opscope_reconcile";
pub const RECONCILE_DURATION: &str = "opscope_reconcile_duration_seconds";
pub const API_WRITES: &str = "opscope_api_writes";

/// Buckets of the reconcile duration histogram, in seconds.
pub const DURATION_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Characters (names and values) an OpenMetrics exemplar's labels may have.
const MAX_EXEMPLAR_LABEL_CHARS: usize = 128;

/// Reconcile ids remembered; the oldest is forgotten first.
const REMEMBERED_RECONCILES: usize = 65_536;

/// What has been taken from one reconcile so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    pub counted: bool,
    pub timed: bool,
}

/// The reconciles counted or timed recently, by id.
#[derive(Debug, Default)]
pub struct RecentReconciles {
    seen: HashMap<Arc<str>, Seen>,
    order: VecDeque<Arc<str>>,
}

impl RecentReconciles {
    fn get(&self, id: &str) -> Seen {
        self.seen.get(id).copied().unwrap_or_default()
    }

    /// Records what a committed batch took from reconciles.
    pub fn remember(&mut self, marks: Vec<(Arc<str>, Seen)>) {
        for (id, seen) in marks {
            if self.seen.insert(Arc::clone(&id), seen).is_none() {
                self.order.push_back(id);
            }
            while self.order.len() > REMEMBERED_RECONCILES {
                if let Some(oldest) = self.order.pop_front() {
                    self.seen.remove(&oldest);
                }
            }
        }
    }
}

/// The series changes of a batch's events, and what to remember of its reconciles.
pub struct EventChanges {
    pub series: Vec<Change>,
    pub marks: Vec<(Arc<str>, Seen)>,
}

/// The changes a batch's events make; `extra` labels go on every series.
pub fn event_changes(events: &[Event], memory: &RecentReconciles, extra: &Labels) -> EventChanges {
    let families = Families::new();
    let mut batch: HashMap<Arc<str>, Seen> = HashMap::new();
    let mut series = Vec::new();
    for event in events {
        let Event::Object(event) = event else {
            continue;
        };
        match &event.kind {
            ObjectEventKind::Reconcile(reconcile) => {
                let seen = reconcile_seen(reconcile, memory, &batch);
                let taken =
                    reconcile_changes(event, reconcile, seen, &families, extra, &mut series);
                if taken != seen && !reconcile.reconcile_id.is_empty() {
                    batch.insert(Arc::from(reconcile.reconcile_id.as_str()), taken);
                }
            }
            ObjectEventKind::Write(write) => {
                series.push(write_change(event, write, &families, extra));
            }
            ObjectEventKind::State(_) | ObjectEventKind::Gone => {}
        }
    }
    EventChanges {
        series,
        marks: batch.into_iter().collect(),
    }
}

struct Families {
    reconciles: Arc<FamilyDesc>,
    duration: Arc<FamilyDesc>,
    writes: Arc<FamilyDesc>,
}

impl Families {
    fn new() -> Self {
        let family = |name: &str, help: &str, unit: &str, kind| {
            Arc::new(FamilyDesc {
                name: name.into(),
                help: help.into(),
                unit: unit.into(),
                kind,
                expires: true,
            })
        };
        Self {
            reconciles: family(
                RECONCILES,
                "Reconciles seen, by operator, controller, object kind and result.",
                "",
                Kind::Counter,
            ),
            duration: family(
                RECONCILE_DURATION,
                "Duration of reconciles, from reconcile spans.",
                "seconds",
                Kind::Histogram,
            ),
            writes: family(
                API_WRITES,
                "Writes to the API server, by operator, resource, verb and HTTP code.",
                "",
                Kind::Counter,
            ),
        }
    }
}

fn reconcile_seen(
    reconcile: &Reconcile,
    memory: &RecentReconciles,
    batch: &HashMap<Arc<str>, Seen>,
) -> Seen {
    let id = reconcile.reconcile_id.as_str();
    if id.is_empty() {
        return Seen::default();
    }
    batch.get(id).copied().unwrap_or_else(|| memory.get(id))
}

/// Counts and times the reconcile where not done yet; returns what is now taken.
fn reconcile_changes(
    event: &ObjectEvent,
    reconcile: &Reconcile,
    seen: Seen,
    families: &Families,
    extra: &Labels,
    out: &mut Vec<Change>,
) -> Seen {
    let mut taken = seen;
    if let Some(result) = result_label(&reconcile.outcome)
        && !seen.counted
    {
        let mut labels = reconcile_labels(event, reconcile);
        labels.set("result", result);
        labels.add_defaults(extra);
        out.push(Change {
            family: Arc::clone(&families.reconciles),
            labels: labels.into_labels(),
            op: Op::Add(Value::Number(1.0)),
        });
        taken.counted = true;
    }
    if let Some(duration) = reconcile.duration
        && !seen.timed
    {
        let mut labels = reconcile_labels(event, reconcile);
        labels.add_defaults(extra);
        let seconds = duration.as_secs_f64();
        let observation =
            HistogramValue::observation(&DURATION_BUCKETS, seconds, exemplar(reconcile, seconds));
        out.push(Change {
            family: Arc::clone(&families.duration),
            labels: labels.into_labels(),
            op: Op::Add(Value::Histogram(observation)),
        });
        taken.timed = true;
    }
    taken
}

fn reconcile_labels(event: &ObjectEvent, reconcile: &Reconcile) -> LabelSet {
    let mut labels = LabelSet::default();
    labels.set("operator_name", &event.operator.name);
    labels.set("k8s_namespace", &event.operator.namespace);
    labels.set("controller", &reconcile.controller);
    labels.set("kind", object_kind(event));
    labels
}

fn object_kind(event: &ObjectEvent) -> &str {
    if event.object.kind.is_empty() {
        &event.object.resource
    } else {
        &event.object.kind
    }
}

fn result_label(outcome: &Outcome) -> Option<&'static str> {
    match outcome {
        Outcome::Unknown => None,
        Outcome::Ok => Some("ok"),
        Outcome::Error(_) => Some("error"),
        Outcome::Requeue => Some("requeue"),
        Outcome::RequeueAfter(_) => Some("requeue_after"),
    }
}

/// The ids that lead from a duration to its trace and reconcile, the trace id first,
/// within the 128 characters OpenMetrics allows an exemplar's labels; none when
/// unknown.
fn exemplar(reconcile: &Reconcile, seconds: f64) -> Option<Exemplar> {
    let mut labels = Labels::new();
    let mut room = MAX_EXEMPLAR_LABEL_CHARS;
    for (name, value) in [
        ("trace_id", &reconcile.trace_id),
        ("reconcile_id", &reconcile.reconcile_id),
    ] {
        let length = name.len() + value.chars().count();
        if !value.is_empty() && length <= room {
            room -= length;
            labels.push((name.to_string(), value.clone()));
        }
    }
    labels.sort();
    (!labels.is_empty()).then_some(Exemplar {
        labels,
        value: seconds,
    })
}

fn write_change(event: &ObjectEvent, write: &Write, families: &Families, extra: &Labels) -> Change {
    let mut labels = LabelSet::default();
    labels.set("operator_name", &event.operator.name);
    labels.set("k8s_namespace", &event.operator.namespace);
    labels.set("resource", &event.object.key().resource);
    labels.set("subresource", &write.subresource);
    labels.set("verb", &write.verb);
    if write.code != 0 {
        labels.set("code", &write.code.to_string());
    }
    labels.add_defaults(extra);
    Change {
        family: Arc::clone(&families.writes),
        labels: labels.into_labels(),
        op: Op::Add(Value::Number(1.0)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opscope_processors::correlator::events::RecordPlace;

    use opscope_model::kubernetes::{ObjectRef, OperatorRef};

    use super::*;

    fn object_event(kind: ObjectEventKind) -> Event {
        Event::Object(ObjectEvent {
            time: 1,
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
            kind,
            place: RecordPlace::default(),
        })
    }

    fn reconcile(id: &str, outcome: Outcome, duration: Option<Duration>) -> Event {
        object_event(ObjectEventKind::Reconcile(Reconcile {
            controller: "widget".into(),
            reconcile_id: id.into(),
            trace_id: if duration.is_some() {
                "ab".repeat(16)
            } else {
                String::new()
            },
            duration,
            outcome,
            ..Reconcile::default()
        }))
    }

    fn label<'a>(change: &'a Change, name: &str) -> Option<&'a str> {
        change
            .labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_reconcile_is_counted_once_when_its_outcome_is_known() {
        let mut memory = RecentReconciles::default();
        let first = [
            reconcile("r1", Outcome::Unknown, None),
            reconcile("r1", Outcome::Ok, None),
            reconcile("r1", Outcome::Ok, None),
            reconcile("r2", Outcome::Unknown, None),
        ];
        let changes = event_changes(&first, &memory, &Labels::new());
        assert_eq!(changes.series.len(), 1);
        let counted = changes.series.first().expect("one change");
        assert_eq!(counted.family.name, RECONCILES);
        assert_eq!(label(counted, "result"), Some("ok"));
        assert_eq!(label(counted, "kind"), Some("Widget"));
        assert_eq!(label(counted, "operator_name"), Some("widget-operator"));
        assert_eq!(label(counted, "k8s_namespace"), Some("operators"));
        memory.remember(changes.marks);
        let later = [
            reconcile("r1", Outcome::Error("late".into()), None),
            reconcile("r2", Outcome::Requeue, None),
            reconcile("", Outcome::Ok, None),
            reconcile("", Outcome::Ok, None),
        ];
        let changes = event_changes(&later, &memory, &Labels::new());
        let results: Vec<_> = changes.series.iter().map(|c| label(c, "result")).collect();
        assert_eq!(results, vec![Some("requeue"), Some("ok"), Some("ok")]);
    }

    #[test]
    fn a_duration_is_observed_once_with_its_ids_as_exemplar() {
        let memory = RecentReconciles::default();
        let events = [
            reconcile("r1", Outcome::Ok, None),
            reconcile("r1", Outcome::Ok, Some(Duration::from_millis(300))),
            reconcile("r1", Outcome::Ok, Some(Duration::from_millis(300))),
        ];
        let changes = event_changes(&events, &memory, &Labels::new());
        let timed: Vec<_> = changes
            .series
            .iter()
            .filter(|c| c.family.name == RECONCILE_DURATION)
            .collect();
        assert_eq!(timed.len(), 1);
        let Some(Change {
            op: Op::Add(Value::Histogram(histogram)),
            labels,
            ..
        }) = timed.first()
        else {
            panic!("a histogram observation");
        };
        assert!(!labels.iter().any(|(name, _)| name == "result"));
        assert_eq!(histogram.counts.iter().sum::<u64>(), 1);
        let exemplar = histogram
            .exemplars
            .iter()
            .flatten()
            .next()
            .expect("an exemplar");
        let names: Vec<_> = exemplar.labels.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["reconcile_id", "trace_id"]);
        assert_eq!(exemplar.value, 0.3);
    }

    #[test]
    fn exemplars_keep_within_the_openmetrics_limit() {
        let long = Reconcile {
            reconcile_id: "x".repeat(100),
            trace_id: "ab".repeat(16),
            ..Reconcile::default()
        };
        let kept = exemplar(&long, 1.0).expect("the trace id fits");
        let names: Vec<_> = kept.labels.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["trace_id"]);
        assert!(exemplar(&Reconcile::default(), 1.0).is_none());
    }

    #[test]
    fn writes_are_counted_by_resource_verb_and_code() {
        let write = object_event(ObjectEventKind::Write(Write {
            verb: "update".into(),
            subresource: "status".into(),
            code: 409,
            ..Write::default()
        }));
        let extra = vec![("cluster".to_string(), "c1".to_string())];
        let changes = event_changes(&[write], &RecentReconciles::default(), &extra);
        let change = changes.series.first().expect("one change");
        assert_eq!(change.family.name, API_WRITES);
        let labels: Vec<_> = change
            .labels
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        assert_eq!(
            labels,
            vec![
                "cluster=c1",
                "code=409",
                "k8s_namespace=operators",
                "operator_name=widget-operator",
                "resource=widgets",
                "subresource=status",
                "verb=update",
            ]
        );
    }

    #[test]
    fn remembered_ids_are_bounded() {
        let mut memory = RecentReconciles::default();
        let marks = (0..REMEMBERED_RECONCILES + 10)
            .map(|i| {
                (
                    Arc::from(format!("r{i}").as_str()),
                    Seen {
                        counted: true,
                        timed: false,
                    },
                )
            })
            .collect();
        memory.remember(marks);
        assert_eq!(memory.seen.len(), REMEMBERED_RECONCILES);
        assert_eq!(memory.order.len(), REMEMBERED_RECONCILES);
        assert_eq!(memory.get("r0"), Seen::default());
        assert!(
            memory
                .get(&format!("r{}", REMEMBERED_RECONCILES + 9))
                .counted
        );
    }
}
