//! What a watch event of an object becomes: one log record telling the write (or,
//! for an object listed, only the state) as an audit event of the same call would be
//! tagged, so that the correlator reads both alike. The writer is the field manager
//! of the object's newest `managedFields` entry, with its operation and subresource.

use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use opscope_model::attributes::string_value;
use opscope_model::kubernetes::audit::AuditFacts;
use opscope_model::kubernetes::status_digest::status_digest;
use opscope_model::timestamp::Nanos;
use opscope_processors::tagger::processor::write_audit_call;
use opscope_proto::otlp::common::v1::AnyValue;
use opscope_proto::otlp::logs::v1::LogRecord;
use serde_json::Value;

/// What the watch said of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Listed (at start and at every re-list): its state, no write.
    Listed,
    /// Added by a write.
    Created,
    /// Changed by a write.
    Written,
    Deleted,
}

/// The field manager of the newest write, how it wrote (the API verb the audit log
/// would show) and to which subresource.
struct Writer<'a> {
    manager: &'a str,
    verb: &'static str,
    subresource: &'a str,
}

fn newest_writer(object: &DynamicObject) -> Option<Writer<'_>> {
    let entries = object.metadata.managed_fields.as_deref()?;
    // The entry with the newest time; the later one of equal times (second precision).
    let newest = entries
        .iter()
        .enumerate()
        .max_by_key(|(index, entry)| (entry.time.as_ref().map(|time| time.0), *index))?
        .1;
    let verb = match newest.operation.as_deref() {
        Some("Apply") => "patch",
        _ => "update",
    };
    Some(Writer {
        manager: newest.manager.as_deref().unwrap_or_default(),
        verb,
        subresource: newest.subresource.as_deref().unwrap_or_default(),
    })
}

/// The record of `change` to `object` (of `resource`), seen at `now`.
pub fn record(
    object: &DynamicObject,
    resource: &ApiResource,
    change: Change,
    now: Nanos,
) -> LogRecord {
    let metadata = &object.metadata;
    let writer = match change {
        Change::Created | Change::Written => newest_writer(object),
        Change::Listed | Change::Deleted => None,
    };
    let verb = match (change, &writer) {
        (Change::Listed, _) => "list",
        (Change::Deleted, _) => "delete",
        (Change::Created, _) => "create",
        (Change::Written, Some(writer)) => writer.verb,
        (Change::Written, None) => "update",
    };
    let status = object.data.get("status");
    let facts = AuditFacts {
        time_unix_nano: now,
        stage: "ResponseComplete".into(),
        user: writer
            .as_ref()
            .map(|w| w.manager)
            .unwrap_or_default()
            .into(),
        verb: verb.into(),
        group: resource.group.clone(),
        resource: resource.plural.clone(),
        subresource: writer
            .as_ref()
            .map(|w| w.subresource)
            .unwrap_or_default()
            .into(),
        namespace: metadata.namespace.clone().unwrap_or_default(),
        name: metadata.name.clone().unwrap_or_default(),
        code: (change != Change::Listed).then_some(200),
        kind: resource.kind.clone(),
        generation: metadata.generation,
        observed_generation: status
            .and_then(|status| status.get("observedGeneration"))
            .and_then(Value::as_i64),
        resource_version: metadata.resource_version.clone(),
        deletion_timestamp: (metadata.deletion_timestamp.as_ref()).map(|time| time.0.to_string()),
        finalizers: Some(metadata.finalizers.clone().unwrap_or_default()),
        status_digest: status_digest(status),
        conflict_message: None,
        audit_id: String::new(),
    };
    let body = format!(
        "{verb} {} {}/{} resourceVersion {} by {}",
        facts.kind,
        facts.namespace,
        facts.name,
        facts.resource_version.as_deref().unwrap_or("?"),
        if facts.user.is_empty() {
            "-"
        } else {
            &facts.user
        },
    );
    let mut record = LogRecord {
        time_unix_nano: now,
        observed_time_unix_nano: now,
        body: Some(AnyValue {
            value: Some(string_value(body)),
        }),
        ..LogRecord::default()
    };
    write_audit_call(&mut record.attributes, &facts);
    record
}

#[cfg(test)]
mod tests {
    use opscope_model::attributes::{get_bool, get_i64, get_str, get_strings};
    use opscope_model::semconv::*;

