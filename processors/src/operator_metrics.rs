//! The operator metrics opscope derives from correlator events, as ordinary OTLP
//! metrics: reconciles by result (`opscope_reconcile`), their duration with the
//! trace and reconcile ids as exemplars (`opscope_reconcile_duration_seconds`) and
//! API writes (`opscope_api_writes`). What the `operator_metrics` connector hands
//! from the traces and logs pipelines to a metrics pipeline.
//!
//! A reconcile is counted once, when an event first tells its outcome (ok, error,
//! requeue, requeue_after); events that do not tell it are not counted. Its duration
//! is observed once, from the first event that has it (a reconcile span). Records of
//! one reconcile share its id, so the ids of recent reconciles are remembered (a
//! bounded set); a source without ids makes every record one reconcile. What a batch
//! took is remembered only once its metrics were handed on ([`OperatorMetrics::commit`]),
//! so a batch tried again is not counted twice.
//!
//! The sums and histograms are cumulative by default (running totals, which
//! Prometheus's OTLP endpoint needs), or the deltas of each batch with `temporality:
//! delta`; their attributes are already the label names the dashboards read (`operator_name`, `k8s_namespace`, `controller`, `kind`,
//! `result`; `resource`, `subresource`, `verb`, `code`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use opscope_model::config::{FieldError, Validate};
use opscope_model::timestamp::Nanos;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, Exemplar, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, exemplar, metric, number_data_point,
};

use serde::Deserialize;

use crate::correlator::events::{Event, ObjectEvent, ObjectEventKind, Outcome, Reconcile, Write};
use crate::cumulative::{PendingTotals, Totals};

pub const RECONCILES: &str = "opscope_reconcile";
pub const RECONCILE_DURATION: &str = "opscope_reconcile_duration_seconds";
pub const API_WRITES: &str = "opscope_api_writes";

/// Buckets of the reconcile duration histogram, in seconds.
pub const DURATION_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The instrumentation scope of the derived metrics.
pub const SCOPE: &str = "opscope/operator_metrics";

/// Reconcile ids remembered; the oldest is forgotten first.
const REMEMBERED_RECONCILES: usize = 65_536;

/// The `operator_metrics` connector's settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorMetricsConfig {
    #[serde(default)]
    pub temporality: Temporality,
}

/// How the derived sums and histograms are sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Temporality {
    /// Running totals since the series was first seen.
    #[default]
    Cumulative,
    /// What each batch adds.
    Delta,
}

impl Validate for OperatorMetricsConfig {
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }
}

/// What has been taken from one reconcile so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    pub counted: bool,
    pub timed: bool,
}

/// The derivation's state: the reconciles counted or timed recently, by id, and the
/// running totals when they are sent cumulative.
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    seen: HashMap<Arc<str>, Seen>,
    order: VecDeque<Arc<str>>,
    /// `None` (as `default()` has it): deltas.
    totals: Option<Totals>,
}

/// The metrics of a batch's events, and what to remember of its reconciles once
/// they are handed on.
#[derive(Debug, Default)]
pub struct Derived {
    /// `None` when the events say nothing countable.
    pub request: Option<ExportMetricsServiceRequest>,
    marks: Vec<(Arc<str>, Seen)>,
    totals: PendingTotals,
}

impl OperatorMetrics {
    pub fn new(config: &OperatorMetricsConfig) -> Self {
        Self {
            totals: (config.temporality == Temporality::Cumulative).then(Totals::default),
            ..Self::default()
        }
    }

    fn get(&self, id: &str) -> Seen {
        self.seen.get(id).copied().unwrap_or_default()
    }

    /// The metrics `events` make, without remembering anything.
    pub fn derive(&self, events: &[Event]) -> Derived {
        let mut batch: HashMap<Arc<str>, Seen> = HashMap::new();
        let mut points = Points::default();
        for event in events {
            let Event::Object(event) = event else {
                continue;
            };
            match &event.kind {
                ObjectEventKind::Reconcile(reconcile) => {
                    let id = reconcile.reconcile_id.as_str();
                    let seen = if id.is_empty() {
                        Seen::default()
                    } else {
                        batch.get(id).copied().unwrap_or_else(|| self.get(id))
                    };
                    let taken = points.reconcile(event, reconcile, seen);
                    if taken != seen && !id.is_empty() {
                        batch.insert(Arc::from(id), taken);
                    }
                }
                ObjectEventKind::Write(write) => points.write(event, write),
                ObjectEventKind::State(_) | ObjectEventKind::Gone => {}
            }
        }
        let mut request = points.into_request();
        let totals = match (&self.totals, request.as_mut()) {
            (Some(totals), Some(request)) => totals.accumulate(request),
            _ => PendingTotals::default(),
        };
        Derived {
            request,
            marks: batch.into_iter().collect(),
            totals,
        }
    }

