//! The series an operator pod exposes (controller-runtime, client-go, Go runtime),
//! as OTLP metrics: counters that grow with the pod's reconciles, gauges that hold.

use opscope_proto::otlp::common::v1::KeyValue;
use opscope_proto::otlp::metrics::v1::metric::Data;
use opscope_proto::otlp::metrics::v1::number_data_point::Value;
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, Sum,
};

use super::{Behaviour, LOOP_WEIGHT, TrackedObject};
use crate::attributes::text;
use crate::reconcile::OperatorPod;

/// Points each pod contributes per emission (see [`PodSeries::series`]).
pub(super) const POINTS_PER_POD: usize = 9;

struct PodState {
    controller: String,
    reconciles_per_emission: u64,
    errors_per_emission: u64,
    conflicts_per_emission: u64,
    emissions: u64,
}

/// The pods' series, emitted pod after pod.
pub(super) struct PodSeries {
    pods: Vec<PodState>,
    next_pod: usize,
    start: u64,
}

enum Kind {
    Counter,
    Gauge,
}

impl PodSeries {
    pub(super) fn new(pods: &[OperatorPod], objects: &[TrackedObject], start: u64) -> Self {
        let mut states: Vec<PodState> = (0..pods.len())
            .map(|_| PodState {
                controller: String::new(),
                reconciles_per_emission: 0,
                errors_per_emission: 0,
                conflicts_per_emission: 0,
                emissions: 0,
            })
            .collect();
        for tracked in objects {
            let state = &mut states[tracked.pod];
            state.controller.clone_from(&tracked.object.controller);
            state.reconciles_per_emission += match tracked.behaviour {
                Behaviour::Looping => LOOP_WEIGHT as u64,
                _ => 1,
            };
            match tracked.behaviour {
                Behaviour::Conflicting => {
                    state.errors_per_emission += 1;
                    state.conflicts_per_emission += 2;
                }
                Behaviour::Leaking => state.errors_per_emission += 1,
                Behaviour::Healthy | Behaviour::Looping => {}
            }
        }
        Self {
            pods: states,
            next_pod: 0,
            start,
        }
    }

    /// The next pod's series at `now`, at most `max_points` of them.
    pub(super) fn next_pod(&mut self, max_points: usize, now: u64) -> (usize, Vec<Metric>) {
        let pod = self.next_pod;
        self.next_pod = (pod + 1) % self.pods.len();
        let state = &mut self.pods[pod];
        state.emissions += 1;
        let mut metrics: Vec<Metric> = Vec::new();
        for (name, kind, attributes, value) in series(state).into_iter().take(max_points) {
            let point = NumberDataPoint {
                attributes,
                start_time_unix_nano: self.start,
                time_unix_nano: now,
                value: Some(value),
                ..Default::default()
            };
            match metrics.last_mut() {
                Some(last) if last.name == name => push_point(last, point),
                _ => metrics.push(metric(name, kind, point)),
            }
        }
        (pod, metrics)
    }
}

pub(super) fn point_count(metric: &Metric) -> usize {
    match &metric.data {
        Some(Data::Sum(sum)) => sum.data_points.len(),
        Some(Data::Gauge(gauge)) => gauge.data_points.len(),
        _ => 0,
    }
}

/// The [`POINTS_PER_POD`] points of one pod, those of one metric next to each other.
fn series(state: &PodState) -> [(&'static str, Kind, Vec<KeyValue>, Value); POINTS_PER_POD] {
    let e = state.emissions;
    let controller = || text("controller", &state.controller);
    let reconciles = state.reconciles_per_emission * e;
    let errors = state.errors_per_emission * e;
    let conflicts = state.conflicts_per_emission * e;
    let counter = |n: u64| Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX));
    [
        (
            "controller_runtime_reconcile_total",
            Kind::Counter,
            vec![controller(), text("result", "success")],
            counter(reconciles - errors.min(reconciles)),
        ),
        (
            "controller_runtime_reconcile_total",
            Kind::Counter,
            vec![controller(), text("result", "error")],
            counter(errors),
        ),
        (
            "controller_runtime_reconcile_total",
            Kind::Counter,
            vec![controller(), text("result", "requeue")],
            counter(0),
        ),
        (
            "controller_runtime_reconcile_errors_total",
            Kind::Counter,
            vec![controller()],
            counter(errors),
        ),
        (
            "workqueue_depth",
            Kind::Gauge,
            vec![text("name", &state.controller)],
            Value::AsDouble(0.0),
        ),
        (
            "rest_client_requests_total",
            Kind::Counter,
            vec![text("code", "200"), text("method", "GET")],
            counter(reconciles * 2),
        ),
        (
            "rest_client_requests_total",
            Kind::Counter,
            vec![text("code", "409"), text("method", "PUT")],
            counter(conflicts),
        ),
        (
            "go_goroutines",
            Kind::Gauge,
            Vec::new(),
            Value::AsDouble(120.0),
        ),
        (
            "process_resident_memory_bytes",
            Kind::Gauge,
            Vec::new(),
            Value::AsDouble(64.0 * 1024.0 * 1024.0),
        ),
    ]
}

fn metric(name: &str, kind: Kind, point: NumberDataPoint) -> Metric {
    let data = match kind {
        Kind::Counter => Data::Sum(Sum {
            data_points: vec![point],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        Kind::Gauge => Data::Gauge(Gauge {
            data_points: vec![point],
        }),
    };
    Metric {
        name: name.into(),
        data: Some(data),
        ..Default::default()
    }
}

fn push_point(metric: &mut Metric, point: NumberDataPoint) {
    match &mut metric.data {
        Some(Data::Sum(sum)) => sum.data_points.push(point),
        Some(Data::Gauge(gauge)) => gauge.data_points.push(point),
        _ => {}
    }
}
