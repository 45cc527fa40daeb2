//! Reconciles from root spans and log records.

use super::*;

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
