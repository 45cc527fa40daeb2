//! Tests of the `operator_tagger` processor on realistic batches: requests built in
//! code with the builders of [`otlp`], and the fixture files of real output shapes.

use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::metrics::v1::ResourceMetrics;

use super::logs::body_text;
use super::*;
use crate::attributes::{get_bool, get_f64, get_i64, get_strings};
use crate::timestamp::parse_rfc3339;
use otlp::*;

/// OTLP requests built in code, readable in a test (also used by the correlator's
/// extraction tests).
pub(crate) mod otlp {
    use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
    use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opscope_proto::otlp::resource::v1::Resource;
    use opscope_proto::otlp::trace::v1::span::Event;
    use opscope_proto::otlp::trace::v1::status::StatusCode;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

    use crate::attributes::{get_str, set, set_str};

    /// 2024-05-01T12:00:00Z, the time of the fixtures.
    pub(crate) const T0: u64 = 1_714_564_800_000_000_000;
    pub(crate) const MS: u64 = 1_000_000;

    /// Trace `n`: sixteen bytes `n`.
    pub(crate) fn trace_id(n: u8) -> Vec<u8> {
        vec![n; 16]
    }

    /// Span `n`: eight bytes `n`, in hex `0n0n0n0n0n0n0n0n`.
    pub(crate) fn span_id(n: u8) -> Vec<u8> {
        vec![n; 8]
    }

    pub(crate) fn attributes(pairs: &[(&str, &str)]) -> Vec<KeyValue> {
        let mut attributes = Vec::new();
        for (key, value) in pairs {
            set_str(&mut attributes, key, value);
        }
        attributes
    }

    fn resource(pairs: &[(&str, &str)]) -> Option<Resource> {
        Some(Resource {
            attributes: attributes(pairs),
            ..Default::default()
        })
    }

    fn text(value: &str) -> Option<AnyValue> {
        Some(AnyValue {
            value: Some(Value::StringValue(value.to_string())),
        })
    }

    /// A span under construction, 10 ms long from [`T0`].
    pub(crate) struct SpanBuilder(Span);

    pub(crate) fn span(name: &str) -> SpanBuilder {
        SpanBuilder(Span {
            name: name.to_string(),
            start_time_unix_nano: T0,
            end_time_unix_nano: T0 + 10 * MS,
            ..Default::default()
        })
    }

    impl SpanBuilder {
        /// Span `id` of trace `trace`.
        pub(crate) fn ids(mut self, trace: u8, id: u8) -> Self {
            self.0.trace_id = trace_id(trace);
            self.0.span_id = span_id(id);
            self
        }

        pub(crate) fn parent(mut self, id: u8) -> Self {
            self.0.parent_span_id = span_id(id);
            self
        }

        pub(crate) fn attr(mut self, key: &str, value: &str) -> Self {
            set_str(&mut self.0.attributes, key, value);
            self
        }

        pub(crate) fn value(mut self, key: &str, value: Value) -> Self {
            set(&mut self.0.attributes, key, value);
            self
        }

        pub(crate) fn attrs(self, pairs: &[(&str, &str)]) -> Self {
            pairs
                .iter()
                .fold(self, |span, (key, value)| span.attr(key, value))
        }

        pub(crate) fn times(mut self, start: u64, end: u64) -> Self {
            self.0.start_time_unix_nano = start;
            self.0.end_time_unix_nano = end;
            self
        }

        /// Ended with status `Error` and `message`.
        pub(crate) fn failed(mut self, message: &str) -> Self {
            self.0.status = Some(Status {
                code: StatusCode::Error as i32,
                message: message.to_string(),
            });
            self
        }

        /// Recorded an error (`span.RecordError`): an `exception` event.
        pub(crate) fn exception(mut self, message: &str) -> Self {
            self.0.events.push(Event {
                name: "exception".into(),
                time_unix_nano: self.0.end_time_unix_nano,
                attributes: attributes(&[
                    ("exception.type", "*errors.StatusError"),
                    ("exception.message", message),
                ]),
                ..Default::default()
            });
            self
        }
    }

    /// A log record under construction.
    pub(crate) struct LogBuilder(LogRecord);

    /// When test records were observed, unless a test says otherwise: a record with
    /// no time at all yields no events.
    pub(crate) const OBSERVED: u64 = 1_714_564_799_000_000_000;

