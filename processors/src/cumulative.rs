//! Running totals that turn delta sums and histograms into cumulative ones, for the
//! backends that take no deltas (Prometheus's OTLP endpoint refuses them: "invalid
//! temporality and type combination"). The totals of a request are computed apart
//! from the state and kept only when [`Totals::commit`] is called, so that a request
//! sent again after a refusal is not added twice. Series are bounded: past the
//! limit, the one updated longest ago is forgotten, and starts again from zero (a
//! counter reset, with a new start time) if it comes back.

use std::collections::HashMap;

use opscope_model::timestamp::Nanos;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::common::v1::{KeyValue, any_value};
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, HistogramDataPoint, NumberDataPoint, metric, number_data_point,
};

/// Series kept by default.
pub const DEFAULT_MAX_SERIES: usize = 10_000;
/// Exemplars kept on a cumulative histogram point: the latest of the request.
const MAX_EXEMPLARS: usize = 8;

/// A series: the metric's name and its point's attributes (as text, in order).
type SeriesKey = (String, Vec<(String, String)>);

#[derive(Debug, Clone, PartialEq)]
enum Total {
    Sum {
        start: Nanos,
        value: i64,
    },
    Histogram {
        start: Nanos,
        count: u64,
        sum: f64,
        buckets: Vec<u64>,
    },
}

/// The totals a request brings, to be committed once it was handed on.
#[derive(Debug, Default)]
pub struct PendingTotals(Vec<(SeriesKey, Total, Nanos)>);

#[derive(Debug)]
pub struct Totals {
    series: HashMap<SeriesKey, (Total, Nanos)>,
    max_series: usize,
}

impl Default for Totals {
    fn default() -> Self {
        Self::with_max_series(DEFAULT_MAX_SERIES)
    }
}

impl Totals {
    pub fn with_max_series(max_series: usize) -> Self {
        Self {
            series: HashMap::new(),
            max_series: max_series.max(1),
        }
    }

    /// Rewrites the delta sums and histograms of `request` as cumulative points (one
    /// per series; a histogram's points of one series merged), from the committed
    /// totals; returns what to commit.
    pub fn accumulate(&self, request: &mut ExportMetricsServiceRequest) -> PendingTotals {
        let mut pending: HashMap<SeriesKey, (Total, Nanos)> = HashMap::new();
        let metrics = request
            .resource_metrics
            .iter_mut()
            .flat_map(|resource| &mut resource.scope_metrics)
            .flat_map(|scope| &mut scope.metrics);
        for metric in metrics {
            let name = metric.name.clone();
            match &mut metric.data {
                Some(metric::Data::Sum(sum))
                    if sum.aggregation_temporality == AggregationTemporality::Delta as i32 =>
                {
                    for point in &mut sum.data_points {
                        self.add_sum(&mut pending, &name, point);
                    }
                    sum.aggregation_temporality = AggregationTemporality::Cumulative as i32;
                }
                Some(metric::Data::Histogram(histogram))
                    if histogram.aggregation_temporality
                        == AggregationTemporality::Delta as i32 =>
                {
                    let points = std::mem::take(&mut histogram.data_points);
                    histogram.data_points = self.add_histograms(&mut pending, &name, points);
                    histogram.aggregation_temporality = AggregationTemporality::Cumulative as i32;
                }
                _ => {}
            }
        }
        PendingTotals(
            pending
                .into_iter()
                .map(|(key, (total, time))| (key, total, time))
                .collect(),
        )
    }

