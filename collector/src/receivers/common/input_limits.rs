//! Limits on what one OTLP request may carry (attributes per resource, scope and
//! record, key and value sizes, span events and links) and the lengths its trace
//! and span ids must have, checked once over the three request types; a request
//! over any limit or with a malformed id is refused whole, with the path of the
//! first offending element, so its sender learns what to fix. What a request may
//! decode into (`max_items`, `max_decoded_size_mib`) is checked on its bytes, before
//! decoding (`decode_budget`).

use opscope_model::config::{FieldError, Validate};
use opscope_model::{Telemetry, TelemetryKind};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::metrics::v1::{
    Exemplar, ExponentialHistogramDataPoint, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, SummaryDataPoint, metric::Data,
};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, span};
use opscope_proto::prost::Message;
use serde::Deserialize;

/// The `limits` settings of a receiver.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputLimits {
    /// Attributes of one resource, scope, span, event, link, log record or data point.
    pub max_attributes: usize,
    pub max_attribute_key_bytes: usize,
    /// Bytes of a string or bytes value; of the encoded value for arrays and maps.
    pub max_attribute_value_bytes: usize,
    pub max_span_events: usize,
    pub max_span_links: usize,
    /// Spans, log records or metric data points in one request, counted before it
    /// is decoded.
    pub max_items: usize,
    /// Memory one request may take once decoded, in MiB, estimated before decoding.
    pub max_decoded_size_mib: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        Self {
            max_attributes: 128,
            max_attribute_key_bytes: 1024,
            max_attribute_value_bytes: 64 * 1024,
            max_span_events: 1000,
            max_span_links: 1000,
            // 12 times the Collector's default batch; 100 000 empty spans decode to
            // about 30 MiB.
            max_items: 100_000,
            // A 20 MiB HTTP request of ordinary spans decodes to about 100 MiB.
            max_decoded_size_mib: 128,
        }
    }
}

impl Validate for InputLimits {
    fn validate(&self) -> Result<(), FieldError> {
        for (field, value) in [
            ("max_attributes", self.max_attributes),
            ("max_attribute_key_bytes", self.max_attribute_key_bytes),
            ("max_attribute_value_bytes", self.max_attribute_value_bytes),
            ("max_span_events", self.max_span_events),
            ("max_span_links", self.max_span_links),
            ("max_items", self.max_items),
            ("max_decoded_size_mib", self.max_decoded_size_mib),
        ] {
            if value == 0 {
                return Err(FieldError::new(
                    format!("limits.{field}"),
                    "must be at least 1",
                ));
            }
        }
        Ok(())
    }
}

/// Where a request goes over a limit, and which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct LimitViolation {
    /// E.g. `resource_spans[0].scope_spans[1].spans[7]`.
    pub path: String,
    pub problem: String,
    /// The `reason` label it is counted with.
    pub reason: &'static str,
}

/// The `reason` label of requests refused for going over the input limits.
pub const OVER_LIMITS: &str = "limits";
/// The `reason` label of requests refused for a trace or span id of the wrong length.
pub const INVALID_ID: &str = "invalid_id";

impl LimitViolation {
    fn new(problem: String) -> Self {
        Self {
            path: String::new(),
            problem,
            reason: OVER_LIMITS,
        }
    }

    fn invalid_id(problem: String) -> Self {
        Self {
            path: String::new(),
            problem,
            reason: INVALID_ID,
        }
    }

    /// The violation seen from the element holding this one at `segment`.
    fn within(mut self, segment: &str) -> Self {
        self.path = if self.path.is_empty() {
            segment.to_string()
        } else if self.path.starts_with('[') {
            format!("{segment}{}", self.path)
        } else {
            format!("{segment}.{}", self.path)
        };
        self
    }
}

/// An OTLP request whose contents can be checked against [`InputLimits`].
pub trait WithinLimits {
    fn check_limits(&self, limits: &InputLimits) -> Result<(), LimitViolation>;
}

impl<T> WithinLimits for T
where
    T: Telemetry,
    T::ResourceData: Checked,
{
    fn check_limits(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        let field = match T::KIND {
            TelemetryKind::Traces => "resource_spans",
            TelemetryKind::Logs => "resource_logs",
            TelemetryKind::Metrics => "resource_metrics",
        };
        each(field, self.resource_data(), limits)
    }
}

/// One element of the OTLP model that holds attributes or other elements.
pub trait Checked {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation>;
}

