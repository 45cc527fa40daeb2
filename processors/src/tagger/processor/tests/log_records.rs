//! Log records of every format, joined, completed and written.

use super::*;

#[test]
fn controller_runtime_json_lines_become_tagged_reconcile_records() {
    let rayjob = [
        (CONTROLLER, "rayjob"),
        (OBJECT_GROUP, "ray.io"),
        (OBJECT_KIND, "RayJob"),
        (OBJECT_NAMESPACE, "ml"),
        (OBJECT_NAME, "train"),
        (OPSCOPE_RECORD, RECORD_RECONCILE),
    ];
    let cases: [(usize, &str, &str); 4] = [
        (1, "a0c1f2e3-4b5c-4d6e-8f70-8192a3b4c5d6", "error"),
        (3, "7d2b9e41-0f3a-4c8d-9b6e-2a5f8c1d3e70", "requeue_after"),
        (4, "c3e8a1f0-5b7d-4e29-a6c4-91d0f2b8e357", "ok"),
        (9, "c3e8a1f0-5b7d-4e29-a6c4-91d0f2b8e357", "requeue"),
    ];
    for (index, reconcile_id, result) in cases {
        let record = tagged_line(line(JSON_LOG, index));
        let attributes = &record.attributes;
        assert_strings(attributes, &rayjob);
        assert_strings(
            attributes,
            &[(RECONCILE_ID, reconcile_id), (RECONCILE_RESULT, result)],
        );
    }
    let requeued = tagged_line(line(JSON_LOG, 3));
    assert_eq!(
        get_f64(&requeued.attributes, RECONCILE_REQUEUE_AFTER),
        Some(90.0)
    );
    let failed = tagged_line(line(JSON_LOG, 1));
    assert_eq!(
        get_str(&failed.attributes, RECONCILE_ERROR),
        Some(RAYJOB_CONFLICT)
    );

    // A record within a reconcile that does not end it: no outcome, no reconcile record.
    let progress = tagged_line(line(JSON_LOG, 2));
    assert_strings(
        &progress.attributes,
        &[(RECONCILE_ID, "7d2b9e41-0f3a-4c8d-9b6e-2a5f8c1d3e70")],
    );
    assert_strings(&progress.attributes, RAYJOB_TRAIN);
    assert_unset(&progress.attributes, &[RECONCILE_RESULT]);
    // Its `reconciling RayJob` start stands for the reconcile, also after end lines of
    // other reconciles: the reconcile id makes the start and the end one reconcile.
    assert_strings(&progress.attributes, &[(OPSCOPE_RECORD, RECORD_RECONCILE)]);
    let ended_first = format!("{}\n{}", line(JSON_LOG, 4), line(JSON_LOG, 2));
    let records = tagged_lines(&ended_first);
    assert_unset(&records[1].attributes, &[RECONCILE_RESULT]);
    assert_strings(
        &records[1].attributes,
        &[(OPSCOPE_RECORD, RECORD_RECONCILE)],
    );
}

#[test]
fn controller_runtime_console_lines_become_tagged_reconcile_records() {
    let failed = tagged_line(line(CONSOLE_LOG, 2));
    assert_strings(
        &failed.attributes,
        &[
            (RECONCILE_ID, "a0c1f2e3-4b5c-4d6e-8f70-8192a3b4c5d6"),
            (CONTROLLER, "rayjob"),
            (OBJECT_GROUP, "ray.io"),
            (RECONCILE_RESULT, "error"),
            (RECONCILE_ERROR, RAYJOB_CONFLICT),
            (OPSCOPE_RECORD, RECORD_RECONCILE),
        ],
    );
    assert_strings(&failed.attributes, RAYJOB_TRAIN);

    let epoch = tagged_line(line(CONSOLE_LOG, 9));
    assert_strings(
        &epoch.attributes,
        &[
            (CONTROLLER, "gitrepository"),
            (OBJECT_GROUP, "scm.example.com"),
            (OBJECT_KIND, "GitRepository"),
            (OBJECT_NAMESPACE, "platform"),
            (OBJECT_NAME, "billing-api"),
            (RECONCILE_RESULT, "error"),
        ],
    );

    let requeued = tagged_line(line(CONSOLE_LOG, 14));
    assert_strings(&requeued.attributes, &[(RECONCILE_RESULT, "requeue_after")]);
    assert_eq!(
        get_f64(&requeued.attributes, RECONCILE_REQUEUE_AFTER),
        Some(0.5)
    );

    let coloured = tagged_line(line(CONSOLE_LOG, 18));
    assert_strings(
        &coloured.attributes,
        &[
            (RECONCILE_ID, "c3e8a1f0-5b7d-4e29-a6c4-91d0f2b8e357"),
            (RECONCILE_RESULT, "ok"),
        ],
    );
    assert_strings(&coloured.attributes, RAYJOB_TRAIN);
}

