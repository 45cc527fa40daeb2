//! Tests of event extraction: records carrying the tagger's attributes (built in code,
//! or tagged from fixtures by the tagger) and the correlator events they give.

use opscope_proto::otlp::common::v1::any_value::Value;
use opscope_proto::otlp::metrics::v1::{Gauge, ResourceMetrics, ScopeMetrics, Sum};
use opscope_proto::otlp::resource::v1::Resource;

use super::*;
use crate::attributes::array_value;
use crate::correlator::events::{NANOS_PER_SECOND, ObjectEvent, ObjectKey};
use crate::correlator::signal::SignalType;
use crate::correlator::test_support::run;
use crate::tagger::processor::tests::otlp::*;
use crate::tagger::{OperatorTagger, TaggerConfig};

const BRIDGE_LOGS: &str =
    include_str!("../../tests/fixtures/otlp/controller_runtime_otel_bridge_logs.json");
const METRICS: &str = include_str!("../../tests/fixtures/otlp/controller_runtime_metrics.json");
const SPANS_409: &str =
    include_str!("../../tests/fixtures/spans/otelhttp_client_status_patch_409.json");
const STATUS_UPDATES: &str =
    include_str!("../../tests/fixtures/audit/status_update_request_response.jsonl");

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

// Reconciles.

#[test]
fn a_reconcile_root_span_is_a_reconcile_with_its_start_and_duration() {
    let root = reconcile_root()
        .attr(RECONCILE_RESULT, "ok")
        .value(OBJECT_GENERATION, Value::IntValue(3));
    let expected = ObjectEvent {
        time: T0 + 43 * MS,
        object: rayjob(),
        operator: kuberay(),
        kind: ObjectEventKind::Reconcile(Reconcile {
            controller: "rayjob".into(),
            instance: POD.into(),
            reconcile_id: RECONCILE_1.into(),
            trace_id: TRACE_1.into(),
            start: Some(T0),
            duration: Some(Duration::from_millis(43)),
            outcome: Outcome::Ok,
            generation: Some(3),
        }),
        place: RecordPlace {
            source: None,
            trace_id: Some(hex::FromHex::from_hex(TRACE_1).unwrap()),
            span_id: Some([1; 8]),
        },
    };
    let event = only(span_events([root]));
    assert_eq!(event, expected);
    assert_eq!(
        reference_of(&event),
        Some(format!(
            "trace {TRACE_1} span 0101010101010101 reconcile {RECONCILE_1}"
        ))
    );
}

#[test]
fn a_reconcile_roots_outcome_comes_from_its_result_or_else_its_status() {
    let seconds = Duration::from_secs_f64;
    let error = |text: &str| Outcome::Error(text.to_string());
    let cases: [(&str, SpanBuilder, Outcome); 12] = [
        (
            "result ok",
            reconcile_root().attr(RECONCILE_RESULT, "ok"),
            Outcome::Ok,
        ),
        (
            "result error with its text",
            reconcile_root()
                .attr(RECONCILE_RESULT, "error")
                .attr(RECONCILE_ERROR, "admission webhook denied"),
            error("admission webhook denied"),
        ),
        (
            "result error with the status message",
            reconcile_root()
                .attr(RECONCILE_RESULT, "error")
                .failed("status says why"),
            error("status says why"),
        ),
        (
            "result error without any text",
            reconcile_root().attr(RECONCILE_RESULT, "error"),
            error("error"),
        ),
        (
            "result error of a span failed without a message",
            reconcile_root().attr(RECONCILE_RESULT, "error").failed(""),
            error("error"),
        ),
        (
            "result requeue",
            reconcile_root().attr(RECONCILE_RESULT, "requeue"),
            Outcome::Requeue,
        ),
        (
            "requeue after seconds as a double",
            reconcile_root()
                .attr(RECONCILE_RESULT, "requeue_after")
                .value(RECONCILE_REQUEUE_AFTER, Value::DoubleValue(0.5)),
            Outcome::RequeueAfter(seconds(0.5)),
        ),
        (
            "requeue after seconds as text",
            reconcile_root()
                .attr(RECONCILE_RESULT, "requeue_after")
                .attr(RECONCILE_REQUEUE_AFTER, "30"),
            Outcome::RequeueAfter(seconds(30.0)),
        ),
        (
            "a negative delay is no delay",
            reconcile_root()
                .attr(RECONCILE_RESULT, "requeue_after")
                .value(RECONCILE_REQUEUE_AFTER, Value::DoubleValue(-3.0)),
            Outcome::RequeueAfter(Duration::ZERO),
        ),
        (
            "no result, a failed span",
            reconcile_root().failed("failed to create RayCluster"),
            error("failed to create RayCluster"),
        ),
        (
            "no result, a span ended well",
            reconcile_root(),
            Outcome::Ok,
        ),
        (
            "a result opscope does not write: as the span ended",
            reconcile_root().attr(RECONCILE_RESULT, "skipped"),
            Outcome::Ok,
        ),
    ];
    for (case, root, expected) in cases {
        let event = only(span_events([root]));
        assert_eq!(reconcile_of(&event).outcome, expected, "{case}");
    }
}