fn each<C: Checked>(field: &str, items: &[C], limits: &InputLimits) -> Result<(), LimitViolation> {
    for (index, item) in items.iter().enumerate() {
        item.check(limits)
            .map_err(|violation| violation.within(&format!("{field}[{index}]")))?;
    }
    Ok(())
}

fn count(what: &str, found: usize, limit: usize, setting: &str) -> Result<(), LimitViolation> {
    if found > limit {
        return Err(LimitViolation::new(format!(
            "{found} {what}, more than {setting} {limit}"
        )));
    }
    Ok(())
}

/// The lengths OTLP gives trace and span ids.
const TRACE_ID_BYTES: usize = 16;
const SPAN_ID_BYTES: usize = 8;

/// Whether an id has its length: `optional` ids may also be empty. Collectors and
/// Jaeger refuse a whole batch over one malformed id, so it is refused here, where
/// only its sender's request is lost.
fn id(field: &str, id: &[u8], bytes: usize, optional: bool) -> Result<(), LimitViolation> {
    if id.len() == bytes || (optional && id.is_empty()) {
        return Ok(());
    }
    let allowed = if optional {
        format!("{bytes} bytes or empty")
    } else {
        format!("{bytes} bytes")
    };
    Err(LimitViolation::invalid_id(format!(
        "{field} of {} bytes, must be {allowed}",
        id.len()
    )))
}

fn attributes(
    field: &str,
    attributes: &[KeyValue],
    limits: &InputLimits,
) -> Result<(), LimitViolation> {
    count(
        "attributes",
        attributes.len(),
        limits.max_attributes,
        "max_attributes",
    )?;
    for (index, attribute) in attributes.iter().enumerate() {
        let at = || format!("{field}[{index}]");
        let key_bytes = attribute.key.len();
        if key_bytes > limits.max_attribute_key_bytes {
            return Err(LimitViolation::new(format!(
                "key of {key_bytes} bytes, more than max_attribute_key_bytes {}",
                limits.max_attribute_key_bytes
            ))
            .within(&at()));
        }
        let value_bytes = attribute.value.as_ref().map_or(0, value_size);
        if value_bytes > limits.max_attribute_value_bytes {
            return Err(LimitViolation::new(format!(
                "value of {key:?} has {value_bytes} bytes, more than max_attribute_value_bytes {}",
                limits.max_attribute_value_bytes,
                key = attribute.key,
            ))
            .within(&at()));
        }
    }
    Ok(())
}

/// A string's or bytes' length; the encoded size of an array or a map, so that
/// nested values are bounded too.
fn value_size(value: &AnyValue) -> usize {
    match &value.value {
        Some(any_value::Value::StringValue(text)) => text.len(),
        Some(any_value::Value::BytesValue(bytes)) => bytes.len(),
        Some(any_value::Value::ArrayValue(array)) => array.encoded_len(),
        Some(any_value::Value::KvlistValue(map)) => map.encoded_len(),
        _ => 0,
    }
}

fn resource(resource: Option<&Resource>, limits: &InputLimits) -> Result<(), LimitViolation> {
    resource.map_or(Ok(()), |resource| {
        attributes("attributes", &resource.attributes, limits)
            .map_err(|violation| violation.within("resource"))
    })
}

fn scope(scope: Option<&InstrumentationScope>, limits: &InputLimits) -> Result<(), LimitViolation> {
    scope.map_or(Ok(()), |scope| {
        attributes("attributes", &scope.attributes, limits)
            .map_err(|violation| violation.within("scope"))
    })
}

impl Checked for ResourceSpans {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        resource(self.resource.as_ref(), limits)?;
        each("scope_spans", &self.scope_spans, limits)
    }
}

impl Checked for ScopeSpans {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        scope(self.scope.as_ref(), limits)?;
        each("spans", &self.spans, limits)
    }
}

impl Checked for Span {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        id("trace_id", &self.trace_id, TRACE_ID_BYTES, false)?;
        id("span_id", &self.span_id, SPAN_ID_BYTES, false)?;
        id("parent_span_id", &self.parent_span_id, SPAN_ID_BYTES, true)?;
        attributes("attributes", &self.attributes, limits)?;
        count(
            "events",
            self.events.len(),
            limits.max_span_events,
            "max_span_events",
        )?;
        count(
            "links",
            self.links.len(),
            limits.max_span_links,
            "max_span_links",
        )?;
        each("events", &self.events, limits)?;
        each("links", &self.links, limits)
    }
}

impl Checked for span::Event {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        attributes("attributes", &self.attributes, limits)
    }
}