#[test]
fn older_controller_runtime_keys_name_the_object() {
    let reconciler_keys = tagged_line(line(JSON_LOG, 6));
    assert_strings(
        &reconciler_keys.attributes,
        &[
            (CONTROLLER, "raycluster"),
            (OBJECT_GROUP, "ray.io"),
            (OBJECT_KIND, "RayCluster"),
            (OBJECT_NAMESPACE, "ml"),
            (OBJECT_NAME, "head"),
            (RECONCILE_RESULT, "ok"),
        ],
    );
    let request_key = tagged_line(line(JSON_LOG, 7));
    assert_strings(
        &request_key.attributes,
        &[
            (CONTROLLER, "elasticsearch-controller"),
            (OBJECT_NAMESPACE, "prod"),
            (OBJECT_NAME, "logs"),
            (RECONCILE_RESULT, "error"),
        ],
    );
    let plain_object_key = tagged_line(line(JSON_LOG, 5));
    assert_strings(
        &plain_object_key.attributes,
        &[
            (CONTROLLER, "cert-rotator"),
            (OBJECT_NAMESPACE, "system"),
            (OBJECT_NAME, "webhook-server-cert"),
        ],
    );
}

#[test]
fn a_409_in_a_log_error_field_is_a_conflict_on_the_named_object() {
    let rayjob = tagged_line(line(JSON_LOG, 1));
    assert_strings(
        &rayjob.attributes,
        &[
            (API_VERB, "update"),
            (API_GROUP, "ray.io"),
            (API_RESOURCE, "rayjobs"),
            (API_NAMESPACE, "ml"),
            (API_NAME, "train"),
        ],
    );
    assert_eq!(
        get_i64(&rayjob.attributes, HTTP_RESPONSE_STATUS_CODE),
        Some(409)
    );
    // The old `request` key gives the namespace the 409 message leaves out.
    let elasticsearch = tagged_line(line(JSON_LOG, 7));
    assert_strings(
        &elasticsearch.attributes,
        &[
            (API_GROUP, "elasticsearch.k8s.elastic.co"),
            (API_RESOURCE, "elasticsearches"),
            (API_NAMESPACE, "prod"),
            (API_NAME, "logs"),
        ],
    );
    let forbidden = tagged_line(line(JSON_LOG, 8));
    assert_unset(
        &forbidden.attributes,
        &[HTTP_RESPONSE_STATUS_CODE, API_VERB],
    );
}

#[test]
fn severity_and_time_are_filled_only_where_missing() {
    let rfc3339 = tagged_line(line(JSON_LOG, 1));
    assert_eq!(rfc3339.time_unix_nano, T0 + 1_456 * MS);
    assert_eq!(
        (rfc3339.severity_number, rfc3339.severity_text.as_str()),
        (17, "ERROR")
    );

    let epoch = tagged_line(line(JSON_LOG, 3));
    assert!(
        epoch.time_unix_nano.abs_diff(T0 + 2_001_234_000) < 1_000,
        "{}",
        epoch.time_unix_nano
    );
    assert_eq!(
        (epoch.severity_number, epoch.severity_text.as_str()),
        (1, "TRACE")
    );

    let console = tagged_line(line(CONSOLE_LOG, 1));
    assert_eq!(console.time_unix_nano, T0 + 456 * MS);
    assert_eq!(console.severity_number, 9);

    let request = tagged_logs(logs(
        KUBERAY_POD,
        [log(line(JSON_LOG, 1)).time(T0).severity(13, "WARN")],
    ));
    let preset = all_records(&request)[0];
    assert_eq!(preset.time_unix_nano, T0);
    assert_eq!(
        (preset.severity_number, preset.severity_text.as_str()),
        (13, "WARN")
    );
}