#[test]
fn a_child_span_of_a_reconcile_is_news_of_it_without_outcome_or_timing() {
    // A GET answered 404 before a create: an error span, not a failed reconcile.
    let child = span("HTTP GET")
        .ids(1, 2)
        .parent(1)
        .attrs(RAYJOB_TRAIN)
        .attr(RECONCILE_ID, RECONCILE_1)
        .failed("");
    let event = only(span_events([child]));
    let reconcile = reconcile_of(&event);
    assert_eq!(reconcile.reconcile_id, RECONCILE_1);
    assert_eq!(reconcile.outcome, Outcome::Unknown);
    assert_eq!((reconcile.start, reconcile.duration), (None, None));
}

#[test]
fn log_records_are_reconciles_at_their_time_or_else_when_observed() {
    let requeued = log("Reconcile done, requeueing after 1m30s")
        .attrs(RAYJOB_TRAIN)
        .attrs(&[
            (RECONCILE_ID, RECONCILE_1),
            (OPSCOPE_RECORD, RECORD_RECONCILE),
            (RECONCILE_RESULT, "requeue_after"),
        ])
        .value(RECONCILE_REQUEUE_AFTER, Value::DoubleValue(90.0))
        .time(T0);
    let untimed = log("reconciling RayJob")
        .attrs(RAYJOB_TRAIN)
        .attr(RECONCILE_ID, RECONCILE_1)
        .observed(T0 + 5 * MS);
    let events = log_events([requeued, untimed]);
    assert_eq!(
        events.iter().map(|e| e.time).collect::<Vec<_>>(),
        [T0, T0 + 5 * MS]
    );
    let outcomes: Vec<&Outcome> = events.iter().map(|e| &reconcile_of(e).outcome).collect();
    assert_eq!(
        outcomes,
        [
            &Outcome::RequeueAfter(Duration::from_secs(90)),
            &Outcome::Unknown
        ]
    );
    for event in &events {
        let reconcile = reconcile_of(event);
        assert_eq!((reconcile.start, reconcile.duration), (None, None));
        assert_eq!(reconcile.trace_id, "");
        assert_eq!(event.object, rayjob());
    }
}

#[test]
fn a_reconcile_record_needs_an_id_or_the_reconcile_mark_and_a_known_object() {
    let without_id = log("Successfully Reconciled")
        .attrs(RAYJOB_TRAIN)
        .attrs(&[(OPSCOPE_RECORD, RECORD_RECONCILE), (RECONCILE_RESULT, "ok")]);
    let event = only(log_events([without_id]));
    assert_eq!(
        reconcile_of(&event).reconcile_id,
        "",
        "each record is a reconcile"
    );

    let neither = log("starting workers").attrs(RAYJOB_TRAIN);
    assert!(log_events([neither]).is_empty());

    let unnamed_kind = log("Reconciler error")
        .attrs(&[(OBJECT_NAMESPACE, "prod"), (OBJECT_NAME, "logs")])
        .attrs(&[(RECONCILE_ID, RECONCILE_1), (RECONCILE_RESULT, "error")]);
    assert!(
        log_events([unnamed_kind]).is_empty(),
        "no kind nor resource"
    );
}

// Writes, object states, deletions.