    pub(crate) fn log(body: &str) -> LogBuilder {
        LogBuilder(LogRecord {
            body: text(body),
            observed_time_unix_nano: OBSERVED,
            ..Default::default()
        })
    }

    impl LogBuilder {
        pub(crate) fn trace(mut self, trace: u8) -> Self {
            self.0.trace_id = trace_id(trace);
            self
        }

        /// A trace id of any length, as a malformed record may carry.
        pub(crate) fn trace_bytes(mut self, trace: &[u8]) -> Self {
            self.0.trace_id = trace.to_vec();
            self
        }

        pub(crate) fn attr(mut self, key: &str, value: &str) -> Self {
            set_str(&mut self.0.attributes, key, value);
            self
        }

        pub(crate) fn value(mut self, key: &str, value: Value) -> Self {
            set(&mut self.0.attributes, key, value);
            self
        }

        pub(crate) fn attrs(self, pairs: &[(&str, &str)]) -> Self {
            pairs
                .iter()
                .fold(self, |record, (key, value)| record.attr(key, value))
        }

        pub(crate) fn time(mut self, time: u64) -> Self {
            self.0.time_unix_nano = time;
            self
        }

        pub(crate) fn observed(mut self, time: u64) -> Self {
            self.0.observed_time_unix_nano = time;
            self
        }

        pub(crate) fn severity(mut self, number: i32, text: &str) -> Self {
            self.0.severity_number = number;
            self.0.severity_text = text.to_string();
            self
        }
    }