    /// Remembers what a batch whose metrics were handed on took from reconciles.
    pub fn commit(&mut self, derived: Derived) {
        if let Some(totals) = self.totals.as_mut() {
            totals.commit(derived.totals);
        }
        for (id, seen) in derived.marks {
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

/// Attributes of a data point, sorted by key; empty values left out.
type Attributes = BTreeMap<&'static str, String>;

/// The data points of one batch: counts summed per attribute set, one histogram
/// point per observed duration (each with its exemplar).
#[derive(Default)]
struct Points {
    reconciles: BTreeMap<Attributes, Count>,
    durations: Vec<HistogramDataPoint>,
    writes: BTreeMap<Attributes, Count>,
}

/// A delta count and the event times it covers.
#[derive(Clone, Copy)]
struct Count {
    value: i64,
    start: Nanos,
    end: Nanos,
}

impl Count {
    fn add(counts: &mut BTreeMap<Attributes, Count>, attributes: Attributes, time: Nanos) {
        counts
            .entry(attributes)
            .and_modify(|count| {
                count.value += 1;
                count.start = count.start.min(time);
                count.end = count.end.max(time);
            })
            .or_insert(Count {
                value: 1,
                start: time,
                end: time,
            });
    }
}

impl Points {
    /// Counts and times the reconcile where not done yet; returns what is now taken.
    fn reconcile(&mut self, event: &ObjectEvent, reconcile: &Reconcile, seen: Seen) -> Seen {
        let mut taken = seen;
        if let Some(result) = result_label(&reconcile.outcome)
            && !seen.counted
        {
            let mut attributes = reconcile_attributes(event, reconcile);
            attributes.insert("result", result.to_string());
            Count::add(&mut self.reconciles, attributes, event.time);
            taken.counted = true;
        }
        if let Some(duration) = reconcile.duration
            && !seen.timed
        {
            let seconds = duration.as_secs_f64();
            let bucket = DURATION_BUCKETS
                .iter()
                .position(|bound| seconds <= *bound)
                .unwrap_or(DURATION_BUCKETS.len());
            self.durations.push(HistogramDataPoint {
                attributes: key_values(reconcile_attributes(event, reconcile)),
                start_time_unix_nano: event.time,
                time_unix_nano: event.time,
                count: 1,
                sum: Some(seconds),
                bucket_counts: (0..=DURATION_BUCKETS.len())
                    .map(|i| u64::from(i == bucket))
                    .collect(),
                explicit_bounds: DURATION_BUCKETS.to_vec(),
                exemplars: exemplar_of(reconcile, seconds, event.time)
                    .into_iter()
                    .collect(),
                ..HistogramDataPoint::default()
            });
            taken.timed = true;
        }
        taken
    }

    fn write(&mut self, event: &ObjectEvent, write: &Write) {
        let mut attributes = Attributes::new();
        put(&mut attributes, "operator_name", &event.operator.name);
        put(&mut attributes, "k8s_namespace", &event.operator.namespace);
        put(&mut attributes, "resource", &event.object.key().resource);
        put(&mut attributes, "subresource", &write.subresource);
        put(&mut attributes, "verb", &write.verb);
        if write.code != 0 {
            attributes.insert("code", write.code.to_string());
        }
        Count::add(&mut self.writes, attributes, event.time);
    }

    fn into_request(self) -> Option<ExportMetricsServiceRequest> {
        let mut metrics = Vec::new();
        if !self.reconciles.is_empty() {
            metrics.push(counter(
                RECONCILES,
                "Reconciles seen, by operator, controller, object kind and result.",
                self.reconciles,
            ));
        }
        if !self.durations.is_empty() {
            metrics.push(Metric {
                name: RECONCILE_DURATION.into(),
                description: "Duration of reconciles, from reconcile spans.".into(),
                unit: "s".into(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points: self.durations,
                    aggregation_temporality: AggregationTemporality::Delta as i32,
                })),
                ..Metric::default()
            });
        }
        if !self.writes.is_empty() {
            metrics.push(counter(
                API_WRITES,
                "Writes to the API server, by operator, resource, verb and HTTP code.",
                self.writes,
            ));
        }
        if metrics.is_empty() {
            return None;
        }
        Some(ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SCOPE.into(),
                        ..InstrumentationScope::default()
                    }),
                    metrics,
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        })
    }
}

/// A monotonic delta sum of `counts`.
fn counter(name: &str, description: &str, counts: BTreeMap<Attributes, Count>) -> Metric {
    let data_points = counts
        .into_iter()
        .map(|(attributes, count)| NumberDataPoint {
            attributes: key_values(attributes),
            start_time_unix_nano: count.start,
            time_unix_nano: count.end,
            value: Some(number_data_point::Value::AsInt(count.value)),
            ..NumberDataPoint::default()
        })
        .collect();
    Metric {
        name: name.into(),
        description: description.into(),
        data: Some(metric::Data::Sum(Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Delta as i32,
            is_monotonic: true,
        })),
        ..Metric::default()
    }
}