#[test]
fn an_api_call_span_in_a_reconcile_is_news_of_it_and_a_write_on_its_target() {
    let patch = span("HTTP PATCH")
        .ids(1, 2)
        .parent(1)
        .attrs(RAYJOB_TRAIN)
        .attr(RECONCILE_ID, RECONCILE_1)
        .attrs(WRITES_RAYJOB_TRAIN)
        .attrs(&[(API_VERB, "patch"), (API_SUBRESOURCE, "status")])
        .value(HTTP_RESPONSE_STATUS_CODE, Value::IntValue(409))
        .failed("");
    let [reconcile, write] = &span_events([patch])[..] else {
        panic!("a reconcile and a write")
    };
    assert_eq!(reconcile.object, rayjob());
    assert_eq!(reconcile_of(reconcile).outcome, Outcome::Unknown);
    assert_eq!(write.object, rayjobs_train());
    assert_eq!(write.object.key(), rayjob().key(), "one object");
    assert_eq!(
        write_of(write),
        &Write {
            actor: Name::default(),
            instance: POD.into(),
            verb: "patch".into(),
            subresource: "status".into(),
            code: 409,
            reconcile_id: RECONCILE_1.into(),
            generation: None,
            resource_version: None,
            status_digest: Vec::new(),
        }
    );
    assert_eq!(
        reference_of(write),
        Some(format!(
            "trace {TRACE_1} span 0202020202020202 reconcile {RECONCILE_1}"
        ))
    );
}

#[test]
fn only_writing_verbs_are_writes_and_their_code_is_read_in_either_convention() {
    let call = |verb: &str| {
        span("HTTP")
            .ids(2, 2)
            .attrs(WRITES_RAYJOB_TRAIN)
            .attr(API_VERB, verb)
    };
    for verb in ["get", "list", "watch", "deletecollection"] {
        assert!(span_events([call(verb)]).is_empty(), "{verb}");
    }
    for verb in ["create", "update", "patch", "delete"] {
        let event = only(span_events([call(verb)]));
        assert_eq!(write_of(&event).verb, verb);
        assert_eq!(write_of(&event).code, 0, "unknown");
    }
    let old = call("update").value(HTTP_STATUS_CODE_OLD, Value::IntValue(200));
    assert_eq!(write_of(&only(span_events([old]))).code, 200);
    let nonsense = call("update").value(HTTP_RESPONSE_STATUS_CODE, Value::IntValue(70_000));
    assert_eq!(write_of(&only(span_events([nonsense]))).code, 0);
}

/// An audit record as the tagger writes it for a status update of the RayJob.
fn audited_status_update() -> LogBuilder {
    log("{\"kind\":\"Event\"}")
        .time(T0)
        .attrs(WRITES_RAYJOB_TRAIN)
        .attrs(RAYJOB_TRAIN)
        .attrs(&[
            (API_ACTOR, KUBERAY_ACCOUNT),
            (API_VERB, "update"),
            (API_SUBRESOURCE, "status"),
            (OBJECT_RESOURCE_VERSION, "48214"),
            (OPSCOPE_RECORD, RECORD_OBJECT_STATE),
        ])
        .value(HTTP_RESPONSE_STATUS_CODE, Value::IntValue(200))
        .value(OBJECT_GENERATION, Value::IntValue(2))
        .value(OBJECT_OBSERVED_GENERATION, Value::IntValue(2))
        .value(
            OBJECT_STATUS_DIGEST,
            array_value(["status.lastSyncTime=9f2c".to_string()]),
        )
}

#[test]
fn an_audited_write_is_by_its_actor_with_generation_version_and_status_digest() {
    let events = log_events([audited_status_update()]);
    let [write, state] = &events[..] else {
        panic!("a write and a state: {events:#?}")
    };
    assert_eq!(
        write_of(write),
        &Write {
            actor: KUBERAY_ACCOUNT.into(),
            instance: POD.into(),
            verb: "update".into(),
            subresource: "status".into(),
            code: 200,
            reconcile_id: String::new(),
            generation: Some(2),
            resource_version: Some("48214".into()),
            status_digest: vec!["status.lastSyncTime=9f2c".into()],
        }
    );
    assert_eq!(
        state_of(state),
        &ObjectState {
            generation: Some(2),
            observed_generation: Some(2),
            resource_version: Some("48214".into()),
            deletion_timestamp: None,
            finalizers: None,
        }
    );
    assert_eq!(write.object, rayjobs_train(), "the call's target");
}

