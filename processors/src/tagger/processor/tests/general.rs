//! What holds of every batch: untouched records, the trace map's bounds, tagging twice, the config.

use super::*;

#[test]
fn records_with_nothing_recognisable_pass_unchanged() {
    let spans = traces(
        CONTROL_PLANE,
        [
            span("HTTP GET /healthz")
                .ids(3, 1)
                .attr(HTTP_REQUEST_METHOD, "GET")
                .attr(URL_PATH, "/healthz"),
            span("compute checksum")
                .ids(3, 2)
                .parent(1)
                .failed("checksum mismatch"),
        ],
    );
    assert_eq!(tagged_traces(spans.clone()), spans);
    let unformatted = PLAIN_LOG
        .lines()
        .map(|text| log(text).time(T0).severity(9, "INFO"));
    let records = logs(CONTROL_PLANE, unformatted);
    assert_eq!(tagged_logs(records.clone()), records);
}

#[test]
fn a_line_naming_no_reconcile_gets_only_its_missing_time_and_severity() {
    let record = tagged_line(line(CONSOLE_LOG, 0));
    assert!(record.attributes.is_empty(), "{:?}", record.attributes);
    assert_eq!(
        (record.time_unix_nano, record.severity_number),
        (T0 + 123 * MS, 9)
    );
}

#[test]
fn the_trace_map_forgets_the_oldest_trace_beyond_max_traces() {
    let mut tagger = OperatorTagger::new(&TaggerConfig {
        max_traces: 2,
        ..TaggerConfig::default()
    });
    for trace in 1..=3 {
        tagger.tag_traces(&mut traces(
            KUBERAY_POD,
            [rayjob_reconcile().ids(trace, trace)],
        ));
    }
    let mut request = logs(
        KUBERAY_POD,
        (1..=3).map(|trace| log("creating head pod").trace(trace)),
    );
    tagger.tag_logs(&mut request);
    let ids: Vec<Option<&str>> = all_records(&request)
        .iter()
        .map(|record| get_str(&record.attributes, RECONCILE_ID))
        .collect();
    assert_eq!(
        ids,
        [None, Some("0202020202020202"), Some("0303030303030303")]
    );
}

#[test]
fn the_trace_map_forgets_reconciles_older_than_the_ttl_in_event_time() {
    let mut tagger = OperatorTagger::new(&TaggerConfig {
        trace_ttl: Duration::from_secs(60),
        ..TaggerConfig::default()
    });
    let at = |seconds: u64| T0 + seconds * 1_000 * MS;
    tagger.tag_traces(&mut traces(
        KUBERAY_POD,
        [rayjob_reconcile().ids(1, 1).times(at(0), at(1))],
    ));
    tagger.tag_traces(&mut traces(
        KUBERAY_POD,
        [rayjob_reconcile().ids(2, 2).times(at(30), at(31))],
    ));
    let mut recent = logs(KUBERAY_POD, [log("creating head pod").trace(1)]);
    tagger.tag_logs(&mut recent);
    assert_strings(
        &all_records(&recent)[0].attributes,
        &[(RECONCILE_ID, ROOT_1)],
    );

    tagger.tag_traces(&mut traces(
        KUBERAY_POD,
        [rayjob_reconcile().ids(3, 3).times(at(61), at(62))],
    ));
    let mut late = logs(
        KUBERAY_POD,
        [
            log("creating head pod").trace(1),
            log("creating head pod").trace(2),
        ],
    );
    tagger.tag_logs(&mut late);
    let [expired, kept] = all_records(&late)[..] else {
        unreachable!()
    };
    assert!(expired.attributes.is_empty());
    assert_strings(&kept.attributes, &[(RECONCILE_ID, "0202020202020202")]);
}

#[test]
fn tagging_tagged_data_again_changes_nothing() {
    // A downstream opscope (a gateway, `opscope analyze` of a file exporter's output)
    // tags what an upstream one tagged.
    for fixture in [SPANS_409, KUBE_RS_TRACE] {
        let once = tagged_traces(from_json(fixture));
        assert_eq!(tagged_traces(once.clone()), once);
    }
    let log_batches = [
        log_lines(KUBERAY_POD, CONSOLE_LOG),
        log_lines(KUBERAY_POD, JSON_LOG),
        log_lines(CONTROL_PLANE, DELETES),
        logs(CONTROL_PLANE, [log(EVENT_LIST)]),
        from_json(BRIDGE_LOGS),
    ];
    for batch in log_batches {
        let once = tagged_logs(batch);
        assert_eq!(tagged_logs(once.clone()), once);
    }
}

#[test]
fn configuration_is_validated() {
    let zero = TaggerConfig {
        max_traces: 0,
        ..TaggerConfig::default()
    };
    assert_eq!(zero.validate().unwrap_err().field, "max_traces");
    let unnamed = TaggerConfig {
        operators: vec![OperatorMapping {
            namespace: "*".into(),
            pod: "*".into(),
            operator: " ".into(),
        }],
        ..TaggerConfig::default()
    };
    assert_eq!(
        unnamed.validate().unwrap_err().field,
        "operators[0].operator"
    );
    assert!(TaggerConfig::default().validate().is_ok());
}

