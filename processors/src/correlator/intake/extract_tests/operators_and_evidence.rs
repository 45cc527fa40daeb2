//! The operator of each event, and the evidence it points back to.

use super::*;

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