#[test]
fn an_object_state_shows_finalizers_only_when_the_record_does() {
    let state = |finalizers: Option<Vec<String>>| {
        let mut record = log("audit").attrs(RAYJOB_TRAIN).attrs(&[
            (OPSCOPE_RECORD, RECORD_OBJECT_STATE),
            (OBJECT_DELETION_TIMESTAMP, "2024-05-01T12:05:00Z"),
        ]);
        if let Some(names) = finalizers {
            record = record.value(OBJECT_FINALIZERS, array_value(names));
        }
        state_of(&only(log_events([record]))).clone()
    };
    let waiting = state(Some(vec!["ray.io/rayjob-finalizer".into()]));
    assert_eq!(
        waiting.finalizers,
        Some(vec!["ray.io/rayjob-finalizer".into()])
    );
    assert_eq!(
        waiting.deletion_timestamp,
        Some(T0 + 300 * NANOS_PER_SECOND)
    );
    assert_eq!(
        state(Some(Vec::new())).finalizers,
        Some(Vec::new()),
        "shows none"
    );
    assert_eq!(state(None).finalizers, None, "does not show them");

    let operators_own = log("patch")
        .attrs(WRITES_RAYJOB_TRAIN)
        .value(OBJECT_FINALIZERS, array_value(Vec::new()));
    let events = log_events([operators_own]);
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, ObjectEventKind::State(_))),
        "an operator's own k8s.object.finalizers shows the state too: {events:?}"
    );
}

#[test]
fn lease_renewals_and_events_are_no_reconciles() {
    for resource in ["leases", "events"] {
        let renewal = span("PUT")
            .ids(2, 2)
            .attr(OPSCOPE_RECORD, RECORD_API_CALL)
            .attr(API_GROUP, "coordination.k8s.io")
            .attr(API_RESOURCE, resource)
            .attr(API_NAMESPACE, "ray-system")
            .attr(API_NAME, "kuberay-operator")
            .attr(API_VERB, "update");
        assert!(span_events([renewal]).is_empty(), "{resource}");
    }
}

#[test]
fn a_record_of_a_deleted_object_is_gone() {
    let deleted = |gone: Value| {
        log("delete")
            .attrs(WRITES_RAYJOB_TRAIN)
            .attr(API_VERB, "delete")
            .value(HTTP_RESPONSE_STATUS_CODE, Value::IntValue(200))
            .value(OBJECT_GONE, gone)
    };
    let events = log_events([deleted(Value::BoolValue(true))]);
    let kinds: Vec<&ObjectEventKind> = events.iter().map(|e| &e.kind).collect();
    assert!(matches!(
        kinds[..],
        [ObjectEventKind::Write(_), ObjectEventKind::Gone]
    ));
    assert_eq!(events[1].object, rayjobs_train());
    assert_eq!(log_events([deleted(Value::BoolValue(false))]).len(), 1);
    assert_eq!(
        log_events([deleted(Value::StringValue("true".into()))]).len(),
        2
    );
}

// Operators and evidence.

#[test]
fn the_operator_is_the_api_actor_when_the_record_names_one() {
    let operator_of = |actor: Option<&str>, resource: &[(&str, &str)]| {
        let mut record = log("update")
            .attrs(WRITES_RAYJOB_TRAIN)
            .attr(API_VERB, "update");
        if let Some(actor) = actor {
            record = record.attr(API_ACTOR, actor);
        }
        let mut events = Vec::new();
        from_logs(&logs(resource, [record]), &mut events);
        only(object_events(events)).operator
    };
    let apiserver = [
        (OPERATOR_NAME, "kube-apiserver"),
        (K8S_NAMESPACE_NAME, "kube-system"),
    ];
    assert_eq!(operator_of(Some(KUBERAY_ACCOUNT), &apiserver), kuberay());
    assert_eq!(
        operator_of(Some("kubernetes-admin"), &apiserver),
        OperatorRef {
            name: "kubernetes-admin".into(),
            namespace: Name::default(),
        }
    );
    assert_eq!(operator_of(None, KUBERAY), kuberay());
    assert_eq!(operator_of(None, &[]), OperatorRef::default());
}