impl Checked for span::Link {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        id("trace_id", &self.trace_id, TRACE_ID_BYTES, false)?;
        id("span_id", &self.span_id, SPAN_ID_BYTES, false)?;
        attributes("attributes", &self.attributes, limits)
    }
}

impl Checked for ResourceLogs {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        resource(self.resource.as_ref(), limits)?;
        each("scope_logs", &self.scope_logs, limits)
    }
}

impl Checked for ScopeLogs {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        scope(self.scope.as_ref(), limits)?;
        each("log_records", &self.log_records, limits)
    }
}

impl Checked for LogRecord {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        id("trace_id", &self.trace_id, TRACE_ID_BYTES, true)?;
        id("span_id", &self.span_id, SPAN_ID_BYTES, true)?;
        attributes("attributes", &self.attributes, limits)
    }
}

impl Checked for ResourceMetrics {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        resource(self.resource.as_ref(), limits)?;
        each("scope_metrics", &self.scope_metrics, limits)
    }
}

impl Checked for ScopeMetrics {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        scope(self.scope.as_ref(), limits)?;
        each("metrics", &self.metrics, limits)
    }
}

impl Checked for Metric {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        attributes("metadata", &self.metadata, limits)?;
        match &self.data {
            Some(Data::Gauge(gauge)) => each("data_points", &gauge.data_points, limits),
            Some(Data::Sum(sum)) => each("data_points", &sum.data_points, limits),
            Some(Data::Histogram(histogram)) => each("data_points", &histogram.data_points, limits),
            Some(Data::ExponentialHistogram(histogram)) => {
                each("data_points", &histogram.data_points, limits)
            }
            Some(Data::Summary(summary)) => each("data_points", &summary.data_points, limits),
            None => Ok(()),
        }
    }
}

/// Implements [`Checked`] for a data point with attributes and exemplars.
macro_rules! checked_point {
    ($point:ty) => {
        impl Checked for $point {
            fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
                attributes("attributes", &self.attributes, limits)?;
                each("exemplars", &self.exemplars, limits)
            }
        }
    };
}

checked_point!(NumberDataPoint);
checked_point!(HistogramDataPoint);
checked_point!(ExponentialHistogramDataPoint);

impl Checked for SummaryDataPoint {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        attributes("attributes", &self.attributes, limits)
    }
}

impl Checked for Exemplar {
    fn check(&self, limits: &InputLimits) -> Result<(), LimitViolation> {
        id("trace_id", &self.trace_id, TRACE_ID_BYTES, true)?;
        id("span_id", &self.span_id, SPAN_ID_BYTES, true)?;
        attributes("filtered_attributes", &self.filtered_attributes, limits)
    }
}

/// The three request types all have their limits checked.
const _: fn() = || {
    fn checked<T: WithinLimits>() {}
    checked::<ExportTraceServiceRequest>();
    checked::<ExportLogsServiceRequest>();
    checked::<ExportMetricsServiceRequest>();
};

#[cfg(test)]
mod tests {
    use opscope_proto::otlp::metrics::v1::Gauge;

    use super::*;

