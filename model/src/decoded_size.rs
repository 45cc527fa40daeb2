//! The memory a decoded OTLP request takes: the structs of its repeated elements,
//! its strings and bytes, its number lists (allocator overhead and spare capacity
//! aside). What the memory account counts for the requests the pipeline holds; a
//! receiver reads the same figure off a request's bytes before decoding it.

use std::mem::size_of;

use opscope_proto::otlp::common::v1::{
    AnyValue, EntityRef, InstrumentationScope, KeyValue, any_value,
};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::metrics::v1::{
    Exemplar, ExponentialHistogramDataPoint, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, SummaryDataPoint, exponential_histogram_data_point::Buckets,
    metric::Data, summary_data_point::ValueAtQuantile,
};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, span};

/// What a decoded value takes outside its own struct.
pub trait DecodedSize {
    fn heap_size(&self) -> u64;
}

fn len(bytes: usize) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The elements' structs and what each holds.
impl<T: DecodedSize> DecodedSize for [T] {
    fn heap_size(&self) -> u64 {
        self.iter().fold(len(size_of_val(self)), |total, element| {
            total.saturating_add(element.heap_size())
        })
    }
}

impl DecodedSize for String {
    fn heap_size(&self) -> u64 {
        len(self.len())
    }
}

impl DecodedSize for Vec<u8> {
    fn heap_size(&self) -> u64 {
        len(self.len())
    }
}

fn numbers<N>(list: &[N]) -> u64 {
    len(list.len().saturating_mul(size_of::<u64>()))
}

impl<T: DecodedSize> DecodedSize for Option<T> {
    fn heap_size(&self) -> u64 {
        self.as_ref().map_or(0, DecodedSize::heap_size)
    }
}

/// Sums the heap sizes of the listed parts.
macro_rules! sum {
    ($($part:expr),+ $(,)?) => {
        0u64$(.saturating_add($part))+
    };
}

impl DecodedSize for KeyValue {
    fn heap_size(&self) -> u64 {
        sum!(self.key.heap_size(), self.value.heap_size())
    }
}

impl DecodedSize for AnyValue {
    fn heap_size(&self) -> u64 {
        match &self.value {
            Some(any_value::Value::StringValue(text)) => text.heap_size(),
            Some(any_value::Value::BytesValue(bytes)) => bytes.heap_size(),
            Some(any_value::Value::ArrayValue(array)) => array.values.heap_size(),
            Some(any_value::Value::KvlistValue(map)) => map.values.heap_size(),
            _ => 0,
        }
    }
}

impl DecodedSize for InstrumentationScope {
    fn heap_size(&self) -> u64 {
        sum!(
            self.name.heap_size(),
            self.version.heap_size(),
            self.attributes.heap_size()
        )
    }
}

impl DecodedSize for EntityRef {
    fn heap_size(&self) -> u64 {
        sum!(
            self.schema_url.heap_size(),
            self.r#type.heap_size(),
            self.id_keys.heap_size(),
            self.description_keys.heap_size(),
        )
    }
}

impl DecodedSize for Resource {
    fn heap_size(&self) -> u64 {
        sum!(self.attributes.heap_size(), self.entity_refs.heap_size())
    }
}

impl DecodedSize for ResourceSpans {
    fn heap_size(&self) -> u64 {
        sum!(
            self.resource.heap_size(),
            self.scope_spans.heap_size(),
            self.schema_url.heap_size()
        )
    }
}

impl DecodedSize for ScopeSpans {
    fn heap_size(&self) -> u64 {
        sum!(
            self.scope.heap_size(),
            self.spans.heap_size(),
            self.schema_url.heap_size()
        )
    }
}

impl DecodedSize for Span {
    fn heap_size(&self) -> u64 {
        sum!(
            self.trace_id.heap_size(),
            self.span_id.heap_size(),
            self.trace_state.heap_size(),
            self.parent_span_id.heap_size(),
            self.name.heap_size(),
            self.attributes.heap_size(),
            self.events.heap_size(),
            self.links.heap_size(),
            self.status
                .as_ref()
                .map_or(0, |status| status.message.heap_size()),
        )
    }
}

