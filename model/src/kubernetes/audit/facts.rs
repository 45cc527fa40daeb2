//! The facts the correlator uses of an audit `Event` (one per log line) or
//! `EventList` (as the webhook posts it), read in one pass over the document's text:
//! the members the facts need are decoded (`event`), the others skipped; the items
//! of a list are decoded whole, each to be an `Event` of its own.

use serde::Deserialize;
use serde_json::Value;

use super::decodable::{may_escape_surrogate, may_nest_too_deep, may_overflow_number};
use super::event::{Body, Document, Event, Finalizers};
use super::lenient_json::Object;
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

/// An audit document, read once.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditDocument {
    /// An `Event`'s facts; `None` for a stage that does not count.
    Event(Option<Box<AuditFacts>>),
    /// An `EventList`'s items, each made an `Event` of its own (its `kind` and
    /// `apiVersion` set to `Event` and the list's), with its facts; `None` for an
    /// item that is not a counted event.
    List(Vec<(Value, Option<AuditFacts>)>),
}

/// Reads an audit `Event` or `EventList` from its text, saying why when it is not
/// one: not JSON, not of `audit.k8s.io`, an `Event` without a valid time.
pub fn read_audit(text: &str) -> Result<AuditDocument, String> {
    let not_json = |e: serde_json::Error| format!("not JSON: {e}");
    // The members read below are decoded; what the others may hide is checked whole.
    if may_escape_surrogate(text) || may_overflow_number(text) || may_nest_too_deep(text) {
        serde_json::from_str::<Value>(text).map_err(not_json)?;
    }
    let document: Object<Document<'_>> = serde_json::from_str(text).map_err(not_json)?;
    let mut document = document.0.unwrap_or_default();
    match audit_kind(&mut document)? {
        AuditKind::Event => Ok(AuditDocument::Event(
            event_facts(&document.event)?.map(Box::new),
        )),
        AuditKind::List(items) => {
            let api_version = Value::from(document.api_version.as_ref());
            let events = items.into_iter().map(|mut item| {
                let facts = item_facts(&item);
                if let Some(event) = item.as_object_mut() {
                    event.insert("kind".into(), "Event".into());
                    event.insert("apiVersion".into(), api_version.clone());
                }
                (item, facts)
            });
            Ok(AuditDocument::List(events.collect()))
        }
    }
}

/// The facts of an audit `Event` (one) or `EventList` (one per item). Events of
/// other stages than `ResponseComplete`, and anything that is not audit, give none.
pub fn parse_audit(value: &Value) -> Vec<AuditFacts> {
    let Ok(Object(Some(mut document))) = Object::<Document<'_>>::deserialize(value) else {
        return Vec::new();
    };
    match audit_kind(&mut document) {
        Ok(AuditKind::Event) => event_facts(&document.event)
            .ok()
            .flatten()
            .into_iter()
            .collect(),
        Ok(AuditKind::List(items)) => items.iter().filter_map(item_facts).collect(),
        Err(_) => Vec::new(),
    }
}

/// Like [`parse_audit`] for one line of an audit log, saying why when the line is
/// not an audit event.
pub fn parse_audit_line(line: &str) -> Result<Vec<AuditFacts>, String> {
    Ok(match read_audit(line)? {
        AuditDocument::Event(facts) => facts.into_iter().map(|facts| *facts).collect(),
        AuditDocument::List(items) => items.into_iter().filter_map(|(_, facts)| facts).collect(),
    })
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

enum AuditKind {
    Event,
    List(Vec<Value>),
}

/// What the document is; the items of a list are taken from it.
fn audit_kind(document: &mut Document<'_>) -> Result<AuditKind, String> {
    let (api_version, kind) = (&document.api_version, &document.kind);
    if !api_version.starts_with(API_VERSION_PREFIX) {
        return Err(format!(
            "not an audit event: apiVersion {api_version:?} kind {kind:?}, expected audit.k8s.io/v1"
        ));
    }
    match kind.as_ref() {
        "Event" => Ok(AuditKind::Event),
        "EventList" => document
            .items
            .take()
            .map(AuditKind::List)
            .ok_or_else(|| "audit EventList without an items array".to_string()),
        _ => Err(format!("not an audit event: kind {kind:?}")),
    }
}

/// The facts of an item of a list; none for one that is not a counted event.
fn item_facts(item: &Value) -> Option<AuditFacts> {
    let Ok(Object(Some(event))) = Object::<Event<'_>>::deserialize(item) else {
        return None;
    };
    event_facts(&event).ok().flatten()
}

/// `None` for stages that do not count.
fn event_facts(event: &Event<'_>) -> Result<Option<AuditFacts>, String> {
    if !event.stage.is_empty() && event.stage != RESPONSE_COMPLETE {
        return Ok(None);
    }
    let mut facts = request_facts(event)?;
    if let Some(object) = object_body(event, &facts.subresource) {
        add_object_facts(&mut facts, object);
    }
    facts.status_digest = digest_source(event, &facts)
        .map(|body| status_digest(body.status.as_ref()))
        .unwrap_or_default();
    facts.conflict_message = conflict_message(event, facts.code);
    Ok(Some(facts))
}

/// What every event has, whatever its level: who did what to which object, when.
fn request_facts(event: &Event<'_>) -> Result<AuditFacts, String> {
    let object = &event.object_ref;
    let mut facts = AuditFacts {
        time_unix_nano: time_of(event)?,
        stage: event.stage.to_string(),
        user: event.username.to_string(),
        verb: event.verb.to_string(),
        group: object.api_group.to_string(),
        resource: object.resource.to_string(),
        subresource: object.subresource.to_string(),
        namespace: object.namespace.to_string(),
        name: object.name.to_string(),
        code: event
            .response_status
            .code
            .and_then(|code| u16::try_from(code).ok()),
        audit_id: event.audit_id.to_string(),
        ..AuditFacts::default()
    };
    // The API server repeats a namespace's name as its namespace; it is cluster-scoped.
    if facts.resource == "namespaces" && facts.group.is_empty() && facts.namespace == facts.name {
        facts.namespace.clear();
    }
    Ok(facts)
}

