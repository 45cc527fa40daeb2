//! Many objects of a few operators, reconciled in turn: the load generator's
//! workload. A configurable share of the objects misbehaves — loops on its own
//! status writes, meets 409 conflicts, or is stuck on a finalizer — so that the
//! pipeline under load does the work it does in a real cluster.

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::KeyValue;
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::metrics::v1::{Metric, ResourceMetrics, ScopeMetrics};
use opscope_proto::otlp::trace::v1::Span;

use crate::attributes::{int, text};
use crate::fleet::deletion_state;
use crate::random::SplitMix64;
use crate::reconcile::{ApiCall, ObjectRef, OperatorPod, Reconcile, SpanIds};

mod controller_logs;
mod controller_metrics;

/// A looping object is reconciled this many times as often as a healthy one: at
/// 10 000 spans/s over 10 000 objects that is about 4 reconciles a second, well over
/// a loop detector's threshold, while healthy objects stay well under it.
const LOOP_WEIGHT: usize = 20;
/// The share of healthy updates answered 409 (a stale cache now and then).
const OCCASIONAL_CONFLICT: f64 = 0.005;
/// Deleted objects were deleted this long before the workload started, so that a
/// finalizer-leak detector with its default age sees them at once.
const DELETED_BEFORE_START_NANOS: u64 = 600 * 1_000_000_000;

const OPERATORS: [(&str, &str); 3] = [
    ("widget-operator", "Widget"),
    ("gadget-operator", "Gadget"),
    ("bucket-operator", "Bucket"),
];

/// How an object behaves each time it is reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Reads, updates and writes status at its own pace; rarely a 409.
    Healthy,
    /// Writes status on every reconcile and is re-triggered by it, with its
    /// generation unchanged.
    Looping,
    /// Its updates are answered 409 and retried once; the reconcile fails.
    Conflicting,
    /// Deleted, held by a finalizer whose cleanup fails on every reconcile.
    Leaking,
}

/// What to generate: how many objects over how many operator pods, which shares
/// misbehave, and the shape of each reconcile.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    pub objects: usize,
    pub pods: usize,
    pub loop_fraction: f64,
    pub conflict_fraction: f64,
    pub leak_fraction: f64,
    /// API calls per reconcile, drawn evenly from `min_calls..=max_calls`.
    pub min_calls: usize,
    pub max_calls: usize,
    /// Extra string attributes on each reconcile span and log record, to make the
    /// payload larger.
    pub padding_attributes: usize,
    pub seed: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            objects: 1000,
            pods: 10,
            loop_fraction: 0.01,
            conflict_fraction: 0.01,
            leak_fraction: 0.01,
            min_calls: 2,
            max_calls: 6,
            padding_attributes: 0,
            seed: 1,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorkloadConfigError {
    #[error("objects and pods must be at least 1 (objects {objects}, pods {pods})")]
    Empty { objects: usize, pods: usize },
    #[error(
        "the loop, conflict and leak fractions must each be within 0..=1 and add up to at most 1"
    )]
    Fractions,
    #[error("calls per reconcile: min {min} is above max {max}, or max is above 64")]
    Calls { min: usize, max: usize },
}

impl WorkloadConfig {
    fn check(&self) -> Result<(), WorkloadConfigError> {
        if self.objects == 0 || self.pods == 0 {
            return Err(WorkloadConfigError::Empty {
                objects: self.objects,
                pods: self.pods,
            });
        }
        let fractions = [
            self.loop_fraction,
            self.conflict_fraction,
            self.leak_fraction,
        ];
        if fractions.iter().any(|f| !(0.0..=1.0).contains(f)) || fractions.iter().sum::<f64>() > 1.0
        {
            return Err(WorkloadConfigError::Fractions);
        }
        if self.min_calls > self.max_calls || self.max_calls > 64 {
            return Err(WorkloadConfigError::Calls {
                min: self.min_calls,
                max: self.max_calls,
            });
        }
        Ok(())
    }
}

struct TrackedObject {
    object: ObjectRef,
    behaviour: Behaviour,
    pod: usize,
    /// Root span attributes beyond the object's: its generation, deletion state and
    /// padding.
    attributes: Vec<KeyValue>,
    /// The API server's answer to a conflicting update of this object.
    conflict: String,
}

impl TrackedObject {
    fn error(&self, calls: &[ApiCall]) -> Option<&str> {
        match self.behaviour {
            Behaviour::Leaking => Some(controller_logs::CLEANUP_FAILURE),
            _ if calls.iter().any(|c| c.code == 409) => Some(&self.conflict),
            _ => None,
        }
    }
}

