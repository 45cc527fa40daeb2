//! The facts the correlator uses of an audit `Event` (one per log line) or
//! `EventList` (as the webhook posts it).

use serde_json::Value;

use super::{API_VERSION_PREFIX, event_time};
use crate::kubernetes::status_digest::status_digest;
/// The one stage that shows the outcome. `RequestReceived`, `ResponseStarted`
/// (watches) and `Panic` events are skipped: a completed request has its own event.
const RESPONSE_COMPLETE: &str = "ResponseComplete";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// Subresources whose request and response bodies are the object itself.
const OBJECT_BODY_SUBRESOURCES: &[&str] = &["", "status", "finalize"];

/// What one completed API request shows about the caller and the object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFacts {
    /// `stageTimestamp`, else `requestReceivedTimestamp`.
    pub time_unix_nano: u64,
    /// `ResponseComplete`, or empty when the event has no stage.
    pub stage: String,
    /// `user.username`.
    pub user: String,
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped objects, including namespaces themselves.
    pub namespace: String,
    pub name: String,
    /// `responseStatus.code`.
    pub code: Option<u16>,
    /// The Kind of the request or response object; empty at `Metadata` level.
    pub kind: String,
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    pub resource_version: Option<String>,
    /// RFC 3339, as given.
    pub deletion_timestamp: Option<String>,
    /// `None` when no full object is shown, `Some(empty)` when it has none.
    pub finalizers: Option<Vec<String>>,
    /// Digest of the written status (status writes) or of the resulting object.
    pub status_digest: Vec<String>,
    /// The message of a 409 `Conflict` response.
    pub conflict_message: Option<String>,
    pub audit_id: String,
}

/// The facts of an audit `Event` (one) or `EventList` (one per item). Events of
/// other stages than `ResponseComplete`, and anything that is not audit, give none.
pub fn parse_audit(value: &Value) -> Vec<AuditFacts> {
    match audit_document(value) {
        Ok(AuditDocument::Event) => event_facts(value).ok().flatten().into_iter().collect(),
        Ok(AuditDocument::List(items)) => list_facts(items),
        Err(_) => Vec::new(),
    }
}

/// Like [`parse_audit`] for one line of an audit log, saying why when the line is
/// not an audit event.
pub fn parse_audit_line(line: &str) -> Result<Vec<AuditFacts>, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    match audit_document(&value)? {
        AuditDocument::Event => Ok(event_facts(&value)?.into_iter().collect()),
        AuditDocument::List(items) => Ok(list_facts(items)),
    }
}

/// The operator namespace and service account of `system:serviceaccount:<ns>:<name>`.
pub fn operator_of_user(username: &str) -> Option<(String, String)> {
    let account = username.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (namespace, name) = account.split_once(':')?;
    if namespace.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((namespace.to_string(), name.to_string()))
}

enum AuditDocument<'a> {
    Event,
    List(&'a [Value]),
}

fn audit_document(value: &Value) -> Result<AuditDocument<'_>, String> {
    let api_version = text_at(value, "/apiVersion");
    let kind = text_at(value, "/kind");
    if !api_version.starts_with(API_VERSION_PREFIX) {
        return Err(format!(
            "not an audit event: apiVersion {api_version:?} kind {kind:?}, expected audit.k8s.io/v1"
        ));
    }
    match kind {
        "Event" => Ok(AuditDocument::Event),
        "EventList" => match value.get("items") {
            Some(Value::Array(items)) => Ok(AuditDocument::List(items)),
            _ => Err("audit EventList without an items array".to_string()),
        },
        _ => Err(format!("not an audit event: kind {kind:?}")),
    }
}

/// The facts of the counted items of a list; items without a time are skipped.
fn list_facts(items: &[Value]) -> Vec<AuditFacts> {
    items
        .iter()
        .filter_map(|item| event_facts(item).ok().flatten())
        .collect()
}