#[test]
fn a_json_object_cut_across_lines_is_one_record() {
    // Pretty-printed, as flux source-controller #758 pastes it, then hard-wrapped
    // inside a value, then a line left open that never closes.
    let text = "{\n  \"level\": \"info\",\n  \"ts\": \"2022-06-03T11:28:35.541Z\",\n  \"msg\": \"Reconciliation finished\",\n  \"reconciler kind\": \"GitRepository\",\n  \"name\": \"msdemo\",\n  \"namespace\": \"msdemo\"\n}\n2024-09-06T14:53:43Z\tDEBUG\tprovider-aws\tReconciling\t{\"controller\": \"managed/networkacl\", \"request\": {\"name\":\"rg-network\n-k2rbw\"}}\n{\"level\":\"info\",\"ts\":\nStarting manager";
    let records = tagged_lines(text);
    assert_eq!(records.len(), 4, "{records:#?}");
    assert_strings(
        &records[0].attributes,
        &[
            (OBJECT_KIND, "GitRepository"),
            (OBJECT_NAMESPACE, "msdemo"),
            (OBJECT_NAME, "msdemo"),
        ],
    );
    assert_strings(&records[1].attributes, &[(OBJECT_NAME, "rg-network-k2rbw")]);
    assert_eq!(body_text(&records[2]), Some("{\"level\":\"info\",\"ts\":"));
    assert_eq!(body_text(&records[3]), Some("Starting manager"));
}

#[test]
fn zone_less_times_are_utc_unless_a_default_timezone_is_set() {
    // Strimzi's log4j layout writes no zone (strimzi-operator #4471).
    let text = "2021-02-26 06:43:06 INFO  AbstractOperator:318 - Reconciliation #4854(timer) Kafka(default/tom-kafka): reconciled";
    let utc = tagged_line(text);
    assert_eq!(utc.time_unix_nano, 1_614_321_786_000_000_000);
    let config = TaggerConfig {
        default_timezone: Some("+02:00".into()),
        ..TaggerConfig::default()
    };
    let mut request = log_lines(KUBERAY_POD, text);
    OperatorTagger::new(&config).tag_logs(&mut request);
    let shifted = all_records(&request)[0].time_unix_nano;
    assert_eq!(shifted, 1_614_321_786_000_000_000 - 7_200_000_000_000);
    // A time that states its zone keeps it.
    let mut zoned = log_lines(
        KUBERAY_POD,
        r#"{"level":"info","ts":"2024-05-01T12:00:00Z","msg":"Reconcile successful"}"#,
    );
    OperatorTagger::new(&config).tag_logs(&mut zoned);
    assert_eq!(
        all_records(&zoned)[0].time_unix_nano,
        1_714_564_800_000_000_000
    );
    let bad = TaggerConfig {
        default_timezone: Some("Mars/Olympus".into()),
        ..TaggerConfig::default()
    };
    assert_eq!(bad.validate().unwrap_err().field, "default_timezone");
}

#[test]
fn a_reconcile_seen_as_a_span_and_as_log_lines_is_one_reconcile() {
    use crate::CorrelatorEvents;
    use crate::correlator::events::{Event, ObjectEventKind};
    let mut tagger = tagger();
    // The span states the id controller-runtime logs as `reconcileID`; the OTLP log
    // record carries the span's trace; the container log line carries only the id.
    let mut spans = traces(
        KUBERAY_POD,
        [rayjob_reconcile().ids(1, 1).attr("reconcileID", "a0c1f2e3")],
    );
    tagger.tag_traces(&mut spans);
    let mut otlp_logs = logs(KUBERAY_POD, [log("Reconcile successful").trace(1)]);
    tagger.tag_logs(&mut otlp_logs);
    let line = r#"{"level":"info","ts":1714564800.5,"msg":"Reconcile successful","controller":"rayjob","controllerGroup":"ray.io","controllerKind":"RayJob","RayJob":{"name":"train","namespace":"ml"},"reconcileID":"a0c1f2e3"}"#;
    let mut file_logs = log_lines(KUBERAY_POD, line);
    tagger.tag_logs(&mut file_logs);
    let mut events = Vec::new();
    spans.correlator_events(&mut events);
    otlp_logs.correlator_events(&mut events);
    file_logs.correlator_events(&mut events);
    let reconciles: Vec<(String, String)> = events
        .iter()
        .filter_map(|event| match event {
            Event::Object(event) => match &event.kind {
                ObjectEventKind::Reconcile(reconcile) => Some((
                    format!("{:?}", event.object.key()),
                    reconcile.reconcile_id.clone(),
                )),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert!(reconciles.len() >= 2, "{reconciles:?}");
    // One object, one id: the correlator counts the reconcile once.
    assert!(
        reconciles.windows(2).all(|pair| pair[0] == pair[1]),
        "{reconciles:?}"
    );
}