fn time_of(event: &Event<'_>) -> Result<u64, String> {
    event_time(
        event.stage_timestamp.as_deref(),
        event.request_received_timestamp.as_deref(),
    )
    .ok_or_else(|| {
        "audit event without a valid stageTimestamp or requestReceivedTimestamp".to_string()
    })
}

/// The response object when it is the object (RequestResponse level), else the
/// request object; never a `Status`, `DeleteOptions` or list, nor the body of a
/// subresource such as `scale` or `eviction`.
fn object_body<'e, 'a>(event: &'e Event<'a>, subresource: &str) -> Option<&'e Body<'a>> {
    if !OBJECT_BODY_SUBRESOURCES.contains(&subresource) {
        return None;
    }
    [&event.response_object, &event.request_object]
        .into_iter()
        .flatten()
        .find(|body| is_object_itself(body))
}

fn is_object_itself(body: &Body<'_>) -> bool {
    let kind = body.kind.as_ref();
    !matches!(kind, "Status" | "DeleteOptions") && !kind.ends_with("List")
}

fn add_object_facts(facts: &mut AuditFacts, object: &Body<'_>) {
    let metadata = &object.metadata;
    facts.kind = object.kind.to_string();
    if facts.name.is_empty() {
        facts.name = metadata.name.to_string();
    }
    facts.generation = metadata.generation.and_then(|g| i64::try_from(g).ok());
    facts.observed_generation = object
        .status
        .as_ref()
        .and_then(|status| status.get("observedGeneration"))
        .and_then(Value::as_i64);
    facts.resource_version = metadata.resource_version.as_deref().map(str::to_string);
    facts.deletion_timestamp = metadata.deletion_timestamp.as_deref().map(str::to_string);
    facts.finalizers = match &metadata.finalizers {
        Finalizers::Listed(names) => Some(names.clone()),
        Finalizers::Unreadable => None,
        // A full object without the field has none; a partial body (a patch) says nothing.
        Finalizers::Absent => metadata.identifies_object.then(Vec::new),
    };
}

/// Status writes digest what was written (the request); other writes the result.
fn digest_source<'e, 'a>(event: &'e Event<'a>, facts: &AuditFacts) -> Option<&'e Body<'a>> {
    let is_status_write =
        facts.subresource == "status" && matches!(facts.verb.as_str(), "update" | "patch");
    let source = if is_status_write {
        &event.request_object
    } else {
        &event.response_object
    };
    source.as_ref().filter(|body| is_object_itself(body))
}

/// The message of a 409 response, unless it is another kind of 409 (`AlreadyExists`).
fn conflict_message(event: &Event<'_>, code: Option<u16>) -> Option<String> {
    if code != Some(409) {
        return None;
    }
    let status = &event.response_status;
    if !status.reason.is_empty() && status.reason != "Conflict" {
        return None;
    }
    let response_message = event.response_object.as_ref().map(|body| &body.message);
    [response_message, Some(&status.message)]
        .into_iter()
        .flatten()
        .find(|message| !message.is_empty())
        .map(|message| message.to_string())
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
    fn a_list_is_read_once_into_events_of_their_own_with_their_facts() {
        let one_line: String = EVENT_LIST.lines().map(str::trim).collect();
        let Ok(AuditDocument::List(events)) = read_audit(&one_line) else {
            panic!("a list")
        };
        assert_eq!(events.len(), 3);
        for (event, _) in &events {
            assert_eq!(event["kind"], "Event");
            assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        }
        let facts: Vec<_> = events.into_iter().filter_map(|(_, facts)| facts).collect();
        assert_eq!(facts, parse_audit_line(&one_line).unwrap());
        assert_eq!(facts[0].verb, "patch", "the RequestReceived item has none");

        let line = STATUS_UPDATES.lines().nth(1).unwrap();
        let Ok(AuditDocument::Event(Some(event))) = read_audit(line) else {
            panic!("a counted event")
        };
        assert_eq!(*event, facts_of(line)[0]);
    }

    #[test]
    fn members_are_read_as_a_json_pointer_reads_them() {
        let event = |members: &str| {
            let line = format!(
                r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","stageTimestamp":"2024-05-01T12:00:00Z",{members}}}"#
            );
            parse_audit_line(&line).map(|facts| facts[0].clone())
        };
        let repeated = event(r#""verb":"get","user":{"username":"a"},"verb":"update","user":7"#);
        let repeated = repeated.unwrap();
        assert_eq!(
            (repeated.verb.as_str(), repeated.user.as_str()),
            ("update", "")
        );
        let escaped = event(r#""ver\u0062":"p\u0061tch""#).unwrap();
        assert_eq!(escaped.verb, "patch");
        let status = event(r#""responseStatus":{"code":409.0,"reason":"Conflict"}"#).unwrap();
        assert_eq!(status.code, None);
        // What a reader of the whole text refuses is refused, even where no fact is read.
        for undecodable in [
            r#""x":"\ud800""#,
            r#""x":[1e400]"#,
            &format!(r#""x":{}{}"#, "[".repeat(200), "]".repeat(200)),
        ] {
            let refused = event(undecodable).unwrap_err();
            assert!(refused.starts_with("not JSON"), "{refused}");
        }
        assert!(event(r#""x":"\ud83d\ude00","verb":"get""#).is_ok());
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