fn reconcile_attributes(event: &ObjectEvent, reconcile: &Reconcile) -> Attributes {
    let mut attributes = Attributes::new();
    put(&mut attributes, "operator_name", &event.operator.name);
    put(&mut attributes, "k8s_namespace", &event.operator.namespace);
    put(&mut attributes, "controller", &reconcile.controller);
    let kind = if event.object.kind.is_empty() {
        &event.object.resource
    } else {
        &event.object.kind
    };
    put(&mut attributes, "kind", kind);
    attributes
}

fn put(attributes: &mut Attributes, key: &'static str, value: &str) {
    if !value.is_empty() {
        attributes.insert(key, value.to_string());
    }
}

fn key_values(attributes: Attributes) -> Vec<KeyValue> {
    attributes
        .into_iter()
        .map(|(key, value)| KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value)),
            }),
            ..KeyValue::default()
        })
        .collect()
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

/// The ids that lead from a duration to its trace and reconcile: the trace id in
/// the exemplar's own field when it is one (32 hex digits), else as an attribute,
/// and the reconcile id as an attribute; none when both are unknown.
fn exemplar_of(reconcile: &Reconcile, seconds: f64, time: Nanos) -> Option<Exemplar> {
    let mut filtered_attributes = Attributes::new();
    let trace_id = match trace_id_bytes(&reconcile.trace_id) {
        Some(bytes) => bytes,
        None => {
            put(&mut filtered_attributes, "trace_id", &reconcile.trace_id);
            Vec::new()
        }
    };
    put(
        &mut filtered_attributes,
        "reconcile_id",
        &reconcile.reconcile_id,
    );
    if trace_id.is_empty() && filtered_attributes.is_empty() {
        return None;
    }
    Some(Exemplar {
        filtered_attributes: key_values(filtered_attributes),
        time_unix_nano: time,
        trace_id,
        value: Some(exemplar::Value::AsDouble(seconds)),
        ..Exemplar::default()
    })
}

