//! The fleet `opscope demo` plays, misbehaving the way real operators do: one
//! healthy controller, one that writes its status on every reconcile and re-triggers
//! itself, an object stuck on a finalizer whose cleanup keeps failing, and two
//! replicas fighting over one object.

use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::any_value::Value;
use opscope_proto::otlp::trace::v1::Span;

use crate::attributes::{attribute, strings};
use crate::reconcile::{ApiCall, ObjectRef, OperatorPod, Reconcile, SpanIds};

/// One tick of the simulation, in milliseconds: the looping controller reconciles
/// once per tick.
pub const TICK_MILLIS: u64 = 200;

const CONFLICT: &str = "Operation cannot be fulfilled on widgets.apps.example.com \"shared\": the object has been modified; please apply your changes to the latest version and try again";
const CLEANUP_FAILURE: &str = "cleanup of bucket shop-stuck failed: BucketNotEmpty: the bucket you tried to delete is not empty";

/// time.Now() written into status on every reconcile.
const STATUS_WRITE: [ApiCall; 1] = [ApiCall::new("PATCH", "/status", 200)];
const READ: [ApiCall; 1] = [ApiCall::new("GET", "", 200)];
/// An update answered 409, tried twice as `retry.RetryOnConflict` would.
const CONFLICTING_UPDATE: [ApiCall; 2] =
    [ApiCall::new("PUT", "", 409), ApiCall::new("PUT", "", 409)];

/// Generates the fleet's traces, tick by tick.
pub struct SimulatedFleet {
    tick: u64,
    /// When the stuck object was deleted (the simulation's start).
    deleted_at: u64,
    ids: SpanIds,
    kuberay: OperatorPod,
    widgets_a: OperatorPod,
    widgets_b: OperatorPod,
    looping: ObjectRef,
    calm: ObjectRef,
    shared: ObjectRef,
    stuck: ObjectRef,
}

impl SimulatedFleet {
    pub fn new(start_unix_nanos: u64) -> Self {
        Self {
            tick: 0,
            deleted_at: start_unix_nanos,
            ids: SpanIds::starting_after(1),
            kuberay: OperatorPod::new(
                "kuberay-operator",
                "ray-system",
                "kuberay-operator-6bc4f7d9c8-x2k4p",
            ),
            widgets_a: OperatorPod::new(
                "widget-operator",
                "widget-system",
                "widget-operator-5d6b8c9f7-q8w2z",
            ),
            widgets_b: OperatorPod::new(
                "widget-operator",
                "widget-system",
                "widget-operator-5d6b8c9f7-h7k2m",
            ),
            looping: ObjectRef::new("ray.io", "RayJob", "ml", "train"),
            calm: ObjectRef::new("apps.example.com", "Widget", "shop", "calm"),
            shared: ObjectRef::new("apps.example.com", "Widget", "shop", "shared"),
            stuck: ObjectRef::new("apps.example.com", "Widget", "shop", "stuck"),
        }
    }

    /// The traces the fleet exports during one tick ending at `now`.
    pub fn tick(&mut self, now: u64) -> ExportTraceServiceRequest {
        let tick = self.tick;
        self.tick += 1;
        let mut kuberay = Vec::new();
        let mut widgets_a = Vec::new();
        let mut widgets_b = Vec::new();
        let ids = &mut self.ids;
        // No event filter: the status write re-triggers the next reconcile.
        Reconcile::new(&self.looping, now, &STATUS_WRITE, None).write_spans(ids, &mut kuberay);
        if tick.is_multiple_of(25) {
            Reconcile::new(&self.calm, now, &READ, None).write_spans(ids, &mut widgets_a);
            // Two replicas without leader election update the same object.
            for spans in [&mut widgets_a, &mut widgets_b] {
                Reconcile::new(&self.shared, now, &CONFLICTING_UPDATE, Some(CONFLICT))
                    .write_spans(ids, spans);
            }
        }
        if tick.is_multiple_of(10) {
            let mut stuck = Reconcile::new(&self.stuck, now, &[], Some(CLEANUP_FAILURE));
            stuck.attributes = deletion_state(self.deleted_at);
            stuck.write_spans(ids, &mut widgets_a);
        }
        let pods: [(&OperatorPod, Vec<Span>); 3] = [
            (&self.kuberay, kuberay),
            (&self.widgets_a, widgets_a),
            (&self.widgets_b, widgets_b),
        ];
        ExportTraceServiceRequest {
            resource_spans: pods
                .into_iter()
                .filter(|(_, spans)| !spans.is_empty())
                .map(|(pod, spans)| pod.resource_spans(spans))
                .collect(),
        }
    }
}

/// The attributes of an object deleted at `deleted_at` and held by a finalizer.
pub(crate) fn deletion_state(deleted_at: u64) -> Vec<opscope_proto::otlp::common::v1::KeyValue> {
    let deleted = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(deleted_at),
    )
    .to_string();
    vec![
        attribute("k8s.object.deletion_timestamp", Value::StringValue(deleted)),
        attribute(
            "k8s.object.finalizers",
            strings(&["apps.example.com/bucket-cleanup"]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_reconciles_on_its_schedule() {
        let mut fleet = SimulatedFleet::new(0);
        let first = fleet.tick(1_000_000_000);
        // Every pod speaks at the first tick: loop, calm, both fighters, stuck.
        assert_eq!(first.resource_spans.len(), 3);
        let roots = |request: &ExportTraceServiceRequest| {
            request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
                .filter(|s| s.name == "reconcile")
                .count()
        };
        assert_eq!(roots(&first), 5);
        let second = fleet.tick(1_200_000_000);
        assert_eq!(roots(&second), 1, "only the looping controller every tick");
    }
}