#[test]
fn evidence_is_the_log_source_else_the_trace_and_the_reconcile_id() {
    let record = || {
        log("Reconcile successful")
            .attrs(RAYJOB_TRAIN)
            .attr(RECONCILE_ID, RECONCILE_1)
    };
    let evidence = |record: LogBuilder| reference_of(&only(log_events([record])));
    assert_eq!(
        evidence(record().trace(1).attr(LOG_SOURCE, "manager/0.log:42")),
        Some(format!("manager/0.log:42 reconcile {RECONCILE_1}"))
    );
    assert_eq!(
        evidence(record().trace(1)),
        Some(format!("trace {TRACE_1} reconcile {RECONCILE_1}"))
    );
    assert_eq!(
        evidence(record().trace(0)),
        Some(format!("reconcile {RECONCILE_1}")),
        "an all-zero trace id is no trace"
    );
    let state = log("audit")
        .attrs(RAYJOB_TRAIN)
        .attr(OPSCOPE_RECORD, RECORD_OBJECT_STATE);
    assert_eq!(evidence(state), None);
}

#[test]
fn a_trace_id_of_another_length_than_otlps_is_written_out_whole() {
    let record = log("Reconcile successful")
        .attrs(RAYJOB_TRAIN)
        .attr(RECONCILE_ID, RECONCILE_1)
        .trace_bytes(&[0xab; 8]);
    let event = only(log_events([record]));
    assert_eq!(event.place.trace_id, None);
    assert_eq!(
        reference_of(&event),
        Some(format!("trace abababababababab reconcile {RECONCILE_1}"))
    );
}

// Gauges.

/// The metrics of a controller-runtime manager as a Prometheus receiver scrapes them.
fn tagged_metrics(json: &str) -> ExportMetricsServiceRequest {
    let mut request = from_json(json);
    OperatorTagger::new(&TaggerConfig::default()).tag_metrics(&mut request);
    request
}

fn gauges(request: &ExportMetricsServiceRequest) -> Vec<GaugeEvent> {
    let mut events = Vec::new();
    from_metrics(request, &mut events);
    events
        .into_iter()
        .filter_map(|event| match event {
            Event::Gauge(gauge) => Some(gauge),
            Event::Counter(_) => None,
            Event::Object(object) => panic!("not a gauge: {object:?}"),
        })
        .collect()
}

fn counters(request: &ExportMetricsServiceRequest) -> Vec<CounterEvent> {
    let mut events = Vec::new();
    from_metrics(request, &mut events);
    events
        .into_iter()
        .filter_map(|event| match event {
            Event::Counter(counter) => Some(counter),
            _ => None,
        })
        .collect()
}

/// A sum of `name` with one point per label set, each valued 10, of the KubeRay pod.
fn one_sum(
    name: &str,
    temporality: AggregationTemporality,
    points: &[&[(&str, &str)]],
) -> ExportMetricsServiceRequest {
    let mut request = one_gauge(KUBERAY, name, number_data_point::Value::AsInt(10));
    let metric = &mut request.resource_metrics[0].scope_metrics[0].metrics[0];
    let point = |labels: &&[(&str, &str)]| NumberDataPoint {
        attributes: attributes(labels),
        time_unix_nano: T0,
        value: Some(number_data_point::Value::AsDouble(10.0)),
        ..Default::default()
    };
    metric.data = Some(Data::Sum(Sum {
        data_points: points.iter().map(point).collect(),
        aggregation_temporality: temporality as i32,
        is_monotonic: true,
    }));
    request
}