#[test]
fn structured_records_of_an_otel_log_bridge_are_read_from_their_attributes() {
    let request = tagged_logs(from_json(BRIDGE_LOGS));
    let [reconciling, failed, requeued] = all_records(&request)[..] else {
        unreachable!()
    };
    let first_reconcile = [
        (RECONCILE_ID, "1f6e8a52-3c4d-4b7e-9a0f-5d2c8b1e7a36"),
        (CONTROLLER, "rayjob"),
        (OBJECT_GROUP, "ray.io"),
    ];
    assert_strings(&reconciling.attributes, &first_reconcile);
    assert_strings(&reconciling.attributes, RAYJOB_TRAIN);
    assert_unset(&reconciling.attributes, &[RECONCILE_RESULT]);
    assert_strings(&failed.attributes, &first_reconcile);
    assert_strings(
        &failed.attributes,
        &[
            (RECONCILE_RESULT, "error"),
            (OPSCOPE_RECORD, RECORD_RECONCILE),
            (API_RESOURCE, "rayjobs"),
            (API_NAMESPACE, "ml"),
        ],
    );
    assert_eq!(
        get_i64(&failed.attributes, HTTP_RESPONSE_STATUS_CODE),
        Some(409)
    );
    assert_strings(&requeued.attributes, &[(RECONCILE_RESULT, "requeue_after")]);
    assert_eq!(
        get_f64(&requeued.attributes, RECONCILE_REQUEUE_AFTER),
        Some(30.0)
    );
}

#[test]
fn an_error_line_and_its_stack_trace_become_one_record() {
    let records = tagged_lines(CONSOLE_LOG);
    let stack_lines = 6 + 4 + 2;
    assert_eq!(records.len(), CONSOLE_LOG.lines().count() - stack_lines);
    let joined = body_of(&records[2]);
    let expected: Vec<&str> = CONSOLE_LOG.lines().skip(2).take(7).collect();
    assert_eq!(joined, expected.join("\n"));
    assert!(joined.contains("controller.go:329"));
    assert_strings(
        &records[2].attributes,
        &[
            (RECONCILE_ID, "a0c1f2e3-4b5c-4d6e-8f70-8192a3b4c5d6"),
            (RECONCILE_RESULT, "error"),
        ],
    );
    assert!(body_of(&records[3]).starts_with(line(CONSOLE_LOG, 9)));
    assert_eq!(body_of(&records[3]).lines().count(), 5);
    assert_eq!(
        body_of(&records[4]),
        line(CONSOLE_LOG, 14),
        "not a stack line"
    );
}

#[test]
fn stack_trace_lines_after_a_record_that_is_no_error_stay_records_of_their_own() {
    let text = [
        "\t/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.17.2/pkg/manager/internal.go:201",
        "2024-05-01T12:00:00.456Z\tINFO\tStarting workers\t{\"controller\": \"rayjob\"}",
        "sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).Start.func2",
        "\t/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.17.2/pkg/internal/controller/controller.go:223",
    ]
    .join("\n");
    assert_eq!(tagged_lines(&text).len(), 4);
}

#[test]
fn a_joined_stack_trace_stops_growing_at_its_size_cap() {
    let frame = "\t/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.17.2/pkg/internal/controller/controller.go:329";
    let text = std::iter::once(line(CONSOLE_LOG, 2))
        .chain(std::iter::repeat_n(frame, 2_000))
        .collect::<Vec<_>>()
        .join("\n");
    let records = tagged_lines(&text);
    let body = body_of(&records[0]);
    assert!(body.len() <= 64 * 1024, "{}", body.len());
    assert!(body.lines().count() > 100);
}

#[test]
fn a_record_naming_an_object_in_part_takes_the_rest_from_records_that_named_it_whole() {
    // https://github.com/water-hole/ansible-operator/issues/72: the runner's lines name
    // the object without its Kind, the event handler's lines with it.
    let records = tagged_lines(concat!(
        r#"{"level":"info","ts":1545402668.8160658,"logger":"logging_event_handler","msg":"[playbook task]","name":"example-kubevirtssp","namespace":"myproject","gvk":"kubevirt.io/v1, Kind=KubevirtSsp"}"#,
        "\n",
        r#"{"level":"info","ts":1545402690.185443,"logger":"runner","msg":"ansible-runner exited successfully","job":"8954784443427127217","name":"example-kubevirtssp","namespace":"myproject"}"#,
        "\n",
        // https://github.com/cert-manager/cert-manager/issues/3897: a Kind and a name,
        // the namespace from the key of an earlier line.
        r#"I0614 08:25:43.590908       1 trigger_controller.go:189] cert-manager/controller/certificates-trigger "msg"="Certificate must be re-issued" "key"="default/example-com""#,
        "\n",
        r#"I0614 08:25:43.590927       1 conditions.go:182] Setting lastTransitionTime for Certificate "example-com" condition "Issuing" to 2021-06-14 08:25:43.590925279 +0000 UTC m=+87.539633361"#,
    ));
    assert_eq!(
        object_of(&records[1]),
        ["KubevirtSsp", "myproject", "example-kubevirtssp"]
    );
    assert_eq!(
        object_of(&records[2]),
        ["certificate", "default", "example-com"]
    );
    assert_eq!(
        object_of(&records[3]),
        ["Certificate", "default", "example-com"]
    );
}

