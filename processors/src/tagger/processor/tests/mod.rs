//! Tests of the `operator_tagger` processor on realistic batches: requests built in
//! code with the builders of `crate::otlp_builders`, and the fixture files of real
//! output shapes.

use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::logs::v1::LogRecord;
use opscope_proto::otlp::metrics::v1::ResourceMetrics;

use super::logs::body_text;
use super::*;
use crate::otlp_builders::*;
use opscope_model::attributes::{get_bool, get_f64, get_i64, get_strings};
use opscope_model::semconv::*;
use opscope_model::timestamp::parse_rfc3339;

mod api_calls;
mod audit_events;
mod general;
mod log_records;
mod operators;
mod reconcile_roots;

const SPANS_409: &str =
    include_str!("../../../../tests/fixtures/spans/otelhttp_client_status_patch_409.json");
const SPANS_OLD_CONVENTIONS: &str =
    include_str!("../../../../tests/fixtures/spans/otelhttp_client_old_conventions.json");
const SPANS_APISERVER: &str =
    include_str!("../../../../tests/fixtures/spans/kube_apiserver_handlers.json");
const KUBE_RS_TRACE: &str =
    include_str!("../../../../tests/fixtures/otlp/kube_rs_reconcile_trace.json");
const BRIDGE_LOGS: &str =
    include_str!("../../../../tests/fixtures/otlp/controller_runtime_otel_bridge_logs.json");
const JSON_LOG: &str = include_str!("../../../../tests/fixtures/logs/controller_runtime_json.log");
const CONSOLE_LOG: &str =
    include_str!("../../../../tests/fixtures/logs/controller_runtime_console.log");
const PLAIN_LOG: &str = include_str!("../../../../tests/fixtures/logs/plain.log");
const EVENT_LIST: &str = include_str!("../../../../tests/fixtures/audit/event_list.json");
const STATUS_UPDATES: &str =
    include_str!("../../../../tests/fixtures/audit/status_update_request_response.jsonl");
const DELETES: &str = include_str!("../../../../tests/fixtures/audit/delete_with_finalizers.jsonl");
const CONFLICTS: &str = include_str!("../../../../tests/fixtures/audit/conflict_409.jsonl");

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

/// The Kind, namespace and name a tagged record names (empty where it names none).
fn object_of(record: &LogRecord) -> [String; 3] {
    [OBJECT_KIND, OBJECT_NAMESPACE, OBJECT_NAME].map(|key| {
        get_str(&record.attributes, key)
            .unwrap_or_default()
            .to_string()
    })
}
