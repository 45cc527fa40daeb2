//! End to end: the tagger's output extracted.

use super::*;

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
        include_str!("../../../../tests/fixtures/spans/otelhttp_client_old_conventions.json"),
        include_str!("../../../../tests/fixtures/spans/kube_apiserver_handlers.json"),
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
