//! OTLP requests built in code, readable in a test: the tagger's and the
//! correlator's tests build their batches with these.

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::span::Event;
use opscope_proto::otlp::trace::v1::status::StatusCode;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use opscope_model::attributes::{get_str, set, set_str};

/// 2024-05-01T12:00:00Z, the time of the fixtures.
pub(crate) const T0: u64 = 1_714_564_800_000_000_000;
pub(crate) const MS: u64 = 1_000_000;

/// Trace `n`: sixteen bytes `n`.
pub(crate) fn trace_id(n: u8) -> Vec<u8> {
    vec![n; 16]
}

/// Span `n`: eight bytes `n`, in hex `0n0n0n0n0n0n0n0n`.
pub(crate) fn span_id(n: u8) -> Vec<u8> {
    vec![n; 8]
}

pub(crate) fn attributes(pairs: &[(&str, &str)]) -> Vec<KeyValue> {
    let mut attributes = Vec::new();
    for (key, value) in pairs {
        set_str(&mut attributes, key, value);
    }
    attributes
}

fn resource(pairs: &[(&str, &str)]) -> Option<Resource> {
    Some(Resource {
        attributes: attributes(pairs),
        ..Default::default()
    })
}

fn text(value: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(Value::StringValue(value.to_string())),
    })
}

/// A span under construction, 10 ms long from [`T0`].
pub(crate) struct SpanBuilder(Span);

pub(crate) fn span(name: &str) -> SpanBuilder {
    SpanBuilder(Span {
        name: name.to_string(),
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 10 * MS,
        ..Default::default()
    })
}

impl SpanBuilder {
    /// Span `id` of trace `trace`.
    pub(crate) fn ids(mut self, trace: u8, id: u8) -> Self {
        self.0.trace_id = trace_id(trace);
        self.0.span_id = span_id(id);
        self
    }

    pub(crate) fn parent(mut self, id: u8) -> Self {
        self.0.parent_span_id = span_id(id);
        self
    }

    pub(crate) fn attr(mut self, key: &str, value: &str) -> Self {
        set_str(&mut self.0.attributes, key, value);
        self
    }

    pub(crate) fn value(mut self, key: &str, value: Value) -> Self {
        set(&mut self.0.attributes, key, value);
        self
    }

    pub(crate) fn attrs(self, pairs: &[(&str, &str)]) -> Self {
        pairs
            .iter()
            .fold(self, |span, (key, value)| span.attr(key, value))
    }

    pub(crate) fn times(mut self, start: u64, end: u64) -> Self {
        self.0.start_time_unix_nano = start;
        self.0.end_time_unix_nano = end;
        self
    }

    /// Ended with status `Error` and `message`.
    pub(crate) fn failed(mut self, message: &str) -> Self {
        self.0.status = Some(Status {
            code: StatusCode::Error as i32,
            message: message.to_string(),
        });
        self
    }

    /// Recorded an error (`span.RecordError`): an `exception` event.
    pub(crate) fn exception(mut self, message: &str) -> Self {
        self.0.events.push(Event {
            name: "exception".into(),
            time_unix_nano: self.0.end_time_unix_nano,
            attributes: attributes(&[
                ("exception.type", "*errors.StatusError"),
                ("exception.message", message),
            ]),
            ..Default::default()
        });
        self
    }
}

/// A log record under construction.
pub(crate) struct LogBuilder(LogRecord);

/// When test records were observed, unless a test says otherwise: a record with
/// no time at all yields no events.
pub(crate) const OBSERVED: u64 = 1_714_564_799_000_000_000;

pub(crate) fn log(body: &str) -> LogBuilder {
    LogBuilder(LogRecord {
        body: text(body),
        observed_time_unix_nano: OBSERVED,
        ..Default::default()
    })
}

impl LogBuilder {
    pub(crate) fn trace(mut self, trace: u8) -> Self {
        self.0.trace_id = trace_id(trace);
        self
    }

    /// A trace id of any length, as a malformed record may carry.
    pub(crate) fn trace_bytes(mut self, trace: &[u8]) -> Self {
        self.0.trace_id = trace.to_vec();
        self
    }

    pub(crate) fn attr(mut self, key: &str, value: &str) -> Self {
        set_str(&mut self.0.attributes, key, value);
        self
    }

    pub(crate) fn value(mut self, key: &str, value: Value) -> Self {
        set(&mut self.0.attributes, key, value);
        self
    }

    pub(crate) fn attrs(self, pairs: &[(&str, &str)]) -> Self {
        pairs
            .iter()
            .fold(self, |record, (key, value)| record.attr(key, value))
    }

    pub(crate) fn time(mut self, time: u64) -> Self {
        self.0.time_unix_nano = time;
        self
    }

    pub(crate) fn observed(mut self, time: u64) -> Self {
        self.0.observed_time_unix_nano = time;
        self
    }

    pub(crate) fn severity(mut self, number: i32, text: &str) -> Self {
        self.0.severity_number = number;
        self.0.severity_text = text.to_string();
        self
    }
}

pub(crate) fn traces(
    resource_attributes: &[(&str, &str)],
    spans: impl IntoIterator<Item = SpanBuilder>,
) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: resource(resource_attributes),
            scope_spans: vec![ScopeSpans {
                spans: spans.into_iter().map(|s| s.0).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

pub(crate) fn logs(
    resource_attributes: &[(&str, &str)],
    records: impl IntoIterator<Item = LogBuilder>,
) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: resource(resource_attributes),
            scope_logs: vec![ScopeLogs {
                log_records: records.into_iter().map(|r| r.0).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// One record per line of `text`, as a file or container-log receiver sends them.
pub(crate) fn log_lines(
    resource_attributes: &[(&str, &str)],
    text: &str,
) -> ExportLogsServiceRequest {
    logs(resource_attributes, text.lines().map(log))
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(json: &str) -> T {
    serde_json::from_str(json).expect("a valid OTLP/JSON fixture")
}

pub(crate) fn all_spans(request: &ExportTraceServiceRequest) -> Vec<&Span> {
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect()
}

pub(crate) fn span_named<'a>(request: &'a ExportTraceServiceRequest, name: &str) -> &'a Span {
    all_spans(request)
        .into_iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no span {name:?}"))
}

pub(crate) fn all_records(request: &ExportLogsServiceRequest) -> Vec<&LogRecord> {
    request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| &s.log_records)
        .collect()
}

pub(crate) fn body_of(record: &LogRecord) -> &str {
    match record.body.as_ref().and_then(|b| b.value.as_ref()) {
        Some(Value::StringValue(body)) => body,
        other => panic!("no text body: {other:?}"),
    }
}

/// Asserts that each key has the string value given.
#[track_caller]
pub(crate) fn assert_strings(attributes: &[KeyValue], expected: &[(&str, &str)]) {
    for (key, value) in expected {
        assert_eq!(
            get_str(attributes, key),
            Some(*value),
            "{key} in {attributes:#?}"
        );
    }
}

/// Asserts that none of the keys is set.
#[track_caller]
pub(crate) fn assert_unset(attributes: &[KeyValue], keys: &[&str]) {
    for key in keys {
        assert!(
            !attributes.iter().any(|kv| kv.key == *key),
            "{key} is set in {attributes:#?}"
        );
    }
}