    pub(crate) fn traces(
        resource_attributes: &[(&str, &str)],
        spans: impl IntoIterator<Item = SpanBuilder>,
    ) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: resource(resource_attributes),
                scope_spans: vec![ScopeSpans {
                    spans: spans.into_iter().map(|s| s.0).collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    pub(crate) fn logs(
        resource_attributes: &[(&str, &str)],
        records: impl IntoIterator<Item = LogBuilder>,
    ) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: resource(resource_attributes),
                scope_logs: vec![ScopeLogs {
                    log_records: records.into_iter().map(|r| r.0).collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// One record per line of `text`, as a file or container-log receiver sends them.
    pub(crate) fn log_lines(
        resource_attributes: &[(&str, &str)],
        text: &str,
    ) -> ExportLogsServiceRequest {
        logs(resource_attributes, text.lines().map(log))
    }

    pub(crate) fn from_json<T: serde::de::DeserializeOwned>(json: &str) -> T {
        serde_json::from_str(json).expect("a valid OTLP/JSON fixture")
    }

    pub(crate) fn all_spans(request: &ExportTraceServiceRequest) -> Vec<&Span> {
        request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .collect()
    }

    pub(crate) fn span_named<'a>(request: &'a ExportTraceServiceRequest, name: &str) -> &'a Span {
        all_spans(request)
            .into_iter()
            .find(|span| span.name == name)
            .unwrap_or_else(|| panic!("no span {name:?}"))
    }

    pub(crate) fn all_records(request: &ExportLogsServiceRequest) -> Vec<&LogRecord> {
        request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .flat_map(|s| &s.log_records)
            .collect()
    }

    pub(crate) fn body_of(record: &LogRecord) -> &str {
        match record.body.as_ref().and_then(|b| b.value.as_ref()) {
            Some(Value::StringValue(body)) => body,
            other => panic!("no text body: {other:?}"),
        }
    }

    /// Asserts that each key has the string value given.
    #[track_caller]
    pub(crate) fn assert_strings(attributes: &[KeyValue], expected: &[(&str, &str)]) {
        for (key, value) in expected {
            assert_eq!(
                get_str(attributes, key),
                Some(*value),
                "{key} in {attributes:#?}"
            );
        }
    }

    /// Asserts that none of the keys is set.
    #[track_caller]
    pub(crate) fn assert_unset(attributes: &[KeyValue], keys: &[&str]) {
        for key in keys {
            assert!(
                !attributes.iter().any(|kv| kv.key == *key),
                "{key} is set in {attributes:#?}"
            );
        }
    }
}

const SPANS_409: &str =
    include_str!("../../../tests/fixtures/spans/otelhttp_client_status_patch_409.json");
const SPANS_OLD_CONVENTIONS: &str =
    include_str!("../../../tests/fixtures/spans/otelhttp_client_old_conventions.json");
const SPANS_APISERVER: &str =
    include_str!("../../../tests/fixtures/spans/kube_apiserver_handlers.json");
const KUBE_RS_TRACE: &str =
    include_str!("../../../tests/fixtures/otlp/kube_rs_reconcile_trace.json");
const BRIDGE_LOGS: &str =
    include_str!("../../../tests/fixtures/otlp/controller_runtime_otel_bridge_logs.json");
const JSON_LOG: &str = include_str!("../../../tests/fixtures/logs/controller_runtime_json.log");
const CONSOLE_LOG: &str =
    include_str!("../../../tests/fixtures/logs/controller_runtime_console.log");
const PLAIN_LOG: &str = include_str!("../../../tests/fixtures/logs/plain.log");
const EVENT_LIST: &str = include_str!("../../../tests/fixtures/audit/event_list.json");
const STATUS_UPDATES: &str =
    include_str!("../../../tests/fixtures/audit/status_update_request_response.jsonl");
const DELETES: &str = include_str!("../../../tests/fixtures/audit/delete_with_finalizers.jsonl");
const CONFLICTS: &str = include_str!("../../../tests/fixtures/audit/conflict_409.jsonl");

/// String attributes: keys and values.
type Pairs<'a> = &'a [(&'a str, &'a str)];

/// A KubeRay operator pod as the Kubernetes attributes processor describes it.
const KUBERAY_POD: &[(&str, &str)] = &[
    (K8S_NAMESPACE_NAME, "ray-system"),
    (K8S_POD_NAME, "kuberay-operator-6c9f7d8b9-x2x7q"),
    (K8S_CONTAINER_NAME, "manager"),
];
/// A control-plane node sending audit events: nothing names an operator.
const CONTROL_PLANE: &[(&str, &str)] = &[("host.name", "control-plane-1")];
const KUBERAY_ACCOUNT: &str = "system:serviceaccount:ray-system:kuberay-operator";
const RAYJOB_CONFLICT: &str = "Operation cannot be fulfilled on rayjobs.ray.io \"train\": \
     the object has been modified; please apply your changes to the latest version and try again";
/// The reconcile id of a root span `1`: its span id in hex.
const ROOT_1: &str = "0101010101010101";
/// The object attributes of a reconcile of the RayJob `ml/train`.
const RAYJOB_TRAIN: &[(&str, &str)] = &[
    (OBJECT_KIND, "RayJob"),
    (OBJECT_NAMESPACE, "ml"),
    (OBJECT_NAME, "train"),
];

fn tagger() -> OperatorTagger {
    OperatorTagger::new(&TaggerConfig::default())
}

fn tagged_traces(mut request: ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    tagger().tag_traces(&mut request);
    request
}

fn tagged_logs(mut request: ExportLogsServiceRequest) -> ExportLogsServiceRequest {
    tagger().tag_logs(&mut request);
    request
}

/// The records of `text` (one a line, from a KubeRay pod) after tagging.
fn tagged_lines(text: &str) -> Vec<LogRecord> {
    let request = tagged_logs(log_lines(KUBERAY_POD, text));
    all_records(&request).into_iter().cloned().collect()
}

#[track_caller]
fn tagged_line(text: &str) -> LogRecord {
    let mut records = tagged_lines(text);
    assert_eq!(records.len(), 1, "{records:#?}");
    records.remove(0)
}

/// Line `index` (from 0) of a fixture.
fn line(fixture: &str, index: usize) -> &str {
    fixture
        .lines()
        .nth(index)
        .expect("the fixture has the line")
}

/// A `reconcile` span of the RayJob `ml/train` with opscope's object attributes.
fn rayjob_reconcile() -> SpanBuilder {
    span("reconcile").attrs(RAYJOB_TRAIN)
}

/// A metrics request of a resource, without metrics: all the tagger looks at.
fn metrics_of(resource: Pairs) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: attributes(resource),
                ..Default::default()
            }),
            ..Default::default()
        }],
    }
}

fn operator_of(resource: Option<&Resource>) -> Option<&str> {
    get_str(&resource?.attributes, OPERATOR_NAME)
}

// Operators.

