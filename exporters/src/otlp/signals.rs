//! Signals as OTLP: each state change is a span `opscope.signal <name>` linked to the
//! evidence spans (so a trace UI such as Jaeger leads from the signal to the
//! offending reconciles) and a log record whose body is the signal as JSON.

use opscope_model::hash::fnv1a;
use opscope_model::signal::evidence_reference;
use opscope_model::signal::{Severity, Signal, SignalState};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value::Value,
};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::span::{Link, SpanKind};
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, status::StatusCode};

use crate::batch::SignalBatch;

const SCOPE: &str = "opscope.correlator";

pub fn signal_spans(batch: &SignalBatch) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(opscope_resource()),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope()),
                spans: batch.0.iter().map(signal_span).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

pub fn signal_logs(batch: &SignalBatch) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(opscope_resource()),
            scope_logs: vec![ScopeLogs {
                scope: Some(scope()),
                log_records: batch.0.iter().map(signal_log).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// One trace per signal (its id derived from the signal's), one span per change.
fn signal_span(signal: &Signal) -> Span {
    let state = state_name(signal.state);
    Span {
        trace_id: trace_id(&signal.id),
        span_id: fnv1a(format!("{}/{state}/{}", signal.id, signal.last_seen).as_bytes())
            .to_be_bytes()
            .to_vec(),
        name: format!("opscope.signal {}", signal.signal.name()),
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: signal.first_seen,
        end_time_unix_nano: signal.last_seen.max(signal.first_seen),
        attributes: attributes(signal),
        links: signal
            .evidence
            .iter()
            .filter_map(|e| evidence_link(e))
            .collect(),
        status: Some(Status {
            code: StatusCode::Error as i32,
            message: format!(
                "{} {}: {}",
                signal.signal.name(),
                signal.cause,
                signal.object.display()
            ),
        }),
        ..Default::default()
    }
}

fn signal_log(signal: &Signal) -> LogRecord {
    let (severity_number, severity_text) = match signal.severity {
        Severity::Warning => (13, "WARN"),
        Severity::Critical => (17, "ERROR"),
    };
    LogRecord {
        time_unix_nano: signal.last_seen,
        observed_time_unix_nano: signal.last_seen,
        severity_number,
        severity_text: severity_text.to_string(),
        body: Some(AnyValue {
            value: Some(Value::StringValue(signal.to_json().to_string())),
        }),
        attributes: attributes(signal),
        trace_id: trace_id(&signal.id),
        ..Default::default()
    }
}

fn attributes(signal: &Signal) -> Vec<KeyValue> {
    let text = |key: &str, value: &str| attribute(key, Value::StringValue(value.to_string()));
    let mut attributes = vec![
        text("opscope.signal.id", &signal.id),
        text("opscope.signal.name", signal.signal.name()),
        text("opscope.signal.cause", &signal.cause),
        text("opscope.signal.severity", signal.severity.name()),
        text("opscope.signal.state", state_name(signal.state)),
        text("opscope.signal.hint", &signal.hint),
        text("operator.name", &signal.operator.name),
        text("k8s.namespace.name", &signal.operator.namespace),
        text("k8s.controller.name", &signal.controller),
        text("k8s.object.group", &signal.object.group),
        text(
            "k8s.object.kind",
            if signal.object.kind.is_empty() {
                &signal.object.resource
            } else {
                &signal.object.kind
            },
        ),
        text("k8s.object.namespace", &signal.object.namespace),
        text("k8s.object.name", &signal.object.name),
    ];
    attributes.retain(|kv| !matches!(&kv.value, Some(AnyValue { value: Some(Value::StringValue(s)) }) if s.is_empty()));
    attributes.extend(signal.figures.iter().map(|(name, value)| {
        attribute(
            &format!("opscope.signal.figure.{name}"),
            Value::DoubleValue(*value),
        )
    }));
    let evidence = signal
        .evidence
        .iter()
        .map(|e| AnyValue {
            value: Some(Value::StringValue(e.clone())),
        })
        .collect();
    attributes.push(attribute(
        "opscope.signal.evidence",
        Value::ArrayValue(ArrayValue { values: evidence }),
    ));
    attributes
}

/// A link to the span an evidence reference names (`trace <32 hex> span <16 hex>`).
fn evidence_link(evidence: &str) -> Option<Link> {
    let trace = evidence_reference(evidence, "trace")?;
    let span = evidence_reference(evidence, "span")?;
    Some(Link {
        trace_id: decode_hex(trace).filter(|id| id.len() == 16)?,
        span_id: decode_hex(span).filter(|id| id.len() == 8)?,
        ..Default::default()
    })
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect()
}

fn trace_id(signal_id: &str) -> Vec<u8> {
    let high = fnv1a(signal_id.as_bytes());
    let low = fnv1a(format!("{signal_id}#").as_bytes());
    [high.to_be_bytes(), low.to_be_bytes()].concat()
}

fn state_name(state: SignalState) -> &'static str {
    match state {
        SignalState::Firing => "firing",
        SignalState::Resolved => "resolved",
        SignalState::HandedOver => "handed_over",
    }
}

fn attribute(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn opscope_resource() -> Resource {
    Resource {
        attributes: vec![attribute(
            "service.name",
            Value::StringValue("opscope".into()),
        )],
        ..Default::default()
    }
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: SCOPE.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_spans_become_links() {
        let link = evidence_link("trace 5b8efff798038103d269b633813fc60c span eee19b7ec3c1b174")
            .expect("a link");
        assert_eq!(link.trace_id.len(), 16);
        assert_eq!(
            link.span_id,
            vec![0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74]
        );
        assert!(evidence_link("trace 5b8efff798038103d269b633813fc60c").is_none());
        assert!(evidence_link("manager/0.log:42").is_none());
        assert!(evidence_link("trace zz span zz").is_none());
        assert!(evidence_link("trace é span é").is_none());
    }

    #[test]
    fn one_trace_per_signal() {
        assert_eq!(
            trace_id("reconcile_loop:rayjobs/ml/train"),
            trace_id("reconcile_loop:rayjobs/ml/train")
        );
        assert_ne!(
            trace_id("reconcile_loop:rayjobs/ml/train"),
            trace_id("reconcile_loop:rayjobs/ml/other")
        );
    }
}
