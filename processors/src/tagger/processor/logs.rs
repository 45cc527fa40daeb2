//! Log records: each read by the formats, joined with the stack-trace lines and JSON
//! pieces that follow it, completed from the records around it and written as attributes.

use opscope_model::attributes::{array_value, get_str, insert, set, set_str, string_value};
use opscope_model::kubernetes::api_call::api_call_from_text;
use opscope_model::semconv::{
    API_NAME, API_SUBRESOURCE, OBJECT_DELETION_TIMESTAMP, OBJECT_FINALIZERS, OBJECT_KIND,
    OBJECT_NAME, OBJECT_NAMESPACE, OPSCOPE_RECORD, RECONCILE_ERROR, RECONCILE_REQUEUE_AFTER,
    RECONCILE_RESULT, RECORD_RECONCILE,
};
use opscope_model::timestamp::format_rfc3339;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use opscope_proto::otlp::logs::v1::{LogRecord, SeverityNumber};

use super::audit_records::{audit_events, audit_record};
use super::{OperatorTagger, write_api_call, write_context, write_stated_api_call};
use crate::tagger::conflict::find_conflict;
use crate::tagger::formats::{
    LogFacts, LogFormat, LogOutcome, OpenJson, is_continuation, joined_is_object,
    recognize_line_with,
};
use crate::tagger::otlp_fields::facts_from_attributes;

impl OperatorTagger {
    /// Tags each record; joins stack-trace lines to the record they follow and
    /// splits audit event lists into one record per event.
    pub(super) fn tag_log_records(&mut self, records: Vec<LogRecord>) -> Vec<LogRecord> {
        let mut tagged: Vec<LogRecord> = Vec::with_capacity(records.len());
        // The records of a JSON object still open, with their text so far.
        let mut open: Option<(Vec<LogRecord>, String, OpenJson)> = None;
        for mut record in records {
            let body = body_text(&record).map(str::to_string);
            if let Some((parts, joined, json)) = &mut open
                && let Some(text) = &body
                && !json.ends_before(text, joined.len())
            {
                joined.push_str(text);
                parts.push(record);
                if json.feed(text)
                    && let Some((parts, joined, _)) = open.take()
                {
                    self.tag_joined(parts, joined, &mut tagged);
                }
                continue;
            }
            if let Some((parts, joined, _)) = open.take() {
                self.tag_joined(parts, joined, &mut tagged);
            }
            if let Some(text) = &body
                && let Some(json) = OpenJson::opened_by(text)
            {
                open = Some((vec![record], text.clone(), json));
                continue;
            }
            if let Some(text) = &body {
                if is_continuation(text)
                    && let Some(previous) = tagged.last_mut().filter(|p| joins(p))
                    && append_line(previous, text)
                {
                    // A Java exception's message may name the failed call and its 409.
                    if get_str(&previous.attributes, API_NAME).is_none() {
                        if let Some(call) = api_call_from_text(text) {
                            write_api_call(&mut previous.attributes, &call);
                        }
                        if let Some(conflict) = find_conflict(text) {
                            self.write_record_conflict(
                                &mut previous.attributes,
                                &conflict,
                                Some(text),
                                "",
                            );
                        }
                    }
                    continue;
                }
                if text.contains("\"auditID\"")
                    && let Some(events) = audit_events(text)
                {
                    // Each event has a body of its own: the list's is not copied to each.
                    record.body = None;
                    tagged.extend(
                        events
                            .into_iter()
                            .map(|(body, facts)| audit_record(&record, body, facts.as_ref())),
                    );
                    continue;
                }
            }
            self.tag_log_record(&mut record, body.as_deref());
            tagged.push(record);
        }
        if let Some((parts, joined, _)) = open.take() {
            self.tag_joined(parts, joined, &mut tagged);
        }
        // The records of one batch inform each other: an object named in part early
        // in it takes what later records said of it whole.
        for record in &mut tagged {
            self.complete_from_batch(record);
        }
        tagged
    }