#[test]
fn records_of_one_batch_complete_an_object_named_in_part_before_it_was_named_whole() {
    // The ODA Canvas component operator (kopf) names a Deployment without its namespace
    // before kopf's own line names it with one.
    // https://github.com/tmforum-oda/oda-canvas/blob/33a882b6ae900ead0aaea7c1bb743845f4e7543f/TEMP/analysis/compop.log
    let records = tagged_lines(concat!(
        "[2024-05-06 17:48:05,990] ComponentOperator    [INFO    ] [prodcat-productcatalogmanagement|deployment/prodcat-prodcatapi|adopt_deployment|adopt_deployment] Handler called: \n",
        "[2024-05-06 17:48:06,031] kopf.objects         [ERROR   ] [components/prodcat-prodcatapi] Handler 'adopt_deployment' failed temporarily: Conflict updating deployment.",
    ));
    for record in &records {
        assert_eq!(get_str(&record.attributes, OBJECT_KIND), Some("deployment"));
        assert_eq!(
            get_str(&record.attributes, OBJECT_NAMESPACE),
            Some("components")
        );
        assert_eq!(
            get_str(&record.attributes, OBJECT_NAME),
            Some("prodcat-prodcatapi")
        );
    }
}

#[test]
fn a_java_exception_joins_its_error_line_and_its_409_is_the_records() {
    // https://github.com/operator-framework/java-operator-sdk/issues/1198
    let records = tagged_lines(concat!(
        "2022-05-06 03:06:04,960 i.j.o.p.e.ReconciliationDispatcher [ERROR Error during error status handling.\n",
        "io.fabric8.kubernetes.client.KubernetesClientException: Failure executing: PUT at: https://address/apis/flink.apache.org/v1beta1/namespaces/myns/flinkdeployments/flink-job/status. Message: Operation cannot be fulfilled on flinkdeployments.flink.apache.org \"flink-job\": the object has been modified; please apply your changes to the latest version and try again.\n",
        "        at io.fabric8.kubernetes.client.dsl.base.OperationSupport.requestFailure(OperationSupport.java:682)",
    ));
    assert_eq!(records.len(), 1, "{records:#?}");
    let attributes = &records[0].attributes;
    assert_eq!(get_str(attributes, API_NAMESPACE), Some("myns"));
    assert_eq!(get_str(attributes, API_NAME), Some("flink-job"));
    assert_eq!(get_i64(attributes, HTTP_RESPONSE_STATUS_CODE), Some(409));
}

#[test]
fn a_line_naming_no_object_is_about_the_object_its_logger_just_reconciled() {
    // https://github.com/sieve-project/sieve/blob/de56051b5bc9b10ea563cccd836098f115d2253c/log_for_learning/nifikop-operator/recreate/learn/learn-once/learn.yaml/operator.log
    let records = tagged_lines(concat!(
        "2022-03-20T03:22:25.485Z\tDEBUG\tcontrollers.NifiCluster\tReconciled\t{\"component\": \"nifi\", \"clusterName\": \"simplenifi\", \"clusterNamespace\": \"default\"}\n",
        "2022-03-20T03:22:25.485Z\tINFO\tcontrollers.NifiCluster\tensuring finalizers on nificluster\n",
        "2022-03-20T03:22:25.487Z\tDEBUG\tcontrollers.NifiClusterTask\tReconciling\n",
        "2022-03-20T03:22:25.503Z\tINFO\tcontrollers.NifiCluster\tCR status updated\t{\"status\": \"ClusterRunning\"}",
    ));
    assert_eq!(
        object_of(&records[0]),
        ["NifiCluster", "default", "simplenifi"]
    );
    assert_eq!(
        object_of(&records[1]),
        ["NifiCluster", "default", "simplenifi"]
    );
    // Another logger's line stays unattributed.
    assert_eq!(object_of(&records[2]), ["", "", ""]);
    // The status write the last line tells of is the object's.
    assert_eq!(
        object_of(&records[3]),
        ["NifiCluster", "default", "simplenifi"]
    );
    assert_eq!(
        get_str(&records[3].attributes, API_SUBRESOURCE),
        Some("status")
    );
    assert_eq!(
        get_i64(&records[3].attributes, HTTP_RESPONSE_STATUS_CODE),
        Some(200)
    );
}
