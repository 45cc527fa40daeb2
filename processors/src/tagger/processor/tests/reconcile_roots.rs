//! Reconcile roots and the spans, logs and API calls of their traces.

use super::*;

#[test]
fn a_reconcile_root_tags_children_before_and_after_it_and_no_other_trace() {
    let request = tagged_traces(traces(
        KUBERAY_POD,
        [
            span("get RayCluster").ids(1, 2).parent(1),
            rayjob_reconcile().ids(1, 1),
            span("update RayJob status").ids(1, 3).parent(1),
            span("leader election renew").ids(9, 9),
        ],
    ));
    for child in ["get RayCluster", "update RayJob status"] {
        let attributes = &span_named(&request, child).attributes;
        assert_strings(attributes, &[(RECONCILE_ID, ROOT_1)]);
        assert_strings(attributes, RAYJOB_TRAIN);
        assert_unset(attributes, &[OPSCOPE_RECORD, RECONCILE_RESULT]);
    }
    let root = &span_named(&request, "reconcile").attributes;
    assert_strings(
        root,
        &[
            (RECONCILE_ID, ROOT_1),
            (OPSCOPE_RECORD, RECORD_RECONCILE),
            (RECONCILE_RESULT, "ok"),
        ],
    );
    let other_trace = span_named(&request, "leader election renew");
    assert!(other_trace.attributes.is_empty());
}

#[test]
fn an_empty_reconcile_id_is_no_id_and_the_root_span_names_the_reconcile() {
    let mut root = span("reconcile").attr(RECONCILE_ID, "");
    for (key, value) in RAYJOB_TRAIN {
        root = root.attr(key, value);
    }
    let request = tagged_traces(traces(
        KUBERAY_POD,
        [root.ids(1, 1), span("child").ids(1, 2).parent(1)],
    ));
    let child = &span_named(&request, "child").attributes;
    assert_strings(child, &[(RECONCILE_ID, ROOT_1)]);
    assert_strings(child, RAYJOB_TRAIN);
}

#[test]
fn every_shape_of_reconcile_root_names_its_reconcile_and_object() {
    let cases: [(&str, SpanBuilder, Pairs); 4] = [
        (
            "a `reconcile` span with opscope's object attributes",
            rayjob_reconcile(),
            &[
                (RECONCILE_ID, ROOT_1),
                (OBJECT_KIND, "RayJob"),
                (OBJECT_NAME, "train"),
            ],
        ),
        (
            "a `Reconcile` span with controller-runtime's keys and its own reconcileID",
            span("Reconcile")
                .attr("controller", "rayjob")
                .attr("controllerGroup", "ray.io")
                .attr("controllerKind", "RayJob")
                .attr("namespace", "ml")
                .attr("name", "train")
                .attr("reconcileID", "7d2b9e41-0f3a-4c8d-9b6e-2a5f8c1d3e70"),
            &[
                (RECONCILE_ID, "7d2b9e41-0f3a-4c8d-9b6e-2a5f8c1d3e70"),
                (CONTROLLER, "rayjob"),
                (OBJECT_GROUP, "ray.io"),
                (OBJECT_KIND, "RayJob"),
                (OBJECT_NAMESPACE, "ml"),
                (OBJECT_NAME, "train"),
            ],
        ),
        (
            "kube-rs's `reconciling object` with object.ref",
            span("reconciling object")
                .attr("object.ref", "Document.v1.kube.rs/samuel.default")
                .attr("object.reason", "object updated"),
            &[
                (RECONCILE_ID, ROOT_1),
                (OBJECT_GROUP, "kube.rs"),
                (OBJECT_KIND, "Document"),
                (OBJECT_NAMESPACE, "default"),
                (OBJECT_NAME, "samuel"),
            ],
        ),
        (
            "a span of any name carrying a reconcile id",
            span("RayJobReconciler.Reconcile")
                .attr("reconcile_id", "c3e8a1f0-5b7d-4e29-a6c4-91d0f2b8e357")
                .attr(OBJECT_KIND, "RayJob")
                .attr(OBJECT_NAMESPACE, "ml")
                .attr(OBJECT_NAME, "train"),
            &[
                (RECONCILE_ID, "c3e8a1f0-5b7d-4e29-a6c4-91d0f2b8e357"),
                (OBJECT_KIND, "RayJob"),
            ],
        ),
    ];
    for (shape, root, expected) in cases {
        let request = tagged_traces(traces(
            KUBERAY_POD,
            [span("child").ids(1, 2).parent(1), root.ids(1, 1)],
        ));
        let [child, root] = all_spans(&request)[..] else {
            unreachable!()
        };
        assert_strings(&root.attributes, expected);
        assert_strings(&root.attributes, &[(OPSCOPE_RECORD, RECORD_RECONCILE)]);
        assert_strings(&child.attributes, expected);
        assert!(
            get_str(&child.attributes, OPSCOPE_RECORD).is_none(),
            "{shape}: the child is no root"
        );
    }
}