    /// Fills the Kind or namespace a tagged record's object still lacks from the
    /// objects remembered since it was tagged.
    pub(super) fn complete_from_batch(&self, record: &mut LogRecord) {
        let attributes = &record.attributes;
        let Some(name) = get_str(attributes, OBJECT_NAME) else {
            return;
        };
        let kind = get_str(attributes, OBJECT_KIND);
        let namespace = get_str(attributes, OBJECT_NAMESPACE);
        if kind.is_some() && namespace.is_some() {
            return;
        }
        let objects = self.objects();
        let message = body_text(record).unwrap_or_default();
        let found_kind = match kind {
            Some(_) => None,
            None => objects.kind_of(namespace, name, message),
        };
        let found_namespace = match namespace {
            Some(_) => None,
            None => kind
                .or(found_kind)
                .and_then(|kind| objects.namespace_of(kind, name)),
        };
        let found = [
            (OBJECT_KIND, found_kind.map(str::to_string)),
            (OBJECT_NAMESPACE, found_namespace.map(str::to_string)),
        ];
        drop(objects);
        for (key, value) in found {
            if let Some(value) = value {
                set_str(&mut record.attributes, key, &value);
            }
        }
    }

    /// Tags the records of a JSON object cut across lines (see [`OpenJson`]) as one
    /// when their text joins into an object, else each as it is.
    pub(super) fn tag_joined(
        &mut self,
        mut parts: Vec<LogRecord>,
        joined: String,
        tagged: &mut Vec<LogRecord>,
    ) {
        if parts.len() > 1 && joined_is_object(&joined) {
            parts.truncate(1);
            if let Some(mut record) = parts.pop() {
                self.tag_log_record(&mut record, Some(&joined));
                record.body = Some(AnyValue {
                    value: Some(Value::StringValue(joined)),
                });
                tagged.push(record);
            }
            return;
        }
        for mut record in parts {
            let body = body_text(&record).map(str::to_string);
            self.tag_log_record(&mut record, body.as_deref());
            tagged.push(record);
        }
    }

    pub(super) fn tag_log_record(&mut self, record: &mut LogRecord, body: Option<&str>) {
        let mut facts = body
            .map(|text| recognize_line_with(text, &self.formats))
            .unwrap_or_default();
        if facts.zoneless_time
            && self.utc_offset != 0
            && let Some(time) = facts.time_unix_nano
        {
            let shift = self.utc_offset.unsigned_abs().saturating_mul(1_000_000_000);
            facts.time_unix_nano = Some(if self.utc_offset > 0 {
                time.saturating_sub(shift)
            } else {
                time.saturating_add(shift)
            });
        }
        facts_from_attributes(&record.attributes, &mut facts);
        if record.time_unix_nano == 0 {
            record.time_unix_nano = facts.time_unix_nano.unwrap_or(0);
        }
        if record.severity_number == 0
            && let Some(level) = facts.level
        {
            record.severity_number = level.severity_number();
            record.severity_text = level.name().to_string();
        }
        let conflict = facts
            .error
            .as_deref()
            .and_then(find_conflict)
            .or_else(|| find_conflict(&facts.message))
            // klog's unkeyed values, a console line's cut context; a JSON line's fields
            // were all read.
            .or_else(|| {
                body.filter(|_| facts.format != LogFormat::ControllerRuntimeJson)
                    .and_then(find_conflict)
            });
        let time = facts.time_unix_nano.unwrap_or(record.time_unix_nano);
        self.complete_from_controller(&mut facts, conflict.as_ref(), time);
        let deletion = self.deletion_state(&facts, time);
        let attributes = &mut record.attributes;
        if let Some((deleted_at, finalizers)) = deletion {
            if let Some(deleted_at) = deleted_at {
                insert(
                    attributes,
                    OBJECT_DELETION_TIMESTAMP,
                    string_value(format_rfc3339(deleted_at).as_str()),
                );
            }
            insert(attributes, OBJECT_FINALIZERS, array_value(finalizers));
        }
        if let Some(context) = self.traces().get(&record.trace_id) {
            write_context(attributes, context.names());
        }
        write_log_facts(attributes, &facts);
        // client-go and kube-apiserver request lines are API calls, with their object.
        if let Some(call) = body.and_then(api_call_from_text) {
            write_api_call(attributes, &call);
        } else if facts.api_code.is_some() || facts.api_verb.is_some() {
            write_stated_api_call(attributes, &facts);
        } else if tells_own_status_write(&facts) {
            // `Updating zookeeper status`: a successful update of the object's status.
            facts.api_verb = Some("update".to_string());
            facts.api_code = Some(200);
            write_stated_api_call(attributes, &facts);
            set_str(attributes, API_SUBRESOURCE, "status");
        }
        if let Some(conflict) = conflict {
            self.write_record_conflict(attributes, &conflict, body, &facts.message);
        }
    }
}

