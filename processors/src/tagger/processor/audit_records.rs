//! Audit events carried as log lines: one record per event, each tagged with the
//! call and the object state it shows.

use opscope_model::attributes::{array_value, set, set_str, string_value};
use opscope_model::kubernetes::audit::{AuditDocument, AuditFacts, read_audit};
use opscope_model::semconv::{
    API_ACTOR, API_GROUP, API_KIND, API_NAME, API_NAMESPACE, API_RESOURCE, API_SUBRESOURCE,
    API_VERB, HTTP_RESPONSE_STATUS_CODE, OBJECT_DELETION_TIMESTAMP, OBJECT_FINALIZERS,
    OBJECT_GENERATION, OBJECT_GONE, OBJECT_GROUP, OBJECT_KIND, OBJECT_NAME, OBJECT_NAMESPACE,
    OBJECT_OBSERVED_GENERATION, OBJECT_RESOURCE, OBJECT_RESOURCE_VERSION, OBJECT_STATUS_DIGEST,
    OPSCOPE_RECORD, RECORD_API_CALL, RECORD_OBJECT_STATE,
};
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use opscope_proto::otlp::logs::v1::LogRecord;

use super::write_conflict;
use crate::tagger::conflict::find_conflict;

/// The events of an audit body, each with the body of its record and its facts
/// (`None` for a stage that does not count, such as `RequestReceived`: passed on
/// untagged, not dropped), from one reading of the body. An `EventList` is split
/// into one `Event` per item, so that a record tagged again downstream is not split
/// again. `None` for no audit body.
pub(super) fn audit_events(text: &str) -> Option<Vec<(String, Option<AuditFacts>)>> {
    match read_audit(text).ok()? {
        AuditDocument::Event(facts) => Some(vec![(text.to_string(), facts.map(|facts| *facts))]),
        AuditDocument::List(events) => Some(
            events
                .into_iter()
                .map(|(event, facts)| (event.to_string(), facts))
                .collect(),
        ),
    }
}

/// The record of one audit event with its own body, keeping the source record's
/// resource-level context; tagged when the event counts.
pub(super) fn audit_record(
    source: &LogRecord,
    body: String,
    event: Option<&AuditFacts>,
) -> LogRecord {
    let mut record = LogRecord {
        body: Some(AnyValue {
            value: Some(string_value(body)),
        }),
        ..source.clone()
    };
    let Some(event) = event else {
        return record;
    };
    record.time_unix_nano = event.time_unix_nano;
    write_audit_call(&mut record.attributes, event);
    record
}

/// The attributes of the call and the object state an audit event (or an object's
/// watch event, told as one) shows: what the correlator reads of it.
pub fn write_audit_call(attributes: &mut Vec<KeyValue>, event: &AuditFacts) {
    set_str(attributes, API_ACTOR, &event.user);
    set_str(attributes, API_VERB, &event.verb);
    for (api_key, object_key, value) in [
        (API_GROUP, OBJECT_GROUP, &event.group),
        (API_RESOURCE, OBJECT_RESOURCE, &event.resource),
        (API_NAMESPACE, OBJECT_NAMESPACE, &event.namespace),
        (API_NAME, OBJECT_NAME, &event.name),
        (API_KIND, OBJECT_KIND, &event.kind),
    ] {
        if !value.is_empty() {
            set_str(attributes, api_key, value);
            set_str(attributes, object_key, value);
        }
    }
    if !event.subresource.is_empty() {
        set_str(attributes, API_SUBRESOURCE, &event.subresource);
    }
    if let Some(code) = event.code {
        set(
            attributes,
            HTTP_RESPONSE_STATUS_CODE,
            Value::IntValue(i64::from(code)),
        );
    }
    write_audit_state(attributes, event);
    if let Some(conflict) = event.conflict_message.as_deref().and_then(find_conflict) {
        write_conflict(attributes, &conflict);
    }
}

pub(super) fn write_audit_state(attributes: &mut Vec<KeyValue>, event: &AuditFacts) {
    let mut shows_state = false;
    for (key, value) in [
        (OBJECT_GENERATION, event.generation),
        (OBJECT_OBSERVED_GENERATION, event.observed_generation),
    ] {
        if let Some(value) = value {
            set(attributes, key, Value::IntValue(value));
            shows_state = true;
        }
    }
    if let Some(version) = &event.resource_version {
        set_str(attributes, OBJECT_RESOURCE_VERSION, version);
    }
    if let Some(deleted) = &event.deletion_timestamp {
        set_str(attributes, OBJECT_DELETION_TIMESTAMP, deleted);
        shows_state = true;
    }
    if let Some(finalizers) = &event.finalizers {
        set(
            attributes,
            OBJECT_FINALIZERS,
            array_value(finalizers.iter().cloned()),
        );
        shows_state = true;
    }
    if !event.status_digest.is_empty() {
        set(
            attributes,
            OBJECT_STATUS_DIGEST,
            array_value(event.status_digest.iter().cloned()),
        );
    }
    if shows_state {
        set_str(attributes, OPSCOPE_RECORD, RECORD_OBJECT_STATE);
    } else {
        set_str(attributes, OPSCOPE_RECORD, RECORD_API_CALL);
    }
    // Gone only when the response shows the object without finalizers: an event that
    // shows no object (Metadata level, a `Status` body) does not say, and the object
    // may still be waiting on its finalizers.
    let deleted = event.verb == "delete" && event.code.is_some_and(|c| (200..300).contains(&c));
    if deleted && event.finalizers.as_ref().is_some_and(Vec::is_empty) {
        set(attributes, OBJECT_GONE, Value::BoolValue(true));
    }
}
