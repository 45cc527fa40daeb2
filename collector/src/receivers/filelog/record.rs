//! The OTLP shape of what the receiver reads: a log record per container record
//! (body, runtime time, stream, file and line), one request per file and batch.

use opscope_model::semconv::LOG_SOURCE;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;

use super::cri::Stream;
use super::pod::string_attribute;

pub const LOG_IOSTREAM: &str = "log.iostream";
pub const LOG_FILE_PATH: &str = "log.file.path";
/// `true` on each part of a record longer than `max_log_size`, and on a record sent
/// before its end was written (`force_flush_period`).
pub const LOG_SPLIT: &str = "opscope.log.split";

/// A container record put together from its pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembled {
    pub stream: Stream,
    pub time_unix_nano: u64,
    /// The number of the file line its first piece is on.
    pub line: u64,
    pub content: String,
    pub split: bool,
}

/// The records of one file's batch, with the file's resource, as one request.
pub fn logs_request(
    resource: &Resource,
    path: &str,
    records: Vec<Assembled>,
    observed_unix_nano: u64,
) -> ExportLogsServiceRequest {
    let log_records = records
        .into_iter()
        .map(|record| log_record(record, path, observed_unix_nano))
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource.clone()),
            scope_logs: vec![ScopeLogs {
                log_records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn log_record(record: Assembled, path: &str, observed_unix_nano: u64) -> LogRecord {
    let mut attributes = vec![
        string_attribute(LOG_IOSTREAM, record.stream.name()),
        string_attribute(LOG_FILE_PATH, path),
        string_attribute(LOG_SOURCE, &format!("{path}:{}", record.line)),
    ];
    if record.split {
        attributes.push(KeyValue {
            key: LOG_SPLIT.to_string(),
            value: Some(AnyValue {
                value: Some(any_value::Value::BoolValue(true)),
            }),
            ..Default::default()
        });
    }
    LogRecord {
        time_unix_nano: record.time_unix_nano,
        observed_time_unix_nano: observed_unix_nano,
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(record.content)),
        }),
        attributes,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_carries_body_time_stream_file_and_line() {
        let resource = Resource::default();
        let record = Assembled {
            stream: Stream::Stderr,
            time_unix_nano: 7,
            line: 42,
            content: "E0501 boom".into(),
            split: true,
        };
        let request = logs_request(&resource, "/p/0.log", vec![record], 9);
        let records = &request.resource_logs[0].scope_logs[0].log_records;
        assert_eq!(records.len(), 1);
        let log = &records[0];
        assert_eq!((log.time_unix_nano, log.observed_time_unix_nano), (7, 9));
        let text = |kv: &KeyValue| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            Some(any_value::Value::BoolValue(b)) => b.to_string(),
            _ => String::new(),
        };
        let attributes: Vec<(String, String)> = log
            .attributes
            .iter()
            .map(|kv| (kv.key.clone(), text(kv)))
            .collect();
        assert_eq!(
            attributes,
            [
                (LOG_IOSTREAM.into(), "stderr".into()),
                (LOG_FILE_PATH.into(), "/p/0.log".into()),
                (LOG_SOURCE.into(), "/p/0.log:42".into()),
                (LOG_SPLIT.into(), "true".into()),
            ]
        );
    }
}
