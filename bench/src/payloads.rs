//! Payloads for the criterion benchmarks: OTLP requests from the workload the load
//! generator sends, and the correlator events such telemetry yields.

use opscope_processors::correlator::events::{
    Event, ObjectEvent, ObjectEventKind, Outcome, Reconcile, RecordPlace, Write,
};

use opscope_model::kubernetes::{ObjectRef, OperatorRef};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_workload::OperatorWorkload;

/// The event time the payloads start at.
const START: u64 = 1_700_000_000_000_000_000;

/// Reconcile traces of the default workload (a root span and 2-6 client API spans
/// each, 1 000 objects), at least `spans` spans; returns the request and its count.
pub fn reconcile_traces(spans: usize) -> (ExportTraceServiceRequest, usize) {
    OperatorWorkload::with_defaults(START).traces(spans, START)
}

/// controller-runtime JSON log records of the default workload, as OTLP log records
/// of the operator pods (the shape the filelog receiver produces), at least
/// `records`; returns the request and its count.
pub fn controller_runtime_logs(records: usize) -> (ExportLogsServiceRequest, usize) {
    OperatorWorkload::with_defaults(START).logs(records, START)
}

/// Log records and metric points of the default workload, at least `items` of
/// each; each request with its count.
pub fn workload_payloads(
    items: usize,
) -> (
    (ExportLogsServiceRequest, usize),
    (ExportMetricsServiceRequest, usize),
) {
    let mut workload = OperatorWorkload::with_defaults(START);
    (workload.logs(items, START), workload.metrics(items, START))
}

/// `count` correlator events spread over `objects` objects, 20 per second of event
/// time: reconciles, each followed every other time by a status write.
pub fn reconcile_events(count: usize, objects: usize) -> Vec<Event> {
    let operator = OperatorRef {
        name: "widget-operator".into(),
        namespace: "widget-system".into(),
    };
    (0..count)
        .map(|n| {
            let object = ObjectRef {
                group: "apps.example.com".into(),
                kind: "Widget".into(),
                namespace: "shop".into(),
                name: format!("w{}", n % objects.max(1)).into(),
                ..Default::default()
            };
            let kind = if n % 2 == 0 {
                ObjectEventKind::Reconcile(Reconcile {
                    controller: "widget".into(),
                    reconcile_id: format!("{n:x}"),
                    outcome: Outcome::Ok,
                    ..Default::default()
                })
            } else {
                ObjectEventKind::Write(Write {
                    verb: "update".into(),
                    subresource: "status".into(),
                    code: 200,
                    status_digest: vec![format!("status.lastSyncTime={n:016x}")],
                    ..Default::default()
                })
            };
            Event::Object(ObjectEvent {
                time: 1_700_000_000_000_000_000 + n as u64 * 50_000_000,
                object,
                operator: operator.clone(),
                kind,
                place: RecordPlace {
                    source: Some(format!("reconcile {n:x}").into()),
                    ..RecordPlace::default()
                },
            })
        })
        .collect()
}