/// Generates requests of operator telemetry; every request is a complete set of
/// reconciles (or metric points) ending at the time it is asked for.
pub struct OperatorWorkload {
    config: WorkloadConfig,
    objects: Vec<TrackedObject>,
    pods: Vec<OperatorPod>,
    /// Object indexes in reconcile order, looping objects repeated; walked round.
    schedule: Vec<u32>,
    next_in_schedule: usize,
    random: SplitMix64,
    ids: SpanIds,
    metrics: controller_metrics::PodSeries,
}

impl OperatorWorkload {
    pub fn new(config: WorkloadConfig, start_unix_nanos: u64) -> Result<Self, WorkloadConfigError> {
        config.check()?;
        Ok(Self::build(config, start_unix_nanos))
    }

    /// The workload of [`WorkloadConfig::default`], which is always valid.
    pub fn with_defaults(start_unix_nanos: u64) -> Self {
        Self::build(WorkloadConfig::default(), start_unix_nanos)
    }

    fn build(config: WorkloadConfig, start_unix_nanos: u64) -> Self {
        let pods = (0..config.pods)
            .map(|n| {
                let (operator, _) = OPERATORS[n % OPERATORS.len()];
                OperatorPod::new(
                    operator,
                    &format!("{operator}-system"),
                    &format!("{operator}-5d6b8c9f7-{n:05}"),
                )
            })
            .collect::<Vec<_>>();
        let objects = (0..config.objects)
            .map(|n| tracked_object(&config, n, start_unix_nanos))
            .collect::<Vec<_>>();
        let mut random = SplitMix64::new(config.seed);
        let schedule = schedule(&objects, &mut random);
        let metrics = controller_metrics::PodSeries::new(&pods, &objects, start_unix_nanos);
        Self {
            ids: SpanIds::starting_after(config.seed << 40),
            config,
            objects,
            pods,
            schedule,
            next_in_schedule: 0,
            random,
            metrics,
        }
    }

    pub fn behaviour_counts(&self) -> [(Behaviour, usize); 4] {
        [
            Behaviour::Healthy,
            Behaviour::Looping,
            Behaviour::Conflicting,
            Behaviour::Leaking,
        ]
        .map(|b| (b, self.objects.iter().filter(|o| o.behaviour == b).count()))
    }

    /// Reconcile traces ending at `now` until there are at least `min_spans` spans;
    /// returns the request and its span count.
    pub fn traces(&mut self, min_spans: usize, now: u64) -> (ExportTraceServiceRequest, usize) {
        let mut per_pod: Vec<Vec<Span>> = vec![Vec::new(); self.pods.len()];
        let mut count = 0;
        let mut calls = Vec::with_capacity(self.config.max_calls + 1);
        while count < min_spans.max(1) {
            let index = self.next_object();
            self.calls(index, &mut calls);
            let tracked = &self.objects[index];
            let error = tracked.error(&calls);
            let spans = &mut per_pod[tracked.pod];
            let before = spans.len();
            Reconcile {
                object: &tracked.object,
                end: now,
                calls: &calls,
                error,
                attributes: tracked.attributes.clone(),
            }
            .write_spans(&mut self.ids, spans);
            count += spans.len() - before;
        }
        let resource_spans = per_pod
            .into_iter()
            .zip(&self.pods)
            .filter(|(spans, _)| !spans.is_empty())
            .map(|(spans, pod)| pod.resource_spans(spans))
            .collect();
        (ExportTraceServiceRequest { resource_spans }, count)
    }

