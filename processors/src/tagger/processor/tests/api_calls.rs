//! API calls of client and API-server spans, and the 409s they report.

use super::*;

#[test]
fn a_client_patch_of_status_answered_409_is_an_api_call_on_its_target() {
    let request = tagged_traces(from_json(SPANS_409));
    let patch = &span_named(&request, "HTTP PATCH").attributes;
    assert_strings(
        patch,
        &[
            (OPSCOPE_RECORD, RECORD_API_CALL),
            (API_VERB, "patch"),
            (API_GROUP, "ray.io"),
            (API_RESOURCE, "rayjobs"),
            (API_NAMESPACE, "ml"),
            (API_NAME, "train"),
            (API_SUBRESOURCE, "status"),
            (RECONCILE_ID, "eee19b7ec3c1b174"),
        ],
    );
    assert_strings(patch, RAYJOB_TRAIN);
    assert_eq!(get_i64(patch, HTTP_RESPONSE_STATUS_CODE), Some(409));
}

#[test]
fn a_409_text_in_a_span_status_names_the_conflicting_object() {
    // The reconcile failed with the conflict, and no client span of its trace is
    // in the batch: its text is the only evidence of the 409.
    let mut request: ExportTraceServiceRequest = from_json(SPANS_409);
    for resource in &mut request.resource_spans {
        for scope in &mut resource.scope_spans {
            scope.spans.retain(|span| span.name == "reconcile");
        }
    }
    let request = tagged_traces(request);
    let root = &span_named(&request, "reconcile").attributes;
    assert_strings(
        root,
        &[
            (API_VERB, "update"),
            (API_GROUP, "ray.io"),
            (API_RESOURCE, "rayjobs"),
            (API_NAMESPACE, "ml"),
            (API_NAME, "train"),
            (RECONCILE_RESULT, "error"),
            (OPSCOPE_RECORD, RECORD_RECONCILE),
        ],
    );
    assert_eq!(get_i64(root, HTTP_RESPONSE_STATUS_CODE), Some(409));
    assert!(
        get_str(root, RECONCILE_ERROR)
            .unwrap()
            .starts_with("failed to update status: ")
    );
}

#[test]
fn a_409_text_repeating_a_client_span_of_the_trace_is_not_a_second_conflict() {
    let request = tagged_traces(from_json(SPANS_409));
    let root = &span_named(&request, "reconcile").attributes;
    assert_eq!(get_str(root, RECONCILE_RESULT), Some("error"));
    assert_eq!(
        get_str(root, API_VERB),
        None,
        "the PATCH span reports the 409"
    );
    assert_eq!(get_i64(root, HTTP_RESPONSE_STATUS_CODE), None);
}

#[test]
fn a_409_text_in_an_exception_event_names_the_conflicting_object() {
    let request = tagged_traces(traces(
        KUBERAY_POD,
        [
            span("update RayJob status")
                .ids(1, 2)
                .parent(1)
                .exception(RAYJOB_CONFLICT),
            rayjob_reconcile().ids(1, 1),
            span("outside any reconcile")
                .ids(2, 2)
                .exception(RAYJOB_CONFLICT),
        ],
    ));
    let conflict = [
        (API_VERB, "update"),
        (API_GROUP, "ray.io"),
        (API_RESOURCE, "rayjobs"),
        (API_NAME, "train"),
    ];
    let in_reconcile = &span_named(&request, "update RayJob status").attributes;
    assert_strings(in_reconcile, &conflict);
    assert_strings(in_reconcile, &[(API_NAMESPACE, "ml")]);
    assert_eq!(get_i64(in_reconcile, HTTP_RESPONSE_STATUS_CODE), Some(409));
    let outside = &span_named(&request, "outside any reconcile").attributes;
    assert_strings(outside, &conflict);
    assert_unset(outside, &[API_NAMESPACE]);
}

#[test]
fn client_spans_of_old_conventions_and_apiserver_spans_are_api_calls() {
    let old = tagged_traces(from_json(SPANS_OLD_CONVENTIONS));
    let update = &span_named(&old, "HTTP PUT").attributes;
    assert_strings(
        update,
        &[
            (OPSCOPE_RECORD, RECORD_API_CALL),
            (API_VERB, "update"),
            (API_RESOURCE, "configmaps"),
            (API_NAMESPACE, "ml"),
            (API_NAME, "train-config"),
        ],
    );
    assert_unset(update, &[API_GROUP, API_SUBRESOURCE]);
    assert_eq!(get_i64(update, HTTP_RESPONSE_STATUS_CODE), Some(200));
    let watch = &span_named(&old, "HTTP GET").attributes;
    assert_strings(
        watch,
        &[
            (API_VERB, "watch"),
            (API_GROUP, "ray.io"),
            (API_RESOURCE, "rayjobs"),
        ],
    );
    let health = &span_named(&old, "HTTP GET healthz").attributes;
    assert_unset(health, &[OPSCOPE_RECORD, API_VERB]);

    let apiserver = tagged_traces(from_json(SPANS_APISERVER));
    let handler = &span_named(&apiserver, "Update").attributes;
    assert_strings(
        handler,
        &[
            (API_VERB, "update"),
            (API_RESOURCE, "rayjobs"),
            (API_NAME, "train"),
            (API_SUBRESOURCE, "status"),
        ],
    );
}