#[test]
fn controller_counters_are_counter_events_per_controller_and_series() {
    let reconciles = counters(&tagged_metrics(METRICS));
    assert_eq!(reconciles.len(), 1, "{reconciles:?}");
    let reconcile = &reconciles[0];
    assert_eq!(reconcile.counter, Counter::Reconciles);
    assert_eq!(reconcile.controller, "rayjob");
    assert_eq!(reconcile.series, "result=success");
    assert_eq!((reconcile.value, reconcile.cumulative), (1520.0, true));
    assert_eq!(
        (reconcile.instance.as_str(), &reconcile.operator),
        (POD, &kuberay())
    );

    let cumulative = AggregationTemporality::Cumulative;
    let requests = counters(&one_sum(
        "rest_client_requests_total",
        cumulative,
        &[
            &[("code", "200"), ("method", "PUT")],
            &[("code", "409"), ("method", "PUT")],
        ],
    ));
    let seen: Vec<(Counter, &str)> = requests
        .iter()
        .map(|c| (c.counter, c.series.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (Counter::ApiRequests, "code=200,method=PUT"),
            (Counter::ApiConflicts, "code=409,method=PUT"),
            (Counter::ApiRequests, "code=409,method=PUT"),
        ]
    );

    // Older controller-runtime names the work queue `name` only.
    let retries = counters(&one_sum(
        "workqueue_retries_total",
        cumulative,
        &[&[("name", "raycluster")]],
    ));
    assert_eq!(retries[0].counter, Counter::Retries);
    assert_eq!(retries[0].controller, "raycluster");

    // An OTLP SDK's delta sum, named without `_total`.
    let errors = counters(&one_sum(
        "controller_runtime_reconcile_errors",
        AggregationTemporality::Delta,
        &[&[("controller", "rayjob")]],
    ));
    assert_eq!(errors[0].counter, Counter::ReconcileErrors);
    assert!(!errors[0].cumulative);
    assert!(counters(&one_sum("workqueue_adds_total", cumulative, &[&[]])).is_empty());
}

#[test]
fn watched_runtime_gauges_are_gauge_events_per_work_queue() {
    let events = gauges(&tagged_metrics(METRICS));
    let expected = [
        ("workqueue_depth{rayjob}", 42.0),
        ("workqueue_depth{raycluster}", 0.0),
        ("go_goroutines", 187.0),
        ("process_resident_memory_bytes", 62_754_816.0),
    ];
    let seen: Vec<(&str, f64)> = events.iter().map(|g| (g.name.as_str(), g.value)).collect();
    assert_eq!(seen, expected, "counters and histograms are not watched");
    for gauge in &events {
        assert_eq!(gauge.time, T0 + 30 * NANOS_PER_SECOND);
        assert_eq!(gauge.operator, kuberay());
        assert_eq!(gauge.instance, POD);
    }
}