    /// controller-runtime JSON log records of reconciles ending at `now` (a
    /// "Reconciling" line, and "Reconcile done" or "Reconciler error"), until there
    /// are at least `min_records`; returns the request and its record count.
    pub fn logs(&mut self, min_records: usize, now: u64) -> (ExportLogsServiceRequest, usize) {
        let mut per_pod: Vec<Vec<LogRecord>> = vec![Vec::new(); self.pods.len()];
        let mut count = 0;
        let mut calls = Vec::with_capacity(self.config.max_calls + 1);
        while count < min_records.max(1) {
            let index = self.next_object();
            self.calls(index, &mut calls);
            let reconcile_id = self.ids.reconcile_id();
            let tracked = &self.objects[index];
            let error = tracked.error(&calls);
            let records = &mut per_pod[tracked.pod];
            let padding =
                &tracked.attributes[tracked.attributes.len() - self.config.padding_attributes..];
            for line in controller_logs::reconcile_lines(&tracked.object, &reconcile_id, error, now)
            {
                records.push(controller_logs::record(line, now, padding));
                count += 1;
            }
        }
        let resource_logs = per_pod
            .into_iter()
            .zip(&self.pods)
            .filter(|(records, _)| !records.is_empty())
            .map(|(log_records, pod)| ResourceLogs {
                resource: Some(controller_logs::container_resource(pod)),
                scope_logs: vec![ScopeLogs {
                    log_records,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        (ExportLogsServiceRequest { resource_logs }, count)
    }

    /// `points` metric data points at `now`: the controller-runtime, client-go and
    /// Go runtime series of the operator pods, pod after pod.
    pub fn metrics(&mut self, points: usize, now: u64) -> (ExportMetricsServiceRequest, usize) {
        let mut resource_metrics: Vec<ResourceMetrics> = Vec::new();
        let mut count = 0;
        while count < points.max(1) {
            let (pod, metrics): (usize, Vec<Metric>) =
                self.metrics.next_pod(points.max(1) - count, now);
            count += metrics
                .iter()
                .map(controller_metrics::point_count)
                .sum::<usize>();
            resource_metrics.push(ResourceMetrics {
                resource: Some(self.pods[pod].resource()),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        (ExportMetricsServiceRequest { resource_metrics }, count)
    }

    fn next_object(&mut self) -> usize {
        let index = self.schedule[self.next_in_schedule] as usize;
        self.next_in_schedule = (self.next_in_schedule + 1) % self.schedule.len();
        index
    }

    /// The API calls of one reconcile of object `index`.
    fn calls(&mut self, index: usize, calls: &mut Vec<ApiCall>) {
        calls.clear();
        let spread = (self.config.max_calls - self.config.min_calls) as u64;
        let wanted = self.config.min_calls + self.random.below(spread + 1) as usize;
        let behaviour = self.objects[index].behaviour;
        for n in 0..wanted {
            let last = n + 1 == wanted;
            let call = match behaviour {
                Behaviour::Leaking => ApiCall::new("GET", "", 200),
                _ if n == 0 => ApiCall::new("GET", "", 200),
                Behaviour::Looping | Behaviour::Healthy if last => {
                    ApiCall::new("PATCH", "/status", 200)
                }
                Behaviour::Conflicting if last => ApiCall::new("PUT", "", 409),
                Behaviour::Healthy if self.random.chance(OCCASIONAL_CONFLICT) => {
                    ApiCall::new("PUT", "", 409)
                }
                _ if n % 2 == 1 => ApiCall::new("PUT", "", 200),
                _ => ApiCall::new("GET", "", 200),
            };
            calls.push(call);
        }
    }
}

impl SpanIds {
    /// A reconcile id in controller-runtime's UUID form.
    fn reconcile_id(&mut self) -> String {
        let id = u128::from(self.next()) | (0x4000_8000 << 64);
        let hex = format!("{id:032x}");
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    }
}

fn tracked_object(config: &WorkloadConfig, n: usize, start_unix_nanos: u64) -> TrackedObject {
    let pod = n % config.pods;
    let (_, kind) = OPERATORS[pod % OPERATORS.len()];
    let name = format!("{}-{n}", kind.to_ascii_lowercase());
    let object = ObjectRef::new("apps.example.com", kind, &format!("team-{}", n % 20), &name);
    let share = |fraction: f64| (fraction * config.objects as f64).round() as usize;
    let looping = share(config.loop_fraction);
    let conflicting = looping + share(config.conflict_fraction);
    let leaking = conflicting + share(config.leak_fraction);
    let behaviour = match n {
        n if n < looping => Behaviour::Looping,
        n if n < conflicting => Behaviour::Conflicting,
        n if n < leaking => Behaviour::Leaking,
        _ => Behaviour::Healthy,
    };
    let mut attributes = vec![int("k8s.object.generation", 1 + (n % 7) as i64)];
    if behaviour == Behaviour::Leaking {
        attributes.extend(deletion_state(
            start_unix_nanos.saturating_sub(DELETED_BEFORE_START_NANOS),
        ));
    }
    attributes.extend(
        (0..config.padding_attributes)
            .map(|p| text(&format!("app.padding.{p}"), "x".repeat(32).as_str())),
    );
    TrackedObject {
        conflict: controller_logs::conflict_message(&object),
        object,
        behaviour,
        pod,
        attributes,
    }
}

/// Every object once, looping objects [`LOOP_WEIGHT`] times, shuffled.
fn schedule(objects: &[TrackedObject], random: &mut SplitMix64) -> Vec<u32> {
    let mut schedule = Vec::with_capacity(objects.len());
    for (index, tracked) in objects.iter().enumerate() {
        let times = if tracked.behaviour == Behaviour::Looping {
            LOOP_WEIGHT
        } else {
            1
        };
        schedule.extend(std::iter::repeat_n(index as u32, times));
    }
    for i in (1..schedule.len()).rev() {
        let j = random.below(i as u64 + 1) as usize;
        schedule.swap(i, j);
    }
    schedule
}

#[cfg(test)]
mod tests;