pub(super) fn write_log_facts(attributes: &mut Vec<KeyValue>, facts: &LogFacts) {
    write_context(
        attributes,
        [
            &facts.reconcile_id,
            &facts.controller,
            &facts.group,
            &facts.kind,
            &facts.namespace,
            &facts.name,
        ]
        .map(|found| found.as_deref().unwrap_or_default()),
    );
    let has_object = get_str(attributes, OBJECT_NAME).is_some();
    if let Some(outcome) = &facts.outcome {
        let (result, after) = match outcome {
            LogOutcome::Ok => ("ok", None),
            LogOutcome::Error => ("error", None),
            LogOutcome::Requeue => ("requeue", None),
            LogOutcome::RequeueAfter(delay) => ("requeue_after", Some(delay.as_secs_f64())),
        };
        set_str(attributes, RECONCILE_RESULT, result);
        if let Some(seconds) = after {
            set(
                attributes,
                RECONCILE_REQUEUE_AFTER,
                Value::DoubleValue(seconds),
            );
        }
        if has_object {
            insert(attributes, OPSCOPE_RECORD, string_value(RECORD_RECONCILE));
        }
    }
    // A start line stands for its reconcile when the controller logs no end lines.
    if facts.starts_reconcile && has_object {
        insert(attributes, OPSCOPE_RECORD, string_value(RECORD_RECONCILE));
    }
    if let Some(error) = &facts.error {
        insert(attributes, RECONCILE_ERROR, string_value(error.as_str()));
    }
}

pub(super) fn body_text(record: &LogRecord) -> Option<&str> {
    match record.body.as_ref()?.value.as_ref()? {
        Value::StringValue(text) => Some(text),
        _ => None,
    }
}

/// Stack-trace lines belong to the error record they follow.
pub(super) fn joins(previous: &LogRecord) -> bool {
    previous.severity_number >= SeverityNumber::Error as i32
}

/// Longest record a joined stack trace may grow to.
pub(super) const MAX_JOINED_BYTES: usize = 64 * 1024;
/// Appends a line to a record's body; a line that would make it too long is left
/// to stand as a record of its own.
pub(super) fn append_line(record: &mut LogRecord, line: &str) -> bool {
    match record.body.as_mut().and_then(|b| b.value.as_mut()) {
        Some(Value::StringValue(body)) if body.len() + line.len() < MAX_JOINED_BYTES => {
            body.push('\n');
            body.push_str(line);
            true
        }
        _ => false,
    }
}

/// Whether a record that is no reconcile's start or end tells of a write of its
/// object's status.
fn tells_own_status_write(facts: &LogFacts) -> bool {
    facts.status_write
        && facts.outcome.is_none()
        && !facts.starts_reconcile
        && facts.kind.is_some()
        && facts.name.is_some()
}
