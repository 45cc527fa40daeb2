//! The shape of the three OTLP export requests as the budget walks them: for each
//! message, the fields that make decoding allocate (nested messages, strings and
//! bytes, repeated numbers), by protobuf field number and by OTLP/JSON name, and the
//! size of the struct prost builds for it. Scalar fields are part of that size and
//! need no entry; fields not listed are skipped, as prost skips unknown fields.
//!
//! Field numbers and names are those of the OTLP protos
//! (opentelemetry-proto v1: common, resource, trace, logs, metrics).

use std::mem::size_of;

use opscope_proto::otlp::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::metrics::v1::{
    Exemplar, ExponentialHistogramDataPoint, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, SummaryDataPoint, exponential_histogram_data_point::Buckets,
    summary_data_point::ValueAtQuantile,
};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, span};

/// One message type of the requests.
pub struct Message {
    /// The size of its decoded struct: what each element of a repeated field of this
    /// type takes in its `Vec`.
    pub size: usize,
    /// Whether it is one of the items a request is counted in (span, log record,
    /// data point).
    pub item: bool,
    pub fields: &'static [Field],
}

pub struct Field {
    pub number: u32,
    /// The OTLP/JSON name (lowerCamelCase).
    pub json: &'static str,
    pub kind: FieldKind,
}

