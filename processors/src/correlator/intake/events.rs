//! The events the correlator works on, extracted from tagged records. Every event
//! carries its event time; object events carry the object they are about.

use std::sync::Arc;
use std::time::Duration;

use opscope_model::kubernetes::{Name, ObjectRef, OperatorRef};
use opscope_model::timestamp::Nanos;

/// Object events are the bulk of events and are moved, not stored: boxing them would
/// cost an allocation per event to save stack space.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Object(ObjectEvent),
    Gauge(GaugeEvent),
    Counter(CounterEvent),
    ApiTraffic(ApiTrafficEvent),
}

impl Event {
    pub fn time(&self) -> Nanos {
        match self {
            Event::Object(event) => event.time,
            Event::Gauge(event) => event.time,
            Event::Counter(event) => event.time,
            Event::ApiTraffic(event) => event.time,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ObjectEvent {
    pub time: Nanos,
    pub object: ObjectRef,
    pub operator: OperatorRef,
    pub kind: ObjectEventKind,
    /// Where the record is, for the evidence reference of its reconcile or write.
    pub place: RecordPlace,
}

/// Where a record is, kept in parts. Few events become evidence (near a loop, on a
/// conflict, after a deletion), so the reference an engineer follows (`trace <id>
/// span <id> reconcile <id>`, `pod.log:12 reconcile <id>`) is written only for them:
/// see [`RecordPlace::reference`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordPlace {
    /// A log record's position (`path:line`), or a reference a source gives whole;
    /// the ids are not written when it is set. Shared by the events of one record.
    pub source: Option<Arc<str>>,
    /// The record's trace id, when set (16 bytes, not all zeros).
    pub trace_id: Option<[u8; 16]>,
    /// Its span id, when set (8 bytes, not all zeros), written only with a trace id.
    pub span_id: Option<[u8; 8]>,
}

impl RecordPlace {
    /// The evidence reference of an event of `reconcile_id` from this record, or
    /// `None` when the record gives nothing to follow. Its ids are read back by
    /// [`evidence_reference`](opscope_model::signal::evidence_reference).
    pub fn reference(&self, reconcile_id: &str) -> Option<String> {
        let mut reference = String::new();
        match (&self.source, &self.trace_id) {
            (Some(source), _) => reference.push_str(source),
            (None, Some(trace)) => {
                let span = self.span_id.as_ref().map(|span| span.as_slice());
                push_ids(&mut reference, trace, span);
            }
            (None, None) => {}
        }
        if !reconcile_id.is_empty() {
            if !reference.is_empty() {
                reference.push(' ');
            }
            reference.push_str("reconcile ");
            reference.push_str(reconcile_id);
        }
        (!reference.is_empty()).then_some(reference)
    }
}

/// Writes `trace <hex>`, then ` span <hex>` when there is a span id.
pub(crate) fn push_ids(reference: &mut String, trace_id: &[u8], span_id: Option<&[u8]>) {
    reference.push_str("trace ");
    reference.push_str(&hex::encode(trace_id));
    if let Some(span) = span_id {
        reference.push_str(" span ");
        reference.push_str(&hex::encode(span));
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ObjectEventKind {
    Reconcile(Reconcile),
    Write(Write),
    State(ObjectState),
    /// The object was deleted.
    Gone,
}

/// A reconcile of the object, or news about one already seen (same id): records of
/// one reconcile arrive separately, and its outcome often comes last.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reconcile {
    pub controller: Name,
    /// The operator pod that ran it.
    pub instance: Name,
    /// Empty when the source has no id; then every record is one reconcile.
    pub reconcile_id: String,
    pub trace_id: String,
    /// When the reconcile began, when known (a span's start).
    pub start: Option<Nanos>,
    pub duration: Option<Duration>,
    pub outcome: Outcome,
    pub generation: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub enum Outcome {
    /// This record does not say how the reconcile ended.
    #[default]
    Unknown,
    Ok,
    /// Failed, with a short error text.
    Error(String),
    Requeue,
    RequeueAfter(Duration),
}

/// A write to the object through the API server (or an attempt: `code` says).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Write {
    /// The user or service account that wrote; empty when unknown.
    pub actor: Name,
    pub instance: Name,
    /// create, update, patch, delete.
    pub verb: Name,
    /// `status`, or empty for the main resource.
    pub subresource: Name,
    /// HTTP status code; 0 when unknown.
    pub code: u16,
    pub reconcile_id: String,
    pub generation: Option<i64>,
    pub resource_version: Option<String>,
    /// `path=hash` digest of the written status leaves, when the body is known.
    pub status_digest: Vec<String>,
}

/// What a record showed of the object's metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectState {
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub resource_version: Option<String>,
    pub deletion_timestamp: Option<Nanos>,
    /// `None` when the record does not show finalizers, `Some(empty)` when it shows none.
    pub finalizers: Option<Vec<String>>,
}

/// A runtime measurement of one operator instance (`workqueue_depth`,
/// `go_goroutines`, `process_resident_memory_bytes`).
#[derive(Debug, Clone, PartialEq)]
pub struct GaugeEvent {
    pub time: Nanos,
    pub operator: OperatorRef,
    pub instance: String,
    pub name: String,
    pub value: f64,
}

/// A sample of one of an operator instance's own counters: they count for a whole
/// controller or instance, never per object.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterEvent {
    pub time: Nanos,
    pub operator: OperatorRef,
    pub instance: String,
    pub counter: Counter,
    /// The controller (or its work queue) counted; empty for counters of the instance.
    pub controller: String,
    /// The series' other labels (`code=409,method=PUT`), which tell sibling series
    /// apart so that each one's resets are followed on its own.
    pub series: String,
    pub value: f64,
    /// False when `value` already is the increase since the previous sample (an OTLP
    /// delta sum), true for a running total that restarts from zero with the process.
    pub cumulative: bool,
}

/// The counters the correlator reads, by what they count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Counter {
    /// `controller_runtime_reconcile_total{controller,result}`.
    Reconciles,
    /// `controller_runtime_reconcile_errors_total{controller}`.
    ReconcileErrors,
    /// `workqueue_retries_total{name|controller}`.
    Retries,
    /// `rest_client_requests_total{code,method}`, every code.
    ApiRequests,
    /// `rest_client_requests_total{code="409"}`: writes refused as conflicts.
    ApiConflicts,
}

