//! Audit events carried as log records.

use super::*;

#[test]
fn an_audit_event_list_becomes_one_record_per_event() {
    let request = tagged_logs(logs(CONTROL_PLANE, [log(EVENT_LIST).observed(T0)]));
    let records = all_records(&request);
    assert_eq!(records.len(), 3, "one record per event of the list");
    let [received, patch, get] = records[..] else {
        unreachable!()
    };
    assert!(
        received.attributes.is_empty(),
        "a RequestReceived stage is passed on untagged"
    );
    assert_strings(
        &patch.attributes,
        &[
            (API_ACTOR, KUBERAY_ACCOUNT),
            (API_VERB, "patch"),
            (API_GROUP, "ray.io"),
            (API_RESOURCE, "rayjobs"),
            (API_NAMESPACE, "ml"),
            (API_NAME, "train"),
            (API_SUBRESOURCE, "status"),
            (OBJECT_GROUP, "ray.io"),
            (OBJECT_RESOURCE, "rayjobs"),
            (OBJECT_NAMESPACE, "ml"),
            (OBJECT_NAME, "train"),
            (OPSCOPE_RECORD, RECORD_API_CALL),
        ],
    );
    assert_eq!(
        get_i64(&patch.attributes, HTTP_RESPONSE_STATUS_CODE),
        Some(200)
    );
    assert_eq!(
        Some(patch.time_unix_nano),
        parse_rfc3339("2024-05-01T12:00:05.006250Z")
    );
    assert_eq!(patch.observed_time_unix_nano, T0, "the source record's");
    let digest = get_strings(&patch.attributes, OBJECT_STATUS_DIGEST);
    let paths: Vec<&str> = digest
        .iter()
        .filter_map(|entry| Some(entry.rsplit_once('=')?.0))
        .collect();
    assert_eq!(paths, ["status.jobStatus", "status.lastSyncTime"]);
    assert_strings(
        &get.attributes,
        &[(API_VERB, "get"), (OPSCOPE_RECORD, RECORD_API_CALL)],
    );

    for (record, audit_id) in records.iter().zip([
        "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e",
        "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e",
        "2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f",
    ]) {
        let event: serde_json::Value = serde_json::from_str(body_of(record)).unwrap();
        assert_eq!(
            event["kind"], "Event",
            "each record's body is its own event"
        );
        assert_eq!(event["auditID"], audit_id);
    }
}

#[test]
fn an_audit_status_update_shows_the_object_state() {
    let record = tagged_line(line(STATUS_UPDATES, 1));
    let attributes = &record.attributes;
    assert_strings(
        attributes,
        &[
            (OPSCOPE_RECORD, RECORD_OBJECT_STATE),
            (API_VERB, "update"),
            (API_SUBRESOURCE, "status"),
            (API_KIND, "RayJob"),
            (OBJECT_KIND, "RayJob"),
            (OBJECT_RESOURCE_VERSION, "48214"),
        ],
    );
    assert_eq!(get_i64(attributes, OBJECT_GENERATION), Some(2));
    assert_eq!(get_i64(attributes, OBJECT_OBSERVED_GENERATION), Some(2));
    assert_eq!(
        get_strings(attributes, OBJECT_FINALIZERS),
        ["ray.io/rayjob-finalizer"]
    );
    assert!(!get_strings(attributes, OBJECT_STATUS_DIGEST).is_empty());
    assert_unset(attributes, &[OBJECT_GONE, OBJECT_DELETION_TIMESTAMP]);
}

#[test]
fn a_delete_is_gone_only_when_the_object_shows_no_finalizers() {
    let pending = tagged_line(line(DELETES, 0));
    assert_strings(
        &pending.attributes,
        &[
            (OPSCOPE_RECORD, RECORD_OBJECT_STATE),
            (API_ACTOR, "kubernetes-admin"),
            (API_VERB, "delete"),
            (OBJECT_DELETION_TIMESTAMP, "2024-05-01T12:05:00Z"),
        ],
    );
    assert_eq!(
        get_strings(&pending.attributes, OBJECT_FINALIZERS),
        ["ray.io/rayjob-finalizer"]
    );
    assert_unset(&pending.attributes, &[OBJECT_GONE]);

    // The same delete once the finalizer was removed: the response shows the object
    // without finalizers (a full object: it has a uid).
    let completed = line(DELETES, 0).replace(r#""finalizers":["ray.io/rayjob-finalizer"],"#, "");
    let gone = tagged_line(&completed);
    assert_eq!(get_bool(&gone.attributes, OBJECT_GONE), Some(true));
    assert_eq!(
        get_strings(&gone.attributes, OBJECT_FINALIZERS),
        Vec::<String>::new()
    );

    // A Metadata-level event shows no object: the object may still wait on finalizers.
    let metadata_level = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9","stage":"ResponseComplete","requestURI":"/apis/ray.io/v1/namespaces/ml/rayjobs/train","verb":"delete","user":{"username":"kubernetes-admin","groups":["system:masters","system:authenticated"]},"objectRef":{"resource":"rayjobs","namespace":"ml","name":"train","apiGroup":"ray.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2024-05-01T12:06:00.100000Z","stageTimestamp":"2024-05-01T12:06:00.104000Z"}"#;
    let unknown = tagged_line(metadata_level);
    assert_strings(
        &unknown.attributes,
        &[(API_VERB, "delete"), (OPSCOPE_RECORD, RECORD_API_CALL)],
    );
    assert_unset(&unknown.attributes, &[OBJECT_GONE, OBJECT_FINALIZERS]);
    // Nor does a `Status` body (a ConfigMap deleted at once): the audit facts cannot
    // tell it from no body, so it is not taken for proof either.
    let status_body = tagged_line(line(DELETES, 1));
    assert_unset(&status_body.attributes, &[OBJECT_GONE]);
}

#[test]
fn an_audit_409_is_a_conflict_of_its_writer() {
    let conflict = tagged_line(line(CONFLICTS, 0));
    assert_strings(
        &conflict.attributes,
        &[
            (API_ACTOR, KUBERAY_ACCOUNT),
            (API_VERB, "update"),
            (API_GROUP, "ray.io"),
            (API_RESOURCE, "rayjobs"),
            (API_NAMESPACE, "ml"),
            (API_NAME, "train"),
            (API_SUBRESOURCE, "status"),
        ],
    );
    assert_eq!(
        get_i64(&conflict.attributes, HTTP_RESPONSE_STATUS_CODE),
        Some(409)
    );
    let already_exists = tagged_line(line(CONFLICTS, 1));
    assert_strings(
        &already_exists.attributes,
        &[(API_VERB, "create"), (API_RESOURCE, "rayclusters")],
    );
}

#[test]
fn audit_events_of_stages_that_do_not_count_pass_unchanged() {
    let received = log_lines(CONTROL_PLANE, line(STATUS_UPDATES, 0));
    assert_eq!(tagged_logs(received.clone()), received);
}
