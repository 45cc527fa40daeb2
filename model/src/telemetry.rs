//! The data the pipeline carries: one OTLP export request per batch, for each of the
//! three signal types, behind one trait so that the pipeline is written once.

use std::fmt::Debug;

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::metrics::v1::{
    ExponentialHistogram, Gauge, Histogram, Metric, ResourceMetrics, ScopeMetrics, Sum, Summary,
    metric::Data,
};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
use opscope_proto::otlp_encode::EncodeOnce;
use opscope_proto::prost::Message;
use serde::Serialize;

use crate::decoded_size::DecodedSize;
use serde::de::DeserializeOwned;

/// The three OTLP signal types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TelemetryKind {
    Traces,
    Logs,
    Metrics,
}

impl TelemetryKind {
    pub const ALL: [TelemetryKind; 3] = [Self::Traces, Self::Logs, Self::Metrics];

    /// The pipeline type name used in configs (`service.pipelines.traces`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Traces => "traces",
            Self::Logs => "logs",
            Self::Metrics => "metrics",
        }
    }

    /// What one item is called in self-telemetry metric names.
    pub fn item_name(self) -> &'static str {
        match self {
            Self::Traces => "spans",
            Self::Logs => "log_records",
            Self::Metrics => "metric_points",
        }
    }

    /// This kind's entry of a per-kind array, in the order of [`TelemetryKind::ALL`].
    pub fn of<T>(self, per_kind: &[T; 3]) -> &T {
        let [traces, logs, metrics] = per_kind;
        match self {
            Self::Traces => traces,
            Self::Logs => logs,
            Self::Metrics => metrics,
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// A value made of countable items that can be cut in two at any item boundary.
pub trait Splittable: Sized {
    fn item_count(&self) -> usize;

    /// Moves the first `n` items (`0 < n < item_count`) into a new value that keeps
    /// the same headers (resource, scope, metric description).
    fn split_front(&mut self, n: usize) -> Self;
}

/// Moves the first `n` items of a list of containers into a new list, cutting the
/// container that straddles the boundary.
pub fn split_vec_front<C: Splittable>(children: &mut Vec<C>, n: usize) -> Vec<C> {
    let mut whole = 0;
    let mut taken_items = 0;
    for child in children.iter() {
        let count = child.item_count();
        if taken_items + count > n {
            break;
        }
        taken_items += count;
        whole += 1;
    }
    let mut front: Vec<C> = children.drain(..whole).collect();
    let rest = n - taken_items;
    if rest > 0
        && let Some(straddling) = children.first_mut()
    {
        front.push(straddling.split_front(rest));
    }
    front
}

/// An OTLP export request as a pipeline batch.
pub trait Telemetry:
    Message + Default + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    type ResourceData: Splittable + DecodedSize + Clone + Debug + Send + Sync + 'static;

    const KIND: TelemetryKind;

    fn resource_data(&self) -> &Vec<Self::ResourceData>;
    fn resource_data_mut(&mut self) -> &mut Vec<Self::ResourceData>;
    fn from_resource_data(data: Vec<Self::ResourceData>) -> Self;
    fn resource_mut(data: &mut Self::ResourceData) -> &mut Option<Resource>;

    /// The request's protobuf bytes, as prost writes them (see `otlp_encode`).
    fn encode_request(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_request_into(&mut out);
        out
    }

    /// Appends the request's protobuf bytes to `out`. An export request is one
    /// repeated field, so requests appended one after the other are the request that
    /// holds all their data.
    fn encode_request_into(&self, out: &mut Vec<u8>);

    /// Bytes the batch takes in memory, as the memory limiter counts them: its
    /// decoded size, which a request of many small elements makes many times its
    /// encoded size.
    fn memory_size(&self) -> u64 {
        self.resource_data().heap_size()
    }

    /// Spans, log records or metric data points in this batch.
    fn item_count(&self) -> usize {
        self.resource_data()
            .iter()
            .map(Splittable::item_count)
            .sum()
    }

    fn append(&mut self, other: Self) {
        let mut other = other;
        self.resource_data_mut().append(other.resource_data_mut());
    }

    /// Moves the first `n` items into a new batch.
    fn split_front(&mut self, n: usize) -> Self {
        Self::from_resource_data(split_vec_front(self.resource_data_mut(), n))
    }

    /// Every resource of the batch, created empty where a producer left it out.
    fn resources_mut(&mut self) -> impl Iterator<Item = &mut Resource> {
        self.resource_data_mut()
            .iter_mut()
            .map(|data| Self::resource_mut(data).get_or_insert_with(Resource::default))
    }
}

/// Implements [`Splittable`] for an OTLP container whose items are in one list field.
macro_rules! splittable_container {
    ($container:ty, $children:ident) => {
        impl Splittable for $container {
            fn item_count(&self) -> usize {
                self.$children.iter().map(Splittable::item_count).sum()
            }

            fn split_front(&mut self, n: usize) -> Self {
                let children = std::mem::take(&mut self.$children);
                let mut front = self.clone();
                self.$children = children;
                front.$children = split_vec_front(&mut self.$children, n);
                front
            }
        }
    };
}

/// Implements [`Splittable`] for a leaf record, which is one item and never cut.
macro_rules! splittable_leaf {
    ($leaf:ty) => {
        impl Splittable for $leaf {
            fn item_count(&self) -> usize {
                1
            }

            fn split_front(&mut self, _n: usize) -> Self {
                unreachable!("a single record holds one item and is never split")
            }
        }
    };
}

splittable_container!(ResourceSpans, scope_spans);
splittable_container!(ScopeSpans, spans);
splittable_leaf!(Span);
splittable_container!(ResourceLogs, scope_logs);
splittable_container!(ScopeLogs, log_records);
splittable_leaf!(LogRecord);
splittable_container!(ResourceMetrics, scope_metrics);
splittable_container!(ScopeMetrics, metrics);

/// A metric counts its data points and is split between them.
impl Splittable for Metric {
    fn item_count(&self) -> usize {
        match &self.data {
            Some(Data::Gauge(gauge)) => gauge.data_points.len(),
            Some(Data::Sum(sum)) => sum.data_points.len(),
            Some(Data::Histogram(histogram)) => histogram.data_points.len(),
            Some(Data::ExponentialHistogram(histogram)) => histogram.data_points.len(),
            Some(Data::Summary(summary)) => summary.data_points.len(),
            None => 0,
        }
    }

    fn split_front(&mut self, n: usize) -> Self {
        let data = self.data.as_mut().map(|data| match data {
            Data::Gauge(gauge) => Data::Gauge(Gauge {
                data_points: gauge.data_points.drain(..n).collect(),
            }),
            Data::Sum(sum) => Data::Sum(Sum {
                data_points: sum.data_points.drain(..n).collect(),
                ..*sum
            }),
            Data::Histogram(histogram) => Data::Histogram(Histogram {
                data_points: histogram.data_points.drain(..n).collect(),
                ..*histogram
            }),
            Data::ExponentialHistogram(histogram) => {
                Data::ExponentialHistogram(ExponentialHistogram {
                    data_points: histogram.data_points.drain(..n).collect(),
                    ..*histogram
                })
            }
            Data::Summary(summary) => Data::Summary(Summary {
                data_points: summary.data_points.drain(..n).collect(),
            }),
        });
        Metric {
            name: self.name.clone(),
            description: self.description.clone(),
            unit: self.unit.clone(),
            metadata: self.metadata.clone(),
            data,
        }
    }
}

/// Implements [`Telemetry`] for one OTLP export request type.
macro_rules! telemetry_request {
    ($request:ty, $data:ty, $field:ident, $kind:expr, $encode:path) => {
        impl Telemetry for $request {
            type ResourceData = $data;

            const KIND: TelemetryKind = $kind;

            fn resource_data(&self) -> &Vec<$data> {
                &self.$field
            }

            fn resource_data_mut(&mut self) -> &mut Vec<$data> {
                &mut self.$field
            }

            fn from_resource_data(data: Vec<$data>) -> Self {
                Self { $field: data }
            }

            fn resource_mut(data: &mut $data) -> &mut Option<Resource> {
                &mut data.resource
            }

            fn encode_request_into(&self, out: &mut Vec<u8>) {
                $encode(self, out)
            }
        }
    };
}

telemetry_request!(
    ExportTraceServiceRequest,
    ResourceSpans,
    resource_spans,
    TelemetryKind::Traces,
    EncodeOnce::encode_once_into
);
telemetry_request!(
    ExportLogsServiceRequest,
    ResourceLogs,
    resource_logs,
    TelemetryKind::Logs,
    EncodeOnce::encode_once_into
);
telemetry_request!(
    ExportMetricsServiceRequest,
    ResourceMetrics,
    resource_metrics,
    TelemetryKind::Metrics,
    encode_metrics_into
);

/// Metrics are encoded by prost: they are a small share of what operators send.
fn encode_metrics_into(request: &ExportMetricsServiceRequest, out: &mut Vec<u8>) {
    out.reserve(request.encoded_len());
    // Encoding into a vector fails only for want of room, and the vector has it.
    let _ = request.encode(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_proto::otlp::metrics::v1::NumberDataPoint;
    use opscope_testkit::otlp_batches::traces;

    fn span_names(batch: &ExportTraceServiceRequest) -> Vec<String> {
        batch
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| s.name.clone())
            .collect()
    }

    #[test]
    fn split_cuts_inside_a_scope_and_keeps_headers_and_order() {
        let mut batch = traces(2, 3);
        let before = span_names(&batch);
        let front = batch.split_front(4);
        assert_eq!(front.item_count(), 4);
        assert_eq!(batch.item_count(), 2);
        assert_eq!(
            front.resource_spans[0].schema_url,
            "https://example.test/schema"
        );
        assert_eq!(
            batch.resource_spans[0].schema_url,
            "https://example.test/schema"
        );
        let mut after = span_names(&front);
        after.extend(span_names(&batch));
        assert_eq!(before, after);
    }

    #[test]
    fn metrics_count_and_split_data_points() {
        let points = |n| -> Vec<NumberDataPoint> { (0..n).map(|_| Default::default()).collect() };
        let mut batch = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![
                        Metric {
                            name: "a".into(),
                            data: Some(Data::Sum(Sum {
                                data_points: points(3),
                                aggregation_temporality: 2,
                                is_monotonic: true,
                            })),
                            ..Default::default()
                        },
                        Metric {
                            name: "b".into(),
                            data: Some(Data::Gauge(Gauge {
                                data_points: points(2),
                            })),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        assert_eq!(batch.item_count(), 5);
        let front = batch.split_front(2);
        assert_eq!(front.item_count(), 2);
        assert_eq!(batch.item_count(), 3);
        let rest = &batch.resource_metrics[0].scope_metrics[0].metrics[0];
        assert_eq!(rest.name, "a");
        match &rest.data {
            Some(Data::Sum(sum)) => assert!(sum.is_monotonic && sum.aggregation_temporality == 2),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn append_then_split_everything_round_trips() {
        let mut batch = traces(1, 2);
        batch.append(traces(1, 3));
        assert_eq!(batch.item_count(), 5);
        let front = batch.split_front(5);
        assert_eq!(front.item_count(), 5);
        assert_eq!(batch.item_count(), 0);
    }
}
