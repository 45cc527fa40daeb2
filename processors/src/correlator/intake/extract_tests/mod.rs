//! Tests of event extraction: records carrying the tagger's attributes (built in code,
//! or tagged from fixtures by the tagger) and the correlator events they give.

use opscope_proto::otlp::common::v1::any_value::Value;
use opscope_proto::otlp::metrics::v1::{Gauge, ResourceMetrics, ScopeMetrics, Sum};
use opscope_proto::otlp::resource::v1::Resource;

use super::*;
use crate::correlator::intake::events::ObjectEvent;
use crate::correlator::test_support::run;
use crate::otlp_builders::*;
use crate::tagger::{OperatorTagger, TaggerConfig};
use opscope_model::attributes::array_value;
use opscope_model::kubernetes::ObjectKey;
use opscope_model::signal::SignalType;
use opscope_model::timestamp::NANOS_PER_SECOND;

mod api_traffic;
mod gauges;
mod operators_and_evidence;
mod reconciles;
mod tagged_end_to_end;
mod writes_and_states;

const BRIDGE_LOGS: &str =
    include_str!("../../../../tests/fixtures/otlp/controller_runtime_otel_bridge_logs.json");
const METRICS: &str =
    include_str!("../../../../tests/fixtures/otlp/controller_runtime_metrics.json");
const SPANS_409: &str =
    include_str!("../../../../tests/fixtures/spans/otelhttp_client_status_patch_409.json");
const STATUS_UPDATES: &str =
    include_str!("../../../../tests/fixtures/audit/status_update_request_response.jsonl");

const POD: &str = "kuberay-operator-6c9f7d8b9-x2x7q";
/// The resource of a KubeRay operator pod once tagged.
const KUBERAY: &[(&str, &str)] = &[
    (OPERATOR_NAME, "kuberay-operator"),
    (K8S_NAMESPACE_NAME, "ray-system"),
    (K8S_POD_NAME, POD),
];
const KUBERAY_ACCOUNT: &str = "system:serviceaccount:ray-system:kuberay-operator";
/// The tagger's attributes of a record about the RayJob `ml/train`.
const RAYJOB_TRAIN: &[(&str, &str)] = &[
    (OBJECT_GROUP, "ray.io"),
    (OBJECT_KIND, "RayJob"),
    (OBJECT_NAMESPACE, "ml"),
    (OBJECT_NAME, "train"),
];
/// The tagger's attributes of an API call writing the RayJob `ml/train`.
const WRITES_RAYJOB_TRAIN: &[(&str, &str)] = &[
    (OPSCOPE_RECORD, RECORD_API_CALL),
    (API_GROUP, "ray.io"),
    (API_RESOURCE, "rayjobs"),
    (API_NAMESPACE, "ml"),
    (API_NAME, "train"),
];
const RECONCILE_1: &str = "a0c1f2e3-4b5c-4d6e-8f70-8192a3b4c5d6";
/// Trace 1 in hex.
const TRACE_1: &str = "01010101010101010101010101010101";

fn rayjob() -> ObjectRef {
    ObjectRef {
        group: "ray.io".into(),
        kind: "RayJob".into(),
        namespace: "ml".into(),
        name: "train".into(),
        ..ObjectRef::default()
    }
}

/// The RayJob as an API path names it.
fn rayjobs_train() -> ObjectRef {
    ObjectRef {
        group: "ray.io".into(),
        resource: "rayjobs".into(),
        namespace: "ml".into(),
        name: "train".into(),
        ..ObjectRef::default()
    }
}

fn kuberay() -> OperatorRef {
    OperatorRef {
        name: "kuberay-operator".into(),
        namespace: "ray-system".into(),
    }
}

fn span_events(spans: impl IntoIterator<Item = SpanBuilder>) -> Vec<ObjectEvent> {
    let mut events = Vec::new();
    from_traces(&traces(KUBERAY, spans), &mut events);
    object_events(events)
}

fn log_events(records: impl IntoIterator<Item = LogBuilder>) -> Vec<ObjectEvent> {
    let mut events = Vec::new();
    from_logs(&logs(KUBERAY, records), &mut events);
    object_events(events)
}

fn object_events(events: Vec<Event>) -> Vec<ObjectEvent> {
    events
        .into_iter()
        .map(|event| match event {
            Event::Object(event) => event,
            other => panic!("not an object event: {other:?}"),
        })
        .collect()
}

#[track_caller]
fn only(mut events: Vec<ObjectEvent>) -> ObjectEvent {
    assert_eq!(events.len(), 1, "{events:#?}");
    events.remove(0)
}

#[track_caller]
fn reconcile_of(event: &ObjectEvent) -> &Reconcile {
    match &event.kind {
        ObjectEventKind::Reconcile(reconcile) => reconcile,
        other => panic!("not a reconcile: {other:?}"),
    }
}

/// The evidence reference a detector keeping the event would write.
fn reference_of(event: &ObjectEvent) -> Option<String> {
    let reconcile_id = match &event.kind {
        ObjectEventKind::Reconcile(reconcile) => reconcile.reconcile_id.as_str(),
        ObjectEventKind::Write(write) => write.reconcile_id.as_str(),
        _ => "",
    };
    event.place.reference(reconcile_id)
}

#[track_caller]
fn write_of(event: &ObjectEvent) -> &Write {
    match &event.kind {
        ObjectEventKind::Write(write) => write,
        other => panic!("not a write: {other:?}"),
    }
}

#[track_caller]
fn state_of(event: &ObjectEvent) -> &ObjectState {
    match &event.kind {
        ObjectEventKind::State(state) => state,
        other => panic!("not an object state: {other:?}"),
    }
}

/// A tagged reconcile root span of the RayJob, 43 ms from `T0`, in trace 1.
fn reconcile_root() -> SpanBuilder {
    span("reconcile")
        .ids(1, 1)
        .times(T0, T0 + 43 * MS)
        .attrs(RAYJOB_TRAIN)
        .attrs(&[
            (OPSCOPE_RECORD, RECORD_RECONCILE),
            (RECONCILE_ID, RECONCILE_1),
            (CONTROLLER, "rayjob"),
        ])
}