    fn attribute(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.into())),
            }),
            ..Default::default()
        }
    }

    fn attributes_of(n: usize) -> Vec<KeyValue> {
        (0..n).map(|i| attribute(&format!("k{i}"), "v")).collect()
    }

    /// A span with the ids OTLP requires.
    fn with_ids() -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            ..Default::default()
        }
    }

    fn traces(span: Span) -> ExportTraceServiceRequest {
        let scope = |spans| ScopeSpans {
            spans,
            ..Default::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![scope(vec![with_ids()]), scope(vec![with_ids(), span])],
                ..Default::default()
            }],
        }
    }

    fn violation<T: WithinLimits>(request: &T) -> String {
        request
            .check_limits(&InputLimits::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn too_many_span_attributes_are_reported_with_the_span_path() {
        let span = Span {
            attributes: attributes_of(300),
            ..with_ids()
        };
        assert_eq!(
            violation(&traces(span)),
            "resource_spans[0].scope_spans[1].spans[1]: 300 attributes, more than max_attributes 128"
        );
    }

    #[test]
    fn long_values_long_keys_and_event_attributes() {
        let long_value = Span {
            attributes: vec![attribute("payload", &"x".repeat(70_000))],
            ..with_ids()
        };
        assert_eq!(
            violation(&traces(long_value)),
            "resource_spans[0].scope_spans[1].spans[1].attributes[0]: value of \"payload\" has 70000 bytes, more than max_attribute_value_bytes 65536"
        );
        let long_key = Span {
            attributes: vec![attribute(&"k".repeat(2000), "v")],
            ..with_ids()
        };
        assert!(violation(&traces(long_key)).ends_with(
            "spans[1].attributes[0]: key of 2000 bytes, more than max_attribute_key_bytes 1024"
        ));
        let event = Span {
            events: vec![
                span::Event::default(),
                span::Event {
                    attributes: attributes_of(129),
                    ..Default::default()
                },
            ],
            ..with_ids()
        };
        assert!(
            violation(&traces(event))
                .ends_with("spans[1].events[1]: 129 attributes, more than max_attributes 128")
        );
        let events = Span {
            events: vec![span::Event::default(); 1001],
            ..with_ids()
        };
        assert!(
            violation(&traces(events)).ends_with("1001 events, more than max_span_events 1000")
        );
    }

    #[test]
    fn resources_log_records_and_data_points_are_checked() {
        let logs = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource {
                    attributes: attributes_of(200),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        assert_eq!(
            violation(&logs),
            "resource_logs[0].resource: 200 attributes, more than max_attributes 128"
        );
        let point = NumberDataPoint {
            exemplars: vec![Exemplar {
                filtered_attributes: vec![attribute("trace", &"t".repeat(65_537))],
                ..Default::default()
            }],
            ..Default::default()
        };
        let metrics = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        data: Some(Data::Gauge(Gauge {
                            data_points: vec![point],
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        assert!(violation(&metrics).starts_with(
            "resource_metrics[0].scope_metrics[0].metrics[0].data_points[0].exemplars[0].filtered_attributes[0]: value of \"trace\" has 65537 bytes"
        ));
    }

    #[test]
    fn a_request_within_the_limits_passes() {
        let span = Span {
            attributes: attributes_of(128),
            events: vec![span::Event::default(); 1000],
            ..with_ids()
        };
        assert_eq!(traces(span).check_limits(&InputLimits::default()), Ok(()));
    }

    #[test]
    fn ids_of_the_wrong_length_are_refused_with_their_path() {
        let long_trace_id = Span {
            trace_id: vec![7; 5000],
            ..with_ids()
        };
        let refused = traces(long_trace_id)
            .check_limits(&InputLimits::default())
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "resource_spans[0].scope_spans[1].spans[1]: trace_id of 5000 bytes, must be 16 bytes"
        );
        assert_eq!(refused.reason, INVALID_ID);
        let short_span_id = Span {
            span_id: vec![7; 3],
            ..with_ids()
        };
        assert!(
            violation(&traces(short_span_id))
                .ends_with("spans[1]: span_id of 3 bytes, must be 8 bytes")
        );
        let missing = Span {
            trace_id: Vec::new(),
            ..with_ids()
        };
        assert!(
            violation(&traces(missing))
                .ends_with("spans[1]: trace_id of 0 bytes, must be 16 bytes")
        );
        let bad_parent = Span {
            parent_span_id: vec![1; 16],
            ..with_ids()
        };
        assert!(
            violation(&traces(bad_parent))
                .ends_with("spans[1]: parent_span_id of 16 bytes, must be 8 bytes or empty")
        );
        let bad_link = Span {
            links: vec![span::Link {
                trace_id: vec![1; 16],
                span_id: vec![1; 9],
                ..Default::default()
            }],
            ..with_ids()
        };
        assert!(
            violation(&traces(bad_link))
                .ends_with("spans[1].links[0]: span_id of 9 bytes, must be 8 bytes")
        );
        // A log record need not belong to a trace; when it does, its ids are whole.
        let log = |trace_id: Vec<u8>| ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord {
                        trace_id,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        assert_eq!(
            log(Vec::new()).check_limits(&InputLimits::default()),
            Ok(())
        );
        assert_eq!(
            log(vec![3; 16]).check_limits(&InputLimits::default()),
            Ok(())
        );
        assert_eq!(
            violation(&log(vec![3; 15])),
            "resource_logs[0].scope_logs[0].log_records[0]: trace_id of 15 bytes, must be 16 bytes or empty"
        );
    }

    #[test]
    fn limits_of_zero_are_refused() {
        let limits = InputLimits {
            max_span_links: 0,
            ..Default::default()
        };
        assert_eq!(
            limits.validate().unwrap_err().to_string(),
            "limits.max_span_links: must be at least 1"
        );
    }
}