/// A request with one gauge point of `name` of an instance described by `resource`.
fn one_gauge(
    resource: &[(&str, &str)],
    name: &str,
    value: number_data_point::Value,
) -> ExportMetricsServiceRequest {
    let point = NumberDataPoint {
        time_unix_nano: T0,
        value: Some(value),
        ..Default::default()
    };
    let metric = Metric {
        name: name.into(),
        data: Some(Data::Gauge(Gauge {
            data_points: vec![point],
        })),
        ..Default::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: attributes(resource),
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![metric],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn gauges_need_an_instance_and_take_integer_points() {
    let int = number_data_point::Value::AsInt(215);
    let by_pod = gauges(&one_gauge(KUBERAY, "go_goroutines", int));
    assert_eq!((by_pod[0].instance.as_str(), by_pod[0].value), (POD, 215.0));
    let sdk = [
        (OPERATOR_NAME, "doc-controller"),
        ("service.instance.id", "doc-controller-1"),
    ];
    let by_instance_id = gauges(&one_gauge(&sdk, "go_goroutines", int));
    assert_eq!(by_instance_id[0].instance, "doc-controller-1");
    let nameless = [(OPERATOR_NAME, "doc-controller")];
    assert!(gauges(&one_gauge(&nameless, "go_goroutines", int)).is_empty());
    let unwatched = number_data_point::Value::AsDouble(1.0);
    assert!(gauges(&one_gauge(KUBERAY, "go_threads", unwatched)).is_empty());
}

#[test]
fn a_growing_work_queue_of_one_controller_is_a_workqueue_backlog() {
    let mut events = Vec::new();
    for sample in 0..64 {
        let mut request: ExportMetricsServiceRequest = tagged_metrics(METRICS);
        for point in request.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter_mut()
            .filter_map(|m| match &mut m.data {
                Some(Data::Gauge(gauge)) if m.name == "workqueue_depth" => Some(gauge),
                _ => None,
            })
            .flat_map(|gauge| &mut gauge.data_points)
        {
            point.time_unix_nano = T0 + sample * 15 * NANOS_PER_SECOND;
            point.value = Some(number_data_point::Value::AsDouble(
                10.0 + 3.0 * sample as f64,
            ));
        }
        from_metrics(&request, &mut events);
    }
    let signals = run(events);
    let leak = signals
        .iter()
        .find(|s| s.signal == SignalType::ResourceLeak)
        .expect("a resource leak");
    assert_eq!(leak.cause, "workqueue_backlog");
}

// End to end: the tagger's output extracted.

fn tag_and_extract_logs(mut request: ExportLogsServiceRequest) -> Vec<ObjectEvent> {
    OperatorTagger::new(&TaggerConfig::default()).tag_logs(&mut request);
    let mut events = Vec::new();
    from_logs(&request, &mut events);
    object_events(events)
}

#[test]
fn a_controller_runtime_loop_tagged_then_extracted_is_one_reconcile_per_record() {
    let lines: Vec<String> = (0..6u64)
        .map(|i| {
            format!(
                "2024-05-01T12:00:0{i}.250Z\tINFO\tReconcile done, requeueing after 1s\t\
                 {{\"controller\": \"rayjob\", \"controllerGroup\": \"ray.io\", \
                 \"controllerKind\": \"RayJob\", \"RayJob\": {{\"name\":\"train\",\"namespace\":\"ml\"}}, \
                 \"namespace\": \"ml\", \"name\": \"train\", \"reconcileID\": \"7d2b9e41-0f3a-4c8d-9b6e-2a5f8c1d3e7{i}\"}}"
            )
        })
        .collect();
    let pod = [
        (K8S_NAMESPACE_NAME, "ray-system"),
        (K8S_POD_NAME, POD),
        (K8S_CONTAINER_NAME, "manager"),
    ];
    let events = tag_and_extract_logs(log_lines(&pod, &lines.join("\n")));
    assert_eq!(events.len(), lines.len());
    let key = ObjectKey {
        namespace: "ml".into(),
        resource: "rayjobs".into(),
        name: "train".into(),
    };
    for (i, event) in (0..).zip(&events) {
        assert_eq!(event.object.key(), key);
        assert_eq!(event.time, T0 + i * NANOS_PER_SECOND + 250 * MS);
        assert_eq!(event.operator, kuberay());
        let reconcile = reconcile_of(event);
        assert_eq!(
            reconcile.reconcile_id,
            format!("7d2b9e41-0f3a-4c8d-9b6e-2a5f8c1d3e7{i}")
        );
        assert_eq!(reconcile.controller, "rayjob");
        assert_eq!(reconcile.instance, POD);
        assert_eq!(
            reconcile.outcome,
            Outcome::RequeueAfter(Duration::from_secs(1))
        );
    }
}

#[test]
fn otel_bridge_logs_tagged_then_extracted_give_the_reconciles_and_the_conflict() {
    let events = tag_and_extract_logs(from_json(BRIDGE_LOGS));
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|event| match &event.kind {
            ObjectEventKind::Reconcile(r) => ("reconcile", r.reconcile_id.as_str()),
            ObjectEventKind::Write(w) => ("write", w.reconcile_id.as_str()),
            other => panic!("{other:?}"),
        })
        .collect();
    let first = "1f6e8a52-3c4d-4b7e-9a0f-5d2c8b1e7a36";
    assert_eq!(
        kinds,
        [
            ("reconcile", first),
            ("reconcile", first),
            ("write", first),
            ("reconcile", "8d03b7c1-6e2a-4f59-b4d8-0a9c7e3f2b15"),
        ]
    );
    assert_eq!(write_of(&events[2]).code, 409);
    assert!(events.iter().all(|e| e.object.key() == rayjob().key()));
    assert_eq!(
        reference_of(&events[0]).as_deref(),
        Some(
            "trace 5b8efff798038103d269b633813fc60c span eee19b7ec3c1b174 \
             reconcile 1f6e8a52-3c4d-4b7e-9a0f-5d2c8b1e7a36"
        )
    );
}

#[test]
fn audited_status_updates_tagged_then_extracted_are_writes_with_changing_digests() {
    let events = tag_and_extract_logs(log_lines(
        &[("host.name", "control-plane-1")],
        STATUS_UPDATES,
    ));
    let writes: Vec<&Write> = events
        .iter()
        .filter_map(|event| match &event.kind {
            ObjectEventKind::Write(write) => Some(write),
            _ => None,
        })
        .collect();
    assert_eq!(writes.len(), 3, "the RequestReceived stage is no write");
    for write in &writes {
        assert_eq!(
            (write.verb.as_str(), write.subresource.as_str(), write.code),
            ("update", "status", 200)
        );
        assert_eq!(write.actor, KUBERAY_ACCOUNT);
    }
    let sync_times: Vec<&String> = writes
        .iter()
        .map(|w| {
            w.status_digest
                .iter()
                .find(|d| d.starts_with("status.lastSyncTime="))
                .unwrap()
        })
        .collect();
    assert!(sync_times[0] != sync_times[1] && sync_times[1] != sync_times[2]);
    assert!(events.iter().all(|e| e.operator == kuberay()));
}

#[test]
fn a_failed_reconcile_trace_tagged_then_extracted_is_one_reconcile_that_failed() {
    let mut request: ExportTraceServiceRequest = from_json(SPANS_409);
    OperatorTagger::new(&TaggerConfig::default()).tag_traces(&mut request);
    let mut events = Vec::new();
    from_traces(&request, &mut events);
    let events = object_events(events);
    let reconciles: Vec<&Reconcile> = events
        .iter()
        .filter_map(|event| match &event.kind {
            ObjectEventKind::Reconcile(reconcile) => Some(reconcile),
            _ => None,
        })
        .collect();
    assert!(
        reconciles
            .iter()
            .all(|r| r.reconcile_id == "eee19b7ec3c1b174")
    );
    let root = reconciles
        .iter()
        .find(|r| r.start.is_some())
        .expect("the root");
    assert!(
        matches!(&root.outcome, Outcome::Error(e) if e.contains("the object has been modified"))
    );
    assert_eq!(root.duration, Some(Duration::from_millis(43)));
    let child = reconciles
        .iter()
        .find(|r| r.start.is_none())
        .expect("the child");
    assert_eq!(
        child.outcome,
        Outcome::Unknown,
        "the PATCH failing is the root's news"
    );
    let patch = events
        .iter()
        .filter_map(|event| match &event.kind {
            ObjectEventKind::Write(write) if write.verb == "patch" => Some(write),
            _ => None,
        })
        .next()
        .expect("the PATCH");
    assert_eq!((patch.subresource.as_str(), patch.code), ("status", 409));
    assert!(events.iter().all(|e| e.object.key() == rayjob().key()));
}

#[test]
fn spans_tagged_without_the_api_attributes_give_the_same_events() {
    let fixtures = [
        SPANS_409,
        include_str!("../../tests/fixtures/spans/otelhttp_client_old_conventions.json"),
        include_str!("../../tests/fixtures/spans/kube_apiserver_handlers.json"),
    ];
    for fixture in fixtures {
        let events_when = |api_attributes: bool| {
            let mut request: ExportTraceServiceRequest = from_json(fixture);
            OperatorTagger::new(&TaggerConfig {
                api_attributes,
                ..TaggerConfig::default()
            })
            .tag_traces(&mut request);
            let written = request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
                .any(|span| get_str(&span.attributes, API_VERB).is_some());
            let mut events = Vec::new();
            from_traces(&request, &mut events);
            (written, events)
        };
        let (written, with) = events_when(true);
        let (left_out, without) = events_when(false);
        assert!(written && !left_out, "only the default writes k8s.api.*");
        assert!(
            with.iter().any(|event| matches!(
                event,
                Event::Object(ObjectEvent {
                    kind: ObjectEventKind::Write(_),
                    ..
                })
            )),
            "the fixture has writes"
        );
        assert_eq!(with, without);
    }
}

#[test]
fn a_log_record_carrying_only_unrelated_attributes_gives_nothing() {
    let untagged = log("Reconcile successful")
        .attr("controller", "rayjob")
        .attr("reconcileID", RECONCILE_1)
        .attr("namespace", "ml")
        .attr("name", "train");
    assert!(
        log_events([untagged]).is_empty(),
        "extraction reads only the tagger's names"
    );
}