#[derive(Clone, Copy)]
pub enum FieldKind {
    /// A message held inline in its parent (an optional field or a oneof arm): it
    /// allocates only through its own fields.
    Inline(&'static Message),
    /// A repeated message: each element takes its struct's size in a `Vec`.
    Repeated(&'static Message),
    /// A string or bytes value: its length. In JSON, an id's hex or base64 text is
    /// longer than the bytes it decodes to, so counting the text overestimates.
    Text,
    /// A repeated string: a `String` per element, and its bytes.
    RepeatedText,
    /// Repeated 64-bit numbers, packed or not: eight bytes each. `fixed` when they
    /// are `fixed64` or `double` on the wire, varints otherwise.
    Numbers { fixed: bool },
}

const fn field(number: u32, json: &'static str, kind: FieldKind) -> Field {
    Field { number, json, kind }
}

use FieldKind::{Inline, Numbers, Repeated, RepeatedText, Text};

pub static TRACES_REQUEST: Message = Message {
    size: 0,
    item: false,
    fields: &[field(1, "resourceSpans", Repeated(&RESOURCE_SPANS))],
};

pub static LOGS_REQUEST: Message = Message {
    size: 0,
    item: false,
    fields: &[field(1, "resourceLogs", Repeated(&RESOURCE_LOGS))],
};

pub static METRICS_REQUEST: Message = Message {
    size: 0,
    item: false,
    fields: &[field(1, "resourceMetrics", Repeated(&RESOURCE_METRICS))],
};

static KEY_VALUE: Message = Message {
    size: size_of::<KeyValue>(),
    item: false,
    fields: &[field(1, "key", Text), field(2, "value", Inline(&ANY_VALUE))],
};

static ANY_VALUE: Message = Message {
    size: size_of::<AnyValue>(),
    item: false,
    fields: &[
        field(1, "stringValue", Text),
        field(5, "arrayValue", Inline(&ARRAY_VALUE)),
        field(6, "kvlistValue", Inline(&KEY_VALUE_LIST)),
        field(7, "bytesValue", Text),
    ],
};

static ARRAY_VALUE: Message = Message {
    size: size_of::<ArrayValue>(),
    item: false,
    fields: &[field(1, "values", Repeated(&ANY_VALUE))],
};

static KEY_VALUE_LIST: Message = Message {
    size: size_of::<KeyValueList>(),
    item: false,
    fields: &[field(1, "values", Repeated(&KEY_VALUE))],
};

static SCOPE: Message = Message {
    size: size_of::<InstrumentationScope>(),
    item: false,
    fields: &[
        field(1, "name", Text),
        field(2, "version", Text),
        field(3, "attributes", Repeated(&KEY_VALUE)),
    ],
};

static ENTITY_REF: Message = Message {
    size: size_of::<EntityRef>(),
    item: false,
    fields: &[
        field(1, "schemaUrl", Text),
        field(2, "type", Text),
        field(3, "idKeys", RepeatedText),
        field(4, "descriptionKeys", RepeatedText),
    ],
};

static RESOURCE: Message = Message {
    size: size_of::<Resource>(),
    item: false,
    fields: &[
        field(1, "attributes", Repeated(&KEY_VALUE)),
        field(3, "entityRefs", Repeated(&ENTITY_REF)),
    ],
};

static RESOURCE_SPANS: Message = Message {
    size: size_of::<ResourceSpans>(),
    item: false,
    fields: &[
        field(1, "resource", Inline(&RESOURCE)),
        field(2, "scopeSpans", Repeated(&SCOPE_SPANS)),
        field(3, "schemaUrl", Text),
    ],
};

static SCOPE_SPANS: Message = Message {
    size: size_of::<ScopeSpans>(),
    item: false,
    fields: &[
        field(1, "scope", Inline(&SCOPE)),
        field(2, "spans", Repeated(&SPAN)),
        field(3, "schemaUrl", Text),
    ],
};

static SPAN: Message = Message {
    size: size_of::<Span>(),
    item: true,
    fields: &[
        field(1, "traceId", Text),
        field(2, "spanId", Text),
        field(3, "traceState", Text),
        field(4, "parentSpanId", Text),
        field(5, "name", Text),
        field(9, "attributes", Repeated(&KEY_VALUE)),
        field(11, "events", Repeated(&SPAN_EVENT)),
        field(13, "links", Repeated(&SPAN_LINK)),
        field(15, "status", Inline(&SPAN_STATUS)),
    ],
};

static SPAN_EVENT: Message = Message {
    size: size_of::<span::Event>(),
    item: false,
    fields: &[
        field(2, "name", Text),
        field(3, "attributes", Repeated(&KEY_VALUE)),
    ],
};

static SPAN_LINK: Message = Message {
    size: size_of::<span::Link>(),
    item: false,
    fields: &[
        field(1, "traceId", Text),
        field(2, "spanId", Text),
        field(3, "traceState", Text),
        field(4, "attributes", Repeated(&KEY_VALUE)),
    ],
};

static SPAN_STATUS: Message = Message {
    size: 0,
    item: false,
    fields: &[field(2, "message", Text)],
};

static RESOURCE_LOGS: Message = Message {
    size: size_of::<ResourceLogs>(),
    item: false,
    fields: &[
        field(1, "resource", Inline(&RESOURCE)),
        field(2, "scopeLogs", Repeated(&SCOPE_LOGS)),
        field(3, "schemaUrl", Text),
    ],
};

static SCOPE_LOGS: Message = Message {
    size: size_of::<ScopeLogs>(),
    item: false,
    fields: &[
        field(1, "scope", Inline(&SCOPE)),
        field(2, "logRecords", Repeated(&LOG_RECORD)),
        field(3, "schemaUrl", Text),
    ],
};

static LOG_RECORD: Message = Message {
    size: size_of::<LogRecord>(),
    item: true,
    fields: &[
        field(3, "severityText", Text),
        field(5, "body", Inline(&ANY_VALUE)),
        field(6, "attributes", Repeated(&KEY_VALUE)),
        field(9, "traceId", Text),
        field(10, "spanId", Text),
        field(12, "eventName", Text),
    ],
};

static RESOURCE_METRICS: Message = Message {
    size: size_of::<ResourceMetrics>(),
    item: false,
    fields: &[
        field(1, "resource", Inline(&RESOURCE)),
        field(2, "scopeMetrics", Repeated(&SCOPE_METRICS)),
        field(3, "schemaUrl", Text),
    ],
};

static SCOPE_METRICS: Message = Message {
    size: size_of::<ScopeMetrics>(),
    item: false,
    fields: &[
        field(1, "scope", Inline(&SCOPE)),
        field(2, "metrics", Repeated(&METRIC)),
        field(3, "schemaUrl", Text),
    ],
};

static METRIC: Message = Message {
    size: size_of::<Metric>(),
    item: false,
    fields: &[
        field(1, "name", Text),
        field(2, "description", Text),
        field(3, "unit", Text),
        field(5, "gauge", Inline(&NUMBER_POINTS)),
        field(7, "sum", Inline(&NUMBER_POINTS)),
        field(9, "histogram", Inline(&HISTOGRAM_POINTS)),
        field(10, "exponentialHistogram", Inline(&EXPONENTIAL_POINTS)),
        field(11, "summary", Inline(&SUMMARY_POINTS)),
        field(12, "metadata", Repeated(&KEY_VALUE)),
    ],
};

/// `Gauge` and `Sum`: their points are field 1 of both.
static NUMBER_POINTS: Message = Message {
    size: 0,
    item: false,
    fields: &[field(1, "dataPoints", Repeated(&NUMBER_POINT))],
};

static HISTOGRAM_POINTS: Message = Message {
    size: 0,
    item: false,
    fields: &[field(1, "dataPoints", Repeated(&HISTOGRAM_POINT))],
};

static EXPONENTIAL_POINTS: Message = Message {
    size: 0,
    item: false,
    fields: &[field(1, "dataPoints", Repeated(&EXPONENTIAL_POINT))],
};

static SUMMARY_POINTS: Message = Message {
    size: 0,
    item: false,
    fields: &[field(1, "dataPoints", Repeated(&SUMMARY_POINT))],
};

static NUMBER_POINT: Message = Message {
    size: size_of::<NumberDataPoint>(),
    item: true,
    fields: &[
        field(5, "exemplars", Repeated(&EXEMPLAR)),
        field(7, "attributes", Repeated(&KEY_VALUE)),
    ],
};

static HISTOGRAM_POINT: Message = Message {
    size: size_of::<HistogramDataPoint>(),
    item: true,
    fields: &[
        field(6, "bucketCounts", Numbers { fixed: true }),
        field(7, "explicitBounds", Numbers { fixed: true }),
        field(8, "exemplars", Repeated(&EXEMPLAR)),
        field(9, "attributes", Repeated(&KEY_VALUE)),
    ],
};

static EXPONENTIAL_POINT: Message = Message {
    size: size_of::<ExponentialHistogramDataPoint>(),
    item: true,
    fields: &[
        field(1, "attributes", Repeated(&KEY_VALUE)),
        field(8, "positive", Inline(&BUCKETS)),
        field(9, "negative", Inline(&BUCKETS)),
        field(11, "exemplars", Repeated(&EXEMPLAR)),
    ],
};

static BUCKETS: Message = Message {
    size: size_of::<Buckets>(),
    item: false,
    fields: &[field(2, "bucketCounts", Numbers { fixed: false })],
};

static SUMMARY_POINT: Message = Message {
    size: size_of::<SummaryDataPoint>(),
    item: true,
    fields: &[
        field(6, "quantileValues", Repeated(&QUANTILE)),
        field(7, "attributes", Repeated(&KEY_VALUE)),
    ],
};

static QUANTILE: Message = Message {
    size: size_of::<ValueAtQuantile>(),
    item: false,
    fields: &[],
};

static EXEMPLAR: Message = Message {
    size: size_of::<Exemplar>(),
    item: false,
    fields: &[
        field(4, "spanId", Text),
        field(5, "traceId", Text),
        field(7, "filteredAttributes", Repeated(&KEY_VALUE)),
    ],
};

impl Message {
    pub fn field(&self, number: u32) -> Option<FieldKind> {
        self.fields
            .iter()
            .find(|field| field.number == number)
            .map(|field| field.kind)
    }

    pub fn json_field(&self, name: &str) -> Option<FieldKind> {
        self.fields
            .iter()
            .find(|field| field.json == name)
            .map(|field| field.kind)
    }
}