/// `None` for stages that do not count.
fn event_facts(event: &Value) -> Result<Option<AuditFacts>, String> {
    let stage = text_at(event, "/stage");
    if !stage.is_empty() && stage != RESPONSE_COMPLETE {
        return Ok(None);
    }
    let mut facts = request_facts(event)?;
    if let Some(object) = object_body(event, &facts.subresource) {
        add_object_facts(&mut facts, object);
    }
    facts.status_digest = digest_source(event, &facts)
        .map(status_digest)
        .unwrap_or_default();
    facts.conflict_message = conflict_message(event, facts.code);
    Ok(Some(facts))
}

/// What every event has, whatever its level: who did what to which object, when.
fn request_facts(event: &Value) -> Result<AuditFacts, String> {
    let owned = |pointer: &str| text_at(event, pointer).to_string();
    let mut facts = AuditFacts {
        time_unix_nano: time_of(event)?,
        stage: owned("/stage"),
        user: owned("/user/username"),
        verb: owned("/verb"),
        group: owned("/objectRef/apiGroup"),
        resource: owned("/objectRef/resource"),
        subresource: owned("/objectRef/subresource"),
        namespace: owned("/objectRef/namespace"),
        name: owned("/objectRef/name"),
        code: event
            .pointer("/responseStatus/code")
            .and_then(Value::as_u64)
            .and_then(|code| u16::try_from(code).ok()),
        audit_id: owned("/auditID"),
        ..AuditFacts::default()
    };
    // The API server repeats a namespace's name as its namespace; it is cluster-scoped.
    if facts.resource == "namespaces" && facts.group.is_empty() && facts.namespace == facts.name {
        facts.namespace.clear();
    }
    Ok(facts)
}

fn time_of(event: &Value) -> Result<u64, String> {
    let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str);
    event_time(text("/stageTimestamp"), text("/requestReceivedTimestamp")).ok_or_else(|| {
        "audit event without a valid stageTimestamp or requestReceivedTimestamp".to_string()
    })
}

/// The response object when it is the object (RequestResponse level), else the
/// request object; never a `Status`, `DeleteOptions` or list, nor the body of a
/// subresource such as `scale` or `eviction`.
fn object_body<'a>(event: &'a Value, subresource: &str) -> Option<&'a Value> {
    if !OBJECT_BODY_SUBRESOURCES.contains(&subresource) {
        return None;
    }
    ["responseObject", "requestObject"]
        .iter()
        .filter_map(|key| event.get(key))
        .find(|body| is_object_itself(body))
}

fn is_object_itself(body: &Value) -> bool {
    let kind = text_at(body, "/kind");
    body.is_object() && !matches!(kind, "Status" | "DeleteOptions") && !kind.ends_with("List")
}

fn add_object_facts(facts: &mut AuditFacts, object: &Value) {
    let metadata = object.get("metadata").unwrap_or(&Value::Null);
    let owned = |value: &Value, pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    facts.kind = text_at(object, "/kind").to_string();
    if facts.name.is_empty() {
        facts.name = text_at(metadata, "/name").to_string();
    }
    facts.generation = metadata.get("generation").and_then(Value::as_i64);
    facts.observed_generation = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    facts.resource_version = owned(metadata, "/resourceVersion");
    facts.deletion_timestamp = owned(metadata, "/deletionTimestamp");
    facts.finalizers = finalizers_of(metadata);
}

/// The finalizers a body shows. A full object (one with a uid or creation time)
/// without the field has none; a partial body (a patch) says nothing.
fn finalizers_of(metadata: &Value) -> Option<Vec<String>> {
    match metadata.get("finalizers") {
        Some(Value::Array(names)) => Some(
            names
                .iter()
                .filter_map(|name| name.as_str().map(str::to_string))
                .collect(),
        ),
        Some(_) => None,
        None => {
            let is_full_object =
                metadata.get("uid").is_some() || metadata.get("creationTimestamp").is_some();
            is_full_object.then(Vec::new)
        }
    }
}

/// Status writes digest what was written (the request); other writes the result.
fn digest_source<'a>(event: &'a Value, facts: &AuditFacts) -> Option<&'a Value> {
    let is_status_write =
        facts.subresource == "status" && matches!(facts.verb.as_str(), "update" | "patch");
    let source = if is_status_write {
        "requestObject"
    } else {
        "responseObject"
    };
    event.get(source).filter(|body| is_object_itself(body))
}

