//! Operator log lines: every line through the format recognition (controller-runtime
//! JSON and console, kube-rs, klog, logfmt, plain) and the stack-trace continuation
//! test, then all lines as one batch of log records through the tagger, which joins
//! continuations onto the record before them.

#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_processors::tagger::formats::{LogFacts, is_continuation, recognize_line};
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, any_value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};

/// Every text the facts hold comes from the line, so none is longer than it.
fn assert_bounded(facts: &LogFacts, line: &str) {
    let texts = [
        Some(&facts.message),
        facts.logger.as_ref(),
        facts.reconcile_id.as_ref(),
        facts.controller.as_ref(),
        facts.group.as_ref(),
        facts.kind.as_ref(),
        facts.namespace.as_ref(),
        facts.name.as_ref(),
        facts.error.as_ref(),
    ];
    for text in texts.into_iter().flatten() {
        assert!(text.len() <= line.len(), "{text:?} is longer than {line:?}");
    }
}

fn logs_request(lines: &[&str]) -> ExportLogsServiceRequest {
    let log_records = lines
        .iter()
        .map(|line| LogRecord {
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(line.to_string())),
            }),
            ..LogRecord::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

fn record_count(request: &ExportLogsServiceRequest) -> usize {
    request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum()
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.lines().collect();
    for line in &lines {
        let mut facts = recognize_line(line);
        assert_bounded(&facts, line);
        facts.infer_outcome();
        is_continuation(line);
    }
    let mut request = logs_request(&lines);
    OperatorTagger::new(&TaggerConfig::default()).tag_logs(&mut request);
    let records = record_count(&request);
    assert!(
        records <= lines.len(),
        "{records} records of {} lines",
        lines.len()
    );
});