/// A trace id written as 32 hex digits, not all zeros, as its 16 bytes.
fn trace_id_bytes(text: &str) -> Option<Vec<u8>> {
    let bytes = hex::decode(text).ok()?;
    (bytes.len() == 16 && bytes.iter().any(|byte| *byte != 0)).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opscope_model::kubernetes::{ObjectRef, OperatorRef};

    use super::*;
    use crate::correlator::events::RecordPlace;

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

    fn metric<'a>(derived: &'a Derived, name: &str) -> Option<&'a Metric> {
        derived
            .request
            .as_ref()?
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .find(|m| m.name == name)
    }

    /// Each point of a sum as `key=value,...` and its value.
    fn sum_points(metric: Option<&Metric>) -> Vec<(String, i64)> {
        let Some(Metric {
            data: Some(metric::Data::Sum(sum)),
            ..
        }) = metric
        else {
            return Vec::new();
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.aggregation_temporality,
            AggregationTemporality::Delta as i32
        );
        sum.data_points
            .iter()
            .map(|point| {
                let labels: Vec<String> = point
                    .attributes
                    .iter()
                    .map(
                        |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(any_value::Value::StringValue(text)) => {
                                format!("{}={text}", kv.key)
                            }
                            other => panic!("a string attribute, got {other:?}"),
                        },
                    )
                    .collect();
                let value = match point.value {
                    Some(number_data_point::Value::AsInt(value)) => value,
                    other => panic!("an integer count, got {other:?}"),
                };
                (labels.join(","), value)
            })
            .collect()
    }

    #[test]
    fn a_reconcile_is_counted_once_when_its_outcome_is_known() {
        let mut memory = OperatorMetrics::default();
        let first = [
            reconcile("r1", Outcome::Unknown, None),
            reconcile("r1", Outcome::Ok, None),
            reconcile("r1", Outcome::Ok, None),
            reconcile("r2", Outcome::Unknown, None),
        ];
        let derived = memory.derive(&first);
        assert_eq!(
            sum_points(metric(&derived, RECONCILES)),
            vec![(
                "controller=widget,k8s_namespace=operators,kind=Widget,\
                 operator_name=widget-operator,result=ok"
                    .to_string(),
                1
            )]
        );
        memory.commit(derived);
        let later = [
            reconcile("r1", Outcome::Error("late".into()), None),
            reconcile("r2", Outcome::Requeue, None),
            reconcile("", Outcome::Ok, None),
            reconcile("", Outcome::Ok, None),
        ];
        let derived = memory.derive(&later);
        let results: Vec<(String, i64)> = sum_points(metric(&derived, RECONCILES))
            .into_iter()
            .map(|(labels, value)| (labels.rsplit(',').next().unwrap_or("").to_string(), value))
            .collect();
        assert_eq!(
            results,
            vec![
                ("result=ok".to_string(), 2),
                ("result=requeue".to_string(), 1)
            ]
        );
    }

    #[test]
    fn what_is_not_committed_is_counted_again() {
        let memory = OperatorMetrics::default();
        let events = [reconcile("r1", Outcome::Ok, None)];
        let first = memory.derive(&events);
        let again = memory.derive(&events);
        assert_eq!(
            sum_points(metric(&first, RECONCILES)),
            sum_points(metric(&again, RECONCILES))
        );
    }

    #[test]
    fn a_duration_is_observed_once_with_its_ids_as_exemplar() {
        let memory = OperatorMetrics::default();
        let events = [
            reconcile("r1", Outcome::Ok, None),
            reconcile("r1", Outcome::Ok, Some(Duration::from_millis(300))),
            reconcile("r1", Outcome::Ok, Some(Duration::from_millis(300))),
        ];
        let derived = memory.derive(&events);
        let Some(Metric {
            unit,
            data: Some(metric::Data::Histogram(histogram)),
            ..
        }) = metric(&derived, RECONCILE_DURATION)
        else {
            panic!("a duration histogram");
        };
        assert_eq!(unit, "s");
        let [point] = histogram.data_points.as_slice() else {
            panic!("one observation, got {:?}", histogram.data_points);
        };
        assert!(!point.attributes.iter().any(|kv| kv.key == "result"));
        assert_eq!(point.count, 1);
        assert_eq!(point.bucket_counts.iter().sum::<u64>(), 1);
        assert_eq!(point.bucket_counts.get(6), Some(&1), "the 0.5 s bucket");
        let [exemplar] = point.exemplars.as_slice() else {
            panic!("one exemplar");
        };
        assert_eq!(exemplar.trace_id, vec![0xab; 16]);
        let keys: Vec<_> = exemplar
            .filtered_attributes
            .iter()
            .map(|kv| kv.key.as_str())
            .collect();
        assert_eq!(keys, vec!["reconcile_id"]);
        assert_eq!(exemplar.value, Some(exemplar::Value::AsDouble(0.3)));
    }

    #[test]
    fn a_trace_id_that_is_not_hex_is_kept_as_an_attribute() {
        let reconcile = Reconcile {
            trace_id: "log-123".into(),
            ..Reconcile::default()
        };
        let exemplar = exemplar_of(&reconcile, 1.0, 1).expect("an exemplar");
        assert!(exemplar.trace_id.is_empty());
        assert_eq!(
            exemplar
                .filtered_attributes
                .first()
                .map(|kv| kv.key.as_str()),
            Some("trace_id")
        );
        assert!(exemplar_of(&Reconcile::default(), 1.0, 1).is_none());
    }

    #[test]
    fn writes_are_counted_by_resource_verb_and_code() {
        let write = object_event(ObjectEventKind::Write(Write {
            verb: "update".into(),
            subresource: "status".into(),
            code: 409,
            ..Write::default()
        }));
        let derived = OperatorMetrics::default().derive(&[write.clone(), write]);
        assert_eq!(
            sum_points(metric(&derived, API_WRITES)),
            vec![(
                "code=409,k8s_namespace=operators,operator_name=widget-operator,\
                 resource=widgets,subresource=status,verb=update"
                    .to_string(),
                2
            )]
        );
    }

    #[test]
    fn the_config_makes_them_cumulative_by_default() {
        let mut memory = OperatorMetrics::new(&OperatorMetricsConfig::default());
        for id in ["r1", "r2"] {
            let derived = memory.derive(&[reconcile(id, Outcome::Ok, None)]);
            let Some(Metric {
                data: Some(metric::Data::Sum(sum)),
                ..
            }) = metric(&derived, RECONCILES)
            else {
                panic!("a reconcile sum");
            };
            assert_eq!(
                sum.aggregation_temporality,
                AggregationTemporality::Cumulative as i32
            );
            let value = sum.data_points.first().and_then(|point| point.value);
            let expected = if id == "r1" { 1 } else { 2 };
            assert_eq!(value, Some(number_data_point::Value::AsInt(expected)));
            memory.commit(derived);
        }
    }

    #[test]
    fn nothing_countable_is_no_request() {
        let derived = OperatorMetrics::default().derive(&[reconcile("r1", Outcome::Unknown, None)]);
        assert!(derived.request.is_none());
    }

    #[test]
    fn remembered_ids_are_bounded() {
        let mut memory = OperatorMetrics::default();
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
        memory.commit(Derived {
            request: None,
            marks,
            totals: PendingTotals::default(),
        });
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