    use super::*;

    fn widget(managed: Value, extra: Value) -> DynamicObject {
        let mut object = serde_json::json!({
            "apiVersion": "e2e.opscope.dev/v1", "kind": "Widget",
            "metadata": {
                "name": "w1", "namespace": "shop", "uid": "u-1", "generation": 3,
                "resourceVersion": "812", "finalizers": ["e2e.opscope.dev/cleanup"],
                "managedFields": managed
            },
            "status": { "observedGeneration": 3, "lastReconcileTime": "2026-12-04T10:00:00.123456Z" }
        });
        if let (Some(object), Some(extra)) = (object.as_object_mut(), extra.as_object()) {
            for (key, value) in extra {
                object.insert(key.clone(), value.clone());
            }
        }
        serde_json::from_value(object).unwrap()
    }

    fn resource() -> ApiResource {
        ApiResource {
            group: "e2e.opscope.dev".into(),
            version: "v1".into(),
            api_version: "e2e.opscope.dev/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    #[test]
    fn a_status_write_names_the_newest_manager_and_the_object_state() {
        let object = widget(
            serde_json::json!([
                { "manager": "kubectl", "operation": "Update", "time": "2026-12-04T09:00:00Z" },
                { "manager": "widget-operator", "operation": "Update", "subresource": "status",
                  "time": "2026-12-04T10:00:00Z" }
            ]),
            serde_json::json!({}),
        );
        let record = record(&object, &resource(), Change::Written, 7);
        let attributes = &record.attributes;
        assert_eq!(get_str(attributes, API_ACTOR), Some("widget-operator"));
        assert_eq!(get_str(attributes, API_VERB), Some("update"));
        assert_eq!(get_str(attributes, API_SUBRESOURCE), Some("status"));
        assert_eq!(get_str(attributes, OBJECT_RESOURCE), Some("widgets"));
        assert_eq!(get_str(attributes, OBJECT_NAME), Some("w1"));
        assert_eq!(get_i64(attributes, OBJECT_GENERATION), Some(3));
        assert_eq!(get_i64(attributes, OBJECT_OBSERVED_GENERATION), Some(3));
        assert_eq!(get_str(attributes, OBJECT_RESOURCE_VERSION), Some("812"));
        assert_eq!(
            get_strings(attributes, OBJECT_FINALIZERS),
            ["e2e.opscope.dev/cleanup"]
        );
        assert!(
            get_strings(attributes, OBJECT_STATUS_DIGEST)
                .iter()
                .any(|entry| entry.starts_with("status.lastReconcileTime="))
        );
        assert_eq!(record.time_unix_nano, 7);
    }

    #[test]
    fn a_listed_object_is_state_without_a_write_and_a_deleted_one_is_gone() {
        let listed = widget(serde_json::json!([]), serde_json::json!({}));
        let record_of = |change| record(&listed, &resource(), change, 7);
        let attributes = record_of(Change::Listed).attributes;
        assert_eq!(get_str(&attributes, API_VERB), Some("list"));
        assert_eq!(
            get_str(&attributes, OPSCOPE_RECORD),
            Some(RECORD_OBJECT_STATE)
        );
        assert_eq!(get_i64(&attributes, HTTP_RESPONSE_STATUS_CODE), None);

        let gone = widget(serde_json::json!([]), serde_json::json!({}));
        let mut gone = gone;
        gone.metadata.finalizers = None;
        let attributes = record(&gone, &resource(), Change::Deleted, 7).attributes;
        assert_eq!(get_str(&attributes, API_VERB), Some("delete"));
        assert_eq!(get_bool(&attributes, OBJECT_GONE), Some(true));
    }

    #[test]
    fn a_deletion_waiting_on_finalizers_is_told_with_its_time() {
        let deleting = widget(serde_json::json!([]), serde_json::json!({}));
        let mut deleting = deleting;
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-12-04T10:00:00Z".parse().unwrap(),
            ));
        let attributes = record(&deleting, &resource(), Change::Written, 7).attributes;
        assert_eq!(
            get_str(&attributes, OBJECT_DELETION_TIMESTAMP),
            Some("2026-12-04T10:00:00Z")
        );
        assert_eq!(get_bool(&attributes, OBJECT_GONE), None);
    }
}