#[test]
fn operator_name_comes_from_the_first_rule_that_names_one() {
    let config = TaggerConfig {
        operators: vec![OperatorMapping {
            namespace: "ray-*".into(),
            pod: "kuberay-*".into(),
            operator: "kuberay".into(),
        }],
        ..TaggerConfig::default()
    };
    let mut tagger = OperatorTagger::new(&config);
    let kuberay_pod = (K8S_POD_NAME, "kuberay-operator-6c9f7d8b9-x2x7q");
    let cases: [(&str, Pairs, Option<&str>); 8] = [
        (
            "the producer's own operator.name",
            &[
                (OPERATOR_NAME, "explicit"),
                (K8S_NAMESPACE_NAME, "ray-system"),
                kuberay_pod,
            ],
            Some("explicit"),
        ),
        (
            "a mapping by namespace and pod glob, before service.name",
            &[
                (K8S_NAMESPACE_NAME, "ray-system"),
                kuberay_pod,
                (SERVICE_NAME, "manager"),
            ],
            Some("kuberay"),
        ),
        (
            "service.name when no mapping matches",
            &[
                (K8S_NAMESPACE_NAME, "default"),
                kuberay_pod,
                (SERVICE_NAME, "ray-operator"),
            ],
            Some("ray-operator"),
        ),
        (
            "the SDK's default service.name names nothing",
            &[
                (SERVICE_NAME, "unknown_service:manager"),
                (K8S_DEPLOYMENT_NAME, "cert-manager"),
            ],
            Some("cert-manager"),
        ),
        (
            "the Deployment of a ReplicaSet pod name",
            &[
                (K8S_NAMESPACE_NAME, "widget-system"),
                (K8S_POD_NAME, "widget-operator-5d6b8c9f7-q8w2z"),
                (K8S_CONTAINER_NAME, "manager"),
            ],
            Some("widget-operator"),
        ),
        (
            "the container of a pod no Deployment made",
            &[
                (K8S_POD_NAME, "etcd-operator-0"),
                (K8S_CONTAINER_NAME, "etcd-operator"),
            ],
            Some("etcd-operator"),
        ),
        (
            "nothing that names an operator",
            &[("host.name", "node-1")],
            None,
        ),
        ("no attributes at all", &[], None),
    ];
    for (rule, resource, expected) in cases {
        let mut request = metrics_of(resource);
        tagger.tag_metrics(&mut request);
        let tagged = request.resource_metrics[0].resource.as_ref();
        assert_eq!(operator_of(tagged), expected, "{rule}");
        let mut own_and_operator = attributes(resource);
        if let Some(operator) = expected {
            insert(&mut own_and_operator, OPERATOR_NAME, string_value(operator));
        }
        assert_eq!(tagged.unwrap().attributes, own_and_operator, "{rule}");
    }
}

#[test]
fn operator_name_is_written_on_the_resource_of_every_signal() {
    let mut tagger = tagger();
    let mut spans = traces(KUBERAY_POD, [span("reconcile").ids(1, 1)]);
    let mut records = logs(KUBERAY_POD, [log("starting manager")]);
    let mut metrics = metrics_of(KUBERAY_POD);
    tagger.tag_traces(&mut spans);
    tagger.tag_logs(&mut records);
    tagger.tag_metrics(&mut metrics);
    let resources = [
        spans.resource_spans[0].resource.as_ref(),
        records.resource_logs[0].resource.as_ref(),
        metrics.resource_metrics[0].resource.as_ref(),
    ];
    for resource in resources {
        assert_eq!(operator_of(resource), Some("kuberay-operator"));
    }
}

// Reconcile roots and their traces.

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

// API calls and conflicts.

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

// Log records.

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
    // Its `reconciling RayJob` start stands for the reconcile while the controller has
    // logged no end line; once it has, start lines count no more.
    assert_strings(&progress.attributes, &[(OPSCOPE_RECORD, RECORD_RECONCILE)]);
    let ended_first = format!("{}\n{}", line(JSON_LOG, 4), line(JSON_LOG, 2));
    let records = tagged_lines(&ended_first);
    assert_unset(&records[1].attributes, &[RECONCILE_RESULT, OPSCOPE_RECORD]);
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

// Audit events.

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

// Everything else.

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
    use crate::Telemetry;
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
    let object = |record: &LogRecord| {
        [OBJECT_KIND, OBJECT_NAMESPACE, OBJECT_NAME].map(|key| {
            get_str(&record.attributes, key)
                .unwrap_or_default()
                .to_string()
        })
    };
    assert_eq!(
        object(&records[1]),
        ["KubevirtSsp", "myproject", "example-kubevirtssp"]
    );
    assert_eq!(
        object(&records[2]),
        ["certificate", "default", "example-com"]
    );
    assert_eq!(
        object(&records[3]),
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
