//! Audit events as the API server posts them to its webhook.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

/// Nanoseconds since the epoch as the audit log writes times.
pub fn rfc3339(nanos: u64) -> String {
    humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_nanos(nanos)).to_string()
}

/// `kubectl delete rayjob <name>` in namespace `ml` by a person at `time`; the
/// response is `object`, which a finalizer still holds.
pub fn deletion_by_person(name: &str, object: Value, time: u64) -> Value {
    json!({
        "level": "RequestResponse",
        "auditID": "c3d4e5f6-a7b8-4c9d-8e0f-2a3b4c5d6e7f",
        "stage": "ResponseComplete",
        "requestURI": format!("/apis/ray.io/v1/namespaces/ml/rayjobs/{name}"),
        "verb": "delete",
        "user": {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]},
        "sourceIPs": ["192.168.49.1"],
        "userAgent": "kubectl/v1.30.1 (linux/amd64) kubernetes/9befeb3",
        "objectRef": {"resource": "rayjobs", "namespace": "ml", "name": name, "apiGroup": "ray.io", "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": 200},
        "requestObject": {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": "Background"},
        "responseObject": object,
        "requestReceivedTimestamp": rfc3339(time - 3_000_000),
        "stageTimestamp": rfc3339(time),
    })
}

/// The `EventList` batch the webhook takes.
pub fn event_list(items: Vec<Value>) -> Vec<u8> {
    let list = json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": items});
    serde_json::to_vec(&list).expect("JSON")
}