/// The message of a 409 response, unless it is another kind of 409 (`AlreadyExists`).
fn conflict_message(event: &Value, code: Option<u16>) -> Option<String> {
    if code != Some(409) {
        return None;
    }
    let reason = text_at(event, "/responseStatus/reason");
    if !reason.is_empty() && reason != "Conflict" {
        return None;
    }
    ["/responseObject/message", "/responseStatus/message"]
        .iter()
        .map(|pointer| text_at(event, pointer))
        .find(|message| !message.is_empty())
        .map(str::to_string)
}

/// The string at a JSON pointer, or empty when it is missing or not a string.
fn text_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timestamp::parse_rfc3339;

    const STATUS_UPDATES: &str = include_str!(
        "../../../../processors/tests/fixtures/audit/status_update_request_response.jsonl"
    );
    const PATCH: &str =
        include_str!("../../../../processors/tests/fixtures/audit/patch_finalizer.jsonl");
    const CONFLICTS: &str =
        include_str!("../../../../processors/tests/fixtures/audit/conflict_409.jsonl");
    const DELETES: &str =
        include_str!("../../../../processors/tests/fixtures/audit/delete_with_finalizers.jsonl");
    const METADATA: &str =
        include_str!("../../../../processors/tests/fixtures/audit/metadata_level.jsonl");
    const EVENT_LIST: &str =
        include_str!("../../../../processors/tests/fixtures/audit/event_list.json");
    const MALFORMED: &str =
        include_str!("../../../../processors/tests/fixtures/audit/malformed.jsonl");

    const OPERATOR: &str = "system:serviceaccount:ray-system:kuberay-operator";

    fn facts_of(log: &str) -> Vec<AuditFacts> {
        log.lines()
            .flat_map(|line| parse_audit_line(line).unwrap())
            .collect()
    }

    fn digest_entry<'a>(facts: &'a AuditFacts, path: &str) -> &'a str {
        facts
            .status_digest
            .iter()
            .find(|entry| entry.rsplit_once('=').is_some_and(|(p, _)| p == path))
            .unwrap()
    }

    #[test]
    fn rfc3339_times_with_fractions_and_zones() {
        let base = 1_714_564_800_000_000_000;
        for (text, expected) in [
            ("2024-05-01T12:00:00Z", Some(base)),
            ("2024-05-01T12:00:00.123456Z", Some(base + 123_456_000)),
            ("2024-05-01T12:00:00.123456789Z", Some(base + 123_456_789)),
            ("2024-05-01T12:00:00.1234567891Z", Some(base + 123_456_789)),
            ("2024-05-01T12:00:00", Some(base)),
            ("2024-05-01T12:00:00+00:00", Some(base)),
            ("2024-05-01T14:00:00.5+02:00", Some(base + 500_000_000)),
            ("2024-05-01T06:30:00-05:30", Some(base)),
            ("2024-05-01", None),
            ("2024-05-01T12:00:00+25:00", None),
            ("2024-13-01T12:00:00Z", None),
            ("1969-12-31T23:59:59Z", None),
            ("2024-05-01T12:00:00.12é", None),
            ("é2024-05-01T12:00:00Z", None),
            ("not a time at all, really", None),
            ("", None),
        ] {
            assert_eq!(parse_rfc3339(text), expected, "{text}");
        }
    }

    #[test]
    fn service_accounts_name_operators() {
        assert_eq!(
            operator_of_user(OPERATOR),
            Some(("ray-system".into(), "kuberay-operator".into()))
        );
        for user in [
            "kubernetes-admin",
            "system:serviceaccount:ray-system",
            "system:serviceaccount::x",
            "system:serviceaccount:ns:",
            "system:serviceaccount:ns:a:b",
            "system:kube-controller-manager",
        ] {
            assert_eq!(operator_of_user(user), None, "{user}");
        }
    }

    #[test]
    fn status_updates_with_request_response_bodies() {
        let facts = facts_of(STATUS_UPDATES);
        assert_eq!(facts.len(), 3, "the RequestReceived event does not count");
        let first = &facts[0];
        assert_eq!(first.time_unix_nano, 1_714_564_800_108_512_000);
        assert_eq!(first.stage, "ResponseComplete");
        assert_eq!(first.user, OPERATOR);
        assert_eq!(
            (
                first.verb.as_str(),
                first.group.as_str(),
                first.resource.as_str()
            ),
            ("update", "ray.io", "rayjobs")
        );
        assert_eq!(
            (
                first.subresource.as_str(),
                first.namespace.as_str(),
                first.name.as_str()
            ),
            ("status", "ml", "train")
        );
        assert_eq!(first.code, Some(200));
        assert_eq!(first.kind, "RayJob");
        assert_eq!(first.generation, Some(2));
        assert_eq!(first.observed_generation, Some(2));
        assert_eq!(first.resource_version.as_deref(), Some("48214"));
        assert_eq!(first.deletion_timestamp, None);
        assert_eq!(
            first.finalizers,
            Some(vec!["ray.io/rayjob-finalizer".into()])
        );
        assert_eq!(first.conflict_message, None);
        assert_eq!(first.audit_id, "4c1d2e3f-0a1b-4c2d-8e3f-5a6b7c8d9e01");

        let ready = "status.conditions[type=Ready].lastTransitionTime";
        let sync = "status.lastSyncTime";
        assert_eq!(
            digest_entry(&facts[0], ready),
            digest_entry(&facts[1], ready)
        );
        assert_ne!(digest_entry(&facts[0], sync), digest_entry(&facts[1], sync));
        assert_ne!(digest_entry(&facts[1], sync), digest_entry(&facts[2], sync));
    }

    #[test]
    fn a_patch_shows_the_patched_object() {
        let facts = facts_of(PATCH);
        let [patch] = facts.as_slice() else {
            panic!("one event: {facts:?}")
        };
        assert_eq!(patch.verb, "patch");
        assert_eq!(patch.subresource, "");
        assert_eq!(patch.kind, "RayJob");
        assert_eq!(patch.generation, Some(1));
        assert_eq!(patch.resource_version.as_deref(), Some("48191"));
        assert_eq!(
            patch.finalizers,
            Some(vec!["ray.io/rayjob-finalizer".into()])
        );
        assert!(digest_entry(patch, "status.lastSyncTime").len() > 16);
    }

    #[test]
    fn conflicts_carry_their_message() {
        let facts = facts_of(CONFLICTS);
        let conflict = &facts[0];
        assert_eq!(conflict.code, Some(409));
        assert_eq!(
            conflict.kind, "RayJob",
            "from the request: the response is a Status"
        );
        assert_eq!(conflict.resource_version.as_deref(), Some("48213"));
        let message = conflict.conflict_message.as_deref().unwrap();
        assert!(message.starts_with(r#"Operation cannot be fulfilled on rayjobs.ray.io "train""#));
        assert!(
            !conflict.status_digest.is_empty(),
            "the status it tried to write"
        );

        let already_exists = &facts[1];
        assert_eq!(already_exists.code, Some(409));
        assert_eq!(already_exists.verb, "create");
        assert_eq!(already_exists.conflict_message, None);
    }

    #[test]
    fn a_delete_with_finalizers_left() {
        let facts = facts_of(DELETES);
        let pending = &facts[0];
        assert_eq!(pending.verb, "delete");
        assert_eq!(pending.user, "kubernetes-admin");
        assert_eq!(
            pending.kind, "RayJob",
            "not the DeleteOptions of the request"
        );
        assert_eq!(
            pending.deletion_timestamp.as_deref(),
            Some("2024-05-01T12:05:00Z")
        );
        assert_eq!(
            pending.finalizers,
            Some(vec!["ray.io/rayjob-finalizer".into()])
        );
        assert_eq!(pending.generation, Some(3));

        let done = &facts[1];
        assert_eq!(
            (done.resource.as_str(), done.name.as_str()),
            ("configmaps", "train-config")
        );
        assert_eq!(done.kind, "");
        assert_eq!(done.finalizers, None);
        assert!(
            done.status_digest.is_empty(),
            "a Status response has no object status"
        );
    }

    #[test]
    fn metadata_level_events_still_say_who_did_what() {
        let facts = facts_of(METADATA);
        let lease = &facts[0];
        assert_eq!(
            (
                lease.verb.as_str(),
                lease.group.as_str(),
                lease.resource.as_str()
            ),
            ("update", "coordination.k8s.io", "leases")
        );
        assert_eq!(
            (lease.namespace.as_str(), lease.name.as_str()),
            ("ray-system", "ray-operator-leader")
        );
        assert_eq!(lease.code, Some(200));
        assert_eq!(lease.kind, "");
        assert_eq!(lease.generation, None);
        assert_eq!(lease.finalizers, None);
        assert!(lease.status_digest.is_empty());

        let list = &facts[1];
        assert_eq!((list.verb.as_str(), list.name.as_str()), ("list", ""));

        let namespace = &facts[2];
        assert_eq!(namespace.resource, "namespaces");
        assert_eq!(
            (namespace.namespace.as_str(), namespace.name.as_str()),
            ("", "ml")
        );
    }

    #[test]
    fn an_event_list_gives_its_completed_items() {
        let document: Value = serde_json::from_str(EVENT_LIST).unwrap();
        let facts = parse_audit(&document);
        assert_eq!(facts.len(), 2);
        let patch = &facts[0];
        assert_eq!(
            (patch.verb.as_str(), patch.subresource.as_str()),
            ("patch", "status")
        );
        assert_eq!(patch.kind, "", "a merge patch has no kind");
        assert_eq!(
            patch.finalizers, None,
            "a patch body does not show finalizers"
        );
        let paths: Vec<_> = patch
            .status_digest
            .iter()
            .filter_map(|entry| entry.rsplit_once('=').map(|(path, _)| path))
            .collect();
        assert_eq!(paths, ["status.jobStatus", "status.lastSyncTime"]);
        assert_eq!(facts[1].verb, "get");

        let one_line: String = EVENT_LIST.lines().map(str::trim).collect();
        assert_eq!(parse_audit_line(&one_line).unwrap(), facts);
    }

    #[test]
    fn events_without_a_stage_count() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","verb":"get","objectRef":{"resource":"pods","namespace":"ml","name":"x"},"requestReceivedTimestamp":"2024-05-01T12:00:00Z"}"#;
        let facts = parse_audit_line(line).unwrap();
        assert_eq!(facts.len(), 1);
        assert_eq!(facts[0].stage, "");
        assert_eq!(facts[0].code, None);
    }

    #[test]
    fn malformed_lines_never_panic() {
        let results: Vec<_> = MALFORMED.lines().map(parse_audit_line).collect();
        assert!(results[0].as_ref().unwrap_err().starts_with("not JSON"));
        assert!(
            results[1]
                .as_ref()
                .unwrap_err()
                .contains("apiVersion \"v1\"")
        );
        assert!(results[2].as_ref().unwrap_err().contains("stageTimestamp"));

        let wrong_types = &results[3].as_ref().unwrap()[0];
        assert_eq!(
            (wrong_types.verb.as_str(), wrong_types.user.as_str()),
            ("", "")
        );
        assert_eq!(wrong_types.code, None);
        assert_eq!(wrong_types.kind, "");

        let odd_values = &results[4].as_ref().unwrap()[0];
        assert_eq!(odd_values.time_unix_nano, 1_714_564_812_000_000_000);
        assert_eq!(odd_values.code, None);
        assert_eq!(odd_values.generation, None);
        assert_eq!(odd_values.resource_version, None);
        assert_eq!(odd_values.finalizers, None);
        assert_eq!(odd_values.observed_generation, None);
        assert_eq!(odd_values.status_digest.len(), 2);

        assert!(results[5].as_ref().unwrap_err().contains("items"));
        assert!(results[6].is_err());
        assert!(parse_audit(&Value::Null).is_empty());
        assert!(parse_audit_line("").is_err());
    }

    #[test]
    fn huge_strings_are_carried_not_choked_on() {
        let name = "n".repeat(1 << 20);
        let line = format!(
            r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","stage":"ResponseComplete","verb":"get","objectRef":{{"resource":"pods","name":"{name}"}},"stageTimestamp":"2024-05-01T12:00:00Z"}}"#
        );
        assert_eq!(parse_audit_line(&line).unwrap()[0].name.len(), 1 << 20);
    }
}