    /// Keeps the totals of a request that was handed on.
    pub fn commit(&mut self, pending: PendingTotals) {
        for (key, total, time) in pending.0 {
            if !self.series.contains_key(&key) && self.series.len() >= self.max_series {
                self.forget_oldest();
            }
            self.series.insert(key, (total, time));
        }
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    fn forget_oldest(&mut self) {
        let oldest = self
            .series
            .iter()
            .min_by_key(|(_, (_, time))| *time)
            .map(|(key, _)| key.clone());
        if let Some(key) = oldest {
            self.series.remove(&key);
        }
    }

    fn current<'a>(
        &'a self,
        pending: &'a HashMap<SeriesKey, (Total, Nanos)>,
        key: &SeriesKey,
    ) -> Option<&'a Total> {
        pending
            .get(key)
            .or_else(|| self.series.get(key))
            .map(|(total, _)| total)
    }

    fn add_sum(
        &self,
        pending: &mut HashMap<SeriesKey, (Total, Nanos)>,
        name: &str,
        point: &mut NumberDataPoint,
    ) {
        let Some(number_data_point::Value::AsInt(delta)) = point.value else {
            return;
        };
        let key = (name.to_string(), text_attributes(&point.attributes));
        let (start, value) = match self.current(pending, &key) {
            Some(Total::Sum { start, value }) => (*start, value.saturating_add(delta)),
            _ => (point.start_time_unix_nano, delta),
        };
        point.start_time_unix_nano = start;
        point.value = Some(number_data_point::Value::AsInt(value));
        pending.insert(key, (Total::Sum { start, value }, point.time_unix_nano));
    }

    fn add_histograms(
        &self,
        pending: &mut HashMap<SeriesKey, (Total, Nanos)>,
        name: &str,
        points: Vec<HistogramDataPoint>,
    ) -> Vec<HistogramDataPoint> {
        let mut merged: Vec<(SeriesKey, HistogramDataPoint)> = Vec::new();
        for point in points {
            let key = (name.to_string(), text_attributes(&point.attributes));
            let (start, count, sum, buckets) = match self.current(pending, &key) {
                Some(Total::Histogram {
                    start,
                    count,
                    sum,
                    buckets,
                }) if buckets.len() == point.bucket_counts.len() => (
                    *start,
                    count.saturating_add(point.count),
                    sum + point.sum.unwrap_or_default(),
                    buckets
                        .iter()
                        .zip(&point.bucket_counts)
                        .map(|(total, delta)| total.saturating_add(*delta))
                        .collect::<Vec<_>>(),
                ),
                _ => (
                    point.start_time_unix_nano,
                    point.count,
                    point.sum.unwrap_or_default(),
                    point.bucket_counts.clone(),
                ),
            };
            let total = Total::Histogram {
                start,
                count,
                sum,
                buckets: buckets.clone(),
            };
            pending.insert(key.clone(), (total, point.time_unix_nano));
            let exemplars = match merged.iter().position(|(k, _)| *k == key) {
                Some(at) => {
                    let (_, earlier) = merged.remove(at);
                    let mut exemplars = earlier.exemplars;
                    exemplars.extend(point.exemplars);
                    exemplars
                }
                None => point.exemplars,
            };
            let skip = exemplars.len().saturating_sub(MAX_EXEMPLARS);
            merged.push((
                key,
                HistogramDataPoint {
                    start_time_unix_nano: start,
                    count,
                    sum: Some(sum),
                    bucket_counts: buckets,
                    exemplars: exemplars.into_iter().skip(skip).collect(),
                    min: None,
                    max: None,
                    ..point
                },
            ));
        }
        merged.into_iter().map(|(_, point)| point).collect()
    }
}

