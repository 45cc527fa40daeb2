//! controller-runtime's zap JSON lines about a reconcile, as OTLP log records of
//! the operator's container (the shape the filelog receiver produces).

use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use opscope_proto::otlp::logs::v1::LogRecord;
use opscope_proto::otlp::resource::v1::Resource;

use crate::attributes::text;
use crate::reconcile::{ObjectRef, OperatorPod};

pub(super) const CLEANUP_FAILURE: &str = "cleanup of external bucket failed: BucketNotEmpty: the bucket you tried to delete is not empty";

/// The API server's message for a conflicting update, naming the object as it does.
pub(super) fn conflict_message(object: &ObjectRef) -> String {
    format!(
        "Operation cannot be fulfilled on {}s.{} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
        object.controller, object.group, object.name
    )
}

/// The two lines of a reconcile: its start, and its end or its error.
pub(super) fn reconcile_lines(
    object: &ObjectRef,
    reconcile_id: &str,
    error: Option<&str>,
    now: u64,
) -> [(&'static str, String); 2] {
    let ts = format!(
        "{}.{:06}",
        now / 1_000_000_000,
        (now % 1_000_000_000) / 1_000
    );
    let line = |level: &str, msg: &str, error: Option<&str>| {
        let error = error.map_or(String::new(), |e| {
            format!(",\"error\":\"{}\"", json_escape(e))
        });
        format!(
            r#"{{"level":"{level}","ts":{ts},"logger":"controllers.{kind}","msg":"{msg}","controller":"{controller}","controllerGroup":"{group}","controllerKind":"{kind}","{kind}":{{"name":"{name}","namespace":"{namespace}"}},"namespace":"{namespace}","name":"{name}","reconcileID":"{reconcile_id}"{error}}}"#,
            kind = object.kind,
            controller = object.controller,
            group = object.group,
            name = object.name,
            namespace = object.namespace,
        )
    };
    let end = match error {
        Some(error) => ("error", line("error", "Reconciler error", Some(error))),
        None => ("info", line("info", "Reconcile done", None)),
    };
    [("info", line("info", "Reconciling", None)), end]
}

pub(super) fn record(
    (level, body): (&'static str, String),
    now: u64,
    attributes: &[KeyValue],
) -> LogRecord {
    LogRecord {
        time_unix_nano: now,
        observed_time_unix_nano: now,
        severity_text: level.into(),
        body: Some(AnyValue {
            value: Some(Value::StringValue(body)),
        }),
        attributes: attributes.to_vec(),
        ..Default::default()
    }
}

/// The pod's identity as the filelog receiver reads it from the log file's path.
pub(super) fn container_resource(pod: &OperatorPod) -> Resource {
    Resource {
        attributes: vec![
            text("k8s.namespace.name", &pod.namespace),
            text("k8s.pod.name", &pod.pod),
            text("k8s.container.name", "manager"),
        ],
        ..Default::default()
    }
}

/// Quotes and backslashes escaped: all the generated messages need.
fn json_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}