/// A sample of one of the kernel probe's counters of one container of an operator
/// pod (`opscope.ebpf.api_server.*`): its traffic to the API server, whether or not
/// the operator is instrumented.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiTrafficEvent {
    pub time: Nanos,
    pub operator: OperatorRef,
    pub instance: String,
    /// The container counted (its id, else its name): each keeps its own running total.
    pub container: String,
    pub measure: ApiTraffic,
    /// When the running total began (the point's start time); a new start is a reset.
    pub start: Nanos,
    pub value: f64,
    /// False when `value` already is the increase since the previous sample.
    pub cumulative: bool,
}

/// What the kernel probe counts of a pod's traffic to the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApiTraffic {
    /// `opscope.ebpf.api_server.send_calls`.
    SendCalls,
    /// `opscope.ebpf.api_server.sent_bytes`.
    SentBytes,
    /// `opscope.ebpf.api_server.connections`, by `outcome`.
    Connections(ConnectionOutcome),
}

/// How a TCP connection to the API server ended its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConnectionOutcome {
    Established,
    Refused,
    Reset,
    TimedOut,
    Failed,
}

impl ConnectionOutcome {
    /// The outcome of the probe's `outcome` attribute, `None` for one it does not write.
    pub fn of_attribute(outcome: &str) -> Option<Self> {
        match outcome {
            "established" => Some(Self::Established),
            "refused" => Some(Self::Refused),
            "reset" => Some(Self::Reset),
            "timed_out" => Some(Self::TimedOut),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_and_resource_name_the_same_object() {
        let from_log = ObjectRef {
            kind: "RayJob".into(),
            namespace: "ml".into(),
            name: "train".into(),
            ..Default::default()
        };
        let from_conflict = ObjectRef {
            group: "ray.io".into(),
            resource: "rayjobs".into(),
            namespace: "ml".into(),
            name: "train".into(),
            ..Default::default()
        };
        assert_eq!(from_log.key(), from_conflict.key());
        let mut merged = from_log.clone();
        merged.merge(&from_conflict);
        assert_eq!(merged.group, "ray.io");
        assert_eq!(merged.display(), "RayJob ml/train");
    }
}