impl DecodedSize for span::Event {
    fn heap_size(&self) -> u64 {
        sum!(self.name.heap_size(), self.attributes.heap_size())
    }
}

impl DecodedSize for span::Link {
    fn heap_size(&self) -> u64 {
        sum!(
            self.trace_id.heap_size(),
            self.span_id.heap_size(),
            self.trace_state.heap_size(),
            self.attributes.heap_size()
        )
    }
}

impl DecodedSize for ResourceLogs {
    fn heap_size(&self) -> u64 {
        sum!(
            self.resource.heap_size(),
            self.scope_logs.heap_size(),
            self.schema_url.heap_size()
        )
    }
}

impl DecodedSize for ScopeLogs {
    fn heap_size(&self) -> u64 {
        sum!(
            self.scope.heap_size(),
            self.log_records.heap_size(),
            self.schema_url.heap_size()
        )
    }
}

impl DecodedSize for LogRecord {
    fn heap_size(&self) -> u64 {
        sum!(
            self.severity_text.heap_size(),
            self.body.heap_size(),
            self.attributes.heap_size(),
            self.trace_id.heap_size(),
            self.span_id.heap_size(),
            self.event_name.heap_size(),
        )
    }
}

impl DecodedSize for ResourceMetrics {
    fn heap_size(&self) -> u64 {
        sum!(
            self.resource.heap_size(),
            self.scope_metrics.heap_size(),
            self.schema_url.heap_size()
        )
    }
}

impl DecodedSize for ScopeMetrics {
    fn heap_size(&self) -> u64 {
        sum!(
            self.scope.heap_size(),
            self.metrics.heap_size(),
            self.schema_url.heap_size()
        )
    }
}

impl DecodedSize for Metric {
    fn heap_size(&self) -> u64 {
        let points = match &self.data {
            Some(Data::Gauge(gauge)) => gauge.data_points.heap_size(),
            Some(Data::Sum(sum)) => sum.data_points.heap_size(),
            Some(Data::Histogram(histogram)) => histogram.data_points.heap_size(),
            Some(Data::ExponentialHistogram(histogram)) => histogram.data_points.heap_size(),
            Some(Data::Summary(summary)) => summary.data_points.heap_size(),
            None => 0,
        };
        sum!(
            self.name.heap_size(),
            self.description.heap_size(),
            self.unit.heap_size(),
            self.metadata.heap_size(),
            points
        )
    }
}

impl DecodedSize for NumberDataPoint {
    fn heap_size(&self) -> u64 {
        sum!(self.attributes.heap_size(), self.exemplars.heap_size())
    }
}

impl DecodedSize for HistogramDataPoint {
    fn heap_size(&self) -> u64 {
        sum!(
            self.attributes.heap_size(),
            self.exemplars.heap_size(),
            numbers(&self.bucket_counts),
            numbers(&self.explicit_bounds),
        )
    }
}

impl DecodedSize for ExponentialHistogramDataPoint {
    fn heap_size(&self) -> u64 {
        sum!(
            self.attributes.heap_size(),
            self.exemplars.heap_size(),
            self.positive.heap_size(),
            self.negative.heap_size(),
        )
    }
}

impl DecodedSize for Buckets {
    fn heap_size(&self) -> u64 {
        numbers(&self.bucket_counts)
    }
}

impl DecodedSize for SummaryDataPoint {
    fn heap_size(&self) -> u64 {
        sum!(
            self.attributes.heap_size(),
            self.quantile_values.heap_size()
        )
    }
}

impl DecodedSize for ValueAtQuantile {
    fn heap_size(&self) -> u64 {
        0
    }
}

impl DecodedSize for Exemplar {
    fn heap_size(&self) -> u64 {
        sum!(
            self.filtered_attributes.heap_size(),
            self.span_id.heap_size(),
            self.trace_id.heap_size()
        )
    }
}
