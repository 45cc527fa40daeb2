//! Audit events as OTLP log records: one record per event, its body the event's JSON
//! (the operator_tagger reads the API call and the object from it), its time the event's.

use opscope_model::attributes::{set_str, string_value};
use opscope_model::semconv::{LOG_SOURCE, SERVICE_NAME};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, InstrumentationScope};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;

use opscope_model::kubernetes::audit::AuditEvent;

/// `service.name` of the records: the API server's audit stream.
pub const AUDIT_SERVICE_NAME: &str = "kube-apiserver-audit";
const SCOPE_NAME: &str = "opscope/k8s_audit";

/// One request holding a record per event, under one resource.
pub fn audit_logs(events: &[AuditEvent<'_>], observed_unix_nano: u64) -> ExportLogsServiceRequest {
    let mut resource = Resource::default();
    set_str(&mut resource.attributes, SERVICE_NAME, AUDIT_SERVICE_NAME);
    let log_records = events
        .iter()
        .map(|event| audit_record(event, observed_unix_nano))
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.into(),
                    ..Default::default()
                }),
                log_records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The record of one event; its audit id is the evidence a signal points to.
fn audit_record(event: &AuditEvent<'_>, observed_unix_nano: u64) -> LogRecord {
    let audit_id = &event.header.audit_id;
    let mut attributes = Vec::new();
    if !audit_id.is_empty() {
        set_str(&mut attributes, LOG_SOURCE, &format!("audit {audit_id}"));
    }
    LogRecord {
        time_unix_nano: event.time_unix_nano(),
        observed_time_unix_nano: observed_unix_nano,
        body: Some(AnyValue {
            value: Some(string_value(event.body())),
        }),
        attributes,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::attributes::get_str;
    use opscope_model::kubernetes::audit::EventList;
    use opscope_proto::otlp::common::v1::any_value::Value;

    #[test]
    fn one_record_per_event_with_its_time_body_and_audit_id() {
        let body = br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[
            {"auditID":"a-1","stage":"ResponseComplete","verb":"update","stageTimestamp":"2024-05-01T12:00:00.5Z"},
            {"stage":"ResponseComplete","verb":"get"}]}"#;
        let list = EventList::parse(body, 100).unwrap();
        let request = audit_logs(&list.events().unwrap(), 42);
        let [resource_logs] = request.resource_logs.as_slice() else {
            panic!("one resource")
        };
        let resource = resource_logs.resource.as_ref().unwrap();
        assert_eq!(
            get_str(&resource.attributes, SERVICE_NAME),
            Some(AUDIT_SERVICE_NAME)
        );
        let records = &resource_logs.scope_logs[0].log_records;
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].time_unix_nano, 1_714_564_800_500_000_000);
        assert_eq!(records[0].observed_time_unix_nano, 42);
        assert_eq!(
            get_str(&records[0].attributes, LOG_SOURCE),
            Some("audit a-1")
        );
        let Some(Value::StringValue(text)) =
            records[0].body.as_ref().and_then(|b| b.value.as_ref())
        else {
            panic!("a string body")
        };
        assert!(
            text.starts_with(r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a-1""#)
        );
        assert_eq!(records[1].time_unix_nano, 0);
        assert!(records[1].attributes.is_empty());
    }
}