#[test]
fn a_root_reports_how_its_reconcile_ended() {
    let ended = |root: SpanBuilder| {
        let request = tagged_traces(traces(KUBERAY_POD, [root.ids(1, 1)]));
        all_spans(&request)[0].attributes.clone()
    };
    let ok = ended(rayjob_reconcile());
    assert_strings(&ok, &[(RECONCILE_RESULT, "ok")]);
    assert_unset(&ok, &[RECONCILE_ERROR]);

    let failed = ended(rayjob_reconcile().failed("failed to create RayCluster: webhook denied"));
    assert_strings(
        &failed,
        &[
            (RECONCILE_RESULT, "error"),
            (
                RECONCILE_ERROR,
                "failed to create RayCluster: webhook denied",
            ),
        ],
    );

    let failed_silently = ended(rayjob_reconcile().failed(""));
    assert_strings(&failed_silently, &[(RECONCILE_RESULT, "error")]);
    assert_unset(&failed_silently, &[RECONCILE_ERROR]);

    let stated = ended(rayjob_reconcile().attr(RECONCILE_RESULT, "requeue"));
    assert_strings(&stated, &[(RECONCILE_RESULT, "requeue")]);
}

#[test]
fn logs_carrying_a_reconciles_trace_id_get_its_reconcile() {
    let mut tagger = tagger();
    tagger.tag_traces(&mut traces(KUBERAY_POD, [rayjob_reconcile().ids(1, 1)]));
    let mut request = logs(
        KUBERAY_POD,
        [
            log("creating head pod").trace(1),
            log("creating head pod").trace(2),
            log("creating head pod"),
        ],
    );
    tagger.tag_logs(&mut request);
    let [in_trace, other_trace, no_trace] = all_records(&request)[..] else {
        unreachable!()
    };
    assert_strings(&in_trace.attributes, &[(RECONCILE_ID, ROOT_1)]);
    assert_strings(&in_trace.attributes, RAYJOB_TRAIN);
    assert!(other_trace.attributes.is_empty());
    assert!(no_trace.attributes.is_empty());
}

#[test]
fn a_root_tags_children_of_its_trace_in_an_earlier_resource_of_the_batch() {
    // The API server's handler spans of the operator's PATCH (the trace context
    // propagated), batched before the operator's own spans.
    let mut request: ExportTraceServiceRequest = from_json(SPANS_APISERVER);
    let operator: ExportTraceServiceRequest = from_json(SPANS_409);
    request.resource_spans.extend(operator.resource_spans);
    let request = tagged_traces(request);
    let handler = &span_named(&request, "Update").attributes;
    assert_strings(handler, &[(RECONCILE_ID, "eee19b7ec3c1b174")]);
    assert_strings(handler, RAYJOB_TRAIN);
}

#[test]
fn a_root_nested_in_another_root_of_its_trace_is_part_of_that_reconcile() {
    // kube-rs: the `reconcile` function's span inside the runtime's `reconciling
    // object`, exported as spans end (child first), or in any other order.
    let child_first: ExportTraceServiceRequest = from_json(KUBE_RS_TRACE);
    let mut parent_first = child_first.clone();
    parent_first.resource_spans[0].scope_spans[0]
        .spans
        .reverse();
    for request in [child_first, parent_first] {
        let request = tagged_traces(request);
        for span in all_spans(&request) {
            assert_strings(
                &span.attributes,
                &[
                    (RECONCILE_ID, "00f067aa0ba902b7"),
                    (OBJECT_GROUP, "kube.rs"),
                    (OBJECT_KIND, "Document"),
                    (OBJECT_NAMESPACE, "default"),
                    (OBJECT_NAME, "samuel"),
                ],
            );
        }
        let roots: Vec<&str> = all_spans(&request)
            .into_iter()
            .filter(|span| get_str(&span.attributes, OPSCOPE_RECORD) == Some(RECORD_RECONCILE))
            .map(|span| span.name.as_str())
            .collect();
        assert_eq!(roots, ["reconciling object"]);
        let patch = &span_named(&request, "patch_status").attributes;
        assert_strings(
            patch,
            &[
                (OPSCOPE_RECORD, RECORD_API_CALL),
                (API_VERB, "patch"),
                (API_GROUP, "kube.rs"),
                (API_RESOURCE, "documents"),
                (API_SUBRESOURCE, "status"),
            ],
        );
    }
}
