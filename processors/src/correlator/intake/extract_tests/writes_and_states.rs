//! Writes, object states and deletions.

use super::*;

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