/// A point's attributes as `(key, text)` pairs, in their order.
fn text_attributes(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(text)) => text.clone(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use opscope_proto::otlp::common::v1::AnyValue;
    use opscope_proto::otlp::metrics::v1::{Histogram, Metric, ResourceMetrics, ScopeMetrics, Sum};

    use super::*;

    fn attribute(value: &str) -> Vec<KeyValue> {
        vec![KeyValue {
            key: "result".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.into())),
            }),
            ..KeyValue::default()
        }]
    }

    fn request(metric: Metric) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![metric],
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        }
    }

    fn deltas(points: &[(&str, i64, Nanos)]) -> ExportMetricsServiceRequest {
        let data_points = points
            .iter()
            .map(|(result, value, time)| NumberDataPoint {
                attributes: attribute(result),
                start_time_unix_nano: *time,
                time_unix_nano: *time,
                value: Some(number_data_point::Value::AsInt(*value)),
                ..NumberDataPoint::default()
            })
            .collect();
        request(Metric {
            name: "reconciles".into(),
            data: Some(metric::Data::Sum(Sum {
                data_points,
                aggregation_temporality: AggregationTemporality::Delta as i32,
                is_monotonic: true,
            })),
            ..Metric::default()
        })
    }

    fn sum_values(request: &ExportMetricsServiceRequest) -> Vec<(i64, Nanos)> {
        let metric = &request.resource_metrics[0].scope_metrics[0].metrics[0];
        let Some(metric::Data::Sum(sum)) = &metric.data else {
            return Vec::new();
        };
        assert_eq!(
            sum.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        sum.data_points
            .iter()
            .map(|point| match point.value {
                Some(number_data_point::Value::AsInt(v)) => (v, point.start_time_unix_nano),
                _ => (-1, 0),
            })
            .collect()
    }

    #[test]
    fn deltas_add_up_from_their_first_start_and_only_once_committed() {
        let mut totals = Totals::default();
        let mut first = deltas(&[("ok", 3, 10), ("error", 1, 11)]);
        let pending = totals.accumulate(&mut first);
        assert_eq!(sum_values(&first), vec![(3, 10), (1, 11)]);
        // Not committed (the request was refused): the same deltas give the same totals.
        let mut again = deltas(&[("ok", 3, 10), ("error", 1, 11)]);
        let _ = totals.accumulate(&mut again);
        assert_eq!(sum_values(&again), vec![(3, 10), (1, 11)]);
        totals.commit(pending);
        let mut later = deltas(&[("ok", 2, 20)]);
        totals.commit(totals.accumulate(&mut later));
        assert_eq!(sum_values(&later), vec![(5, 10)]);
    }

    #[test]
    fn histogram_points_of_one_series_merge_into_one() {
        let point = |bucket: usize, time: Nanos| HistogramDataPoint {
            attributes: attribute("ok"),
            start_time_unix_nano: time,
            time_unix_nano: time,
            count: 1,
            sum: Some(0.5),
            bucket_counts: (0..3).map(|i| u64::from(i == bucket)).collect(),
            explicit_bounds: vec![0.1, 1.0],
            ..HistogramDataPoint::default()
        };
        let histogram = |points| {
            request(Metric {
                name: "duration".into(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points: points,
                    aggregation_temporality: AggregationTemporality::Delta as i32,
                })),
                ..Metric::default()
            })
        };
        let mut totals = Totals::default();
        let mut first = histogram(vec![point(0, 5), point(1, 6), point(1, 7)]);
        totals.commit(totals.accumulate(&mut first));
        let mut second = histogram(vec![point(2, 9)]);
        totals.commit(totals.accumulate(&mut second));
        let metric = &second.resource_metrics[0].scope_metrics[0].metrics[0];
        let Some(metric::Data::Histogram(histogram)) = &metric.data else {
            panic!("a histogram");
        };
        let [point] = histogram.data_points.as_slice() else {
            panic!("one point per series: {:?}", histogram.data_points);
        };
        assert_eq!(point.count, 4);
        assert_eq!(point.bucket_counts, vec![1, 2, 1]);
        assert_eq!(point.start_time_unix_nano, 5);
        assert_eq!(point.sum, Some(2.0));
    }

    #[test]
    fn the_series_longest_without_update_is_forgotten_past_the_limit() {
        let mut totals = Totals::with_max_series(2);
        for (result, time) in [("a", 1), ("b", 2), ("c", 3)] {
            let mut request = deltas(&[(result, 1, time)]);
            totals.commit(totals.accumulate(&mut request));
        }
        assert_eq!(totals.len(), 2);
        let mut back = deltas(&[("a", 1, 4)]);
        let _ = totals.accumulate(&mut back);
        assert_eq!(sum_values(&back), vec![(1, 4)], "a starts again");
    }
}
