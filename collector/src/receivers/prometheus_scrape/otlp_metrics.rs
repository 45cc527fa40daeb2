//! Scraped families as OTLP metrics: counters as cumulative monotonic sums, gauges and
//! untyped series as gauges, histograms with per-bucket counts, summaries.

use std::collections::BTreeMap;

use opscope_model::attributes::string_value;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue};
use opscope_proto::otlp::metrics::v1::summary_data_point::ValueAtQuantile;
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, Sum,
    Summary, SummaryDataPoint, metric::Data, number_data_point,
};

use super::exposition::{Family, FamilyType, Labels, Sample, parse_float, seconds_to_nanos};
use super::series_starts::SeriesStarts;

/// What the samples of one series of a family say, by name ending.
#[derive(Debug, Default)]
struct SeriesParts {
    value: Option<f64>,
    /// `(le, cumulative count)`.
    buckets: Vec<(f64, f64)>,
    /// `(quantile, value)`.
    quantiles: Vec<(f64, f64)>,
    sum: Option<f64>,
    count: Option<f64>,
    /// `_created`, in nanoseconds since the epoch.
    created: Option<u64>,
    timestamp: Option<u64>,
}

/// The metrics of a page scraped at `now` (nanoseconds since the epoch).
pub fn to_metrics(families: &[Family], now: u64, starts: &mut SeriesStarts) -> Vec<Metric> {
    let mut metrics = Vec::new();
    for family in families.iter().filter(|f| !f.samples.is_empty()) {
        match family.kind {
            FamilyType::Counter => metrics.push(counter(family, now, starts)),
            FamilyType::Histogram => metrics.push(histogram(family, now, starts)),
            FamilyType::Summary => metrics.push(summary(family, now, starts)),
            _ => metrics.extend(gauges(family, now)),
        }
    }
    starts.finish_scrape();
    metrics
}

/// A gauge of one value, as the scrape's own series (`up`) are written.
pub fn gauge(name: &str, value: f64, now: u64) -> Metric {
    metric(
        name,
        "",
        Data::Gauge(Gauge {
            data_points: vec![number_point(&[], value, now, now)],
        }),
    )
}

/// Named as its samples are, `_total` included, whichever format the page had.
fn counter(family: &Family, now: u64, starts: &mut SeriesStarts) -> Metric {
    let has_total = family
        .samples
        .iter()
        .any(|s| family.suffix_of(s) == "_total");
    let name = match has_total {
        true => format!("{}_total", family.name),
        false => family.name.clone(),
    };
    let data_points = series_of(family, None)
        .into_iter()
        .filter_map(|(labels, parts)| {
            let value = parts.value?;
            let time = parts.timestamp.unwrap_or(now);
            let start = starts.start((name.clone(), labels.clone()), value, parts.created, time);
            Some(number_point(&labels, value, start, time))
        })
        .collect();
    let sum = Sum {
        data_points,
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
        is_monotonic: true,
    };
    metric(&name, &family.help, Data::Sum(sum))
}

fn histogram(family: &Family, now: u64, starts: &mut SeriesStarts) -> Metric {
    let data_points = series_of(family, Some("le"))
        .into_iter()
        .map(|(labels, parts)| {
            let time = parts.timestamp.unwrap_or(now);
            let point = histogram_point(&labels, &parts, time);
            let key = (family.name.clone(), labels);
            let start = starts.start(key, point.count as f64, parts.created, time);
            HistogramDataPoint {
                start_time_unix_nano: start,
                ..point
            }
        })
        .collect();
    let histogram = Histogram {
        data_points,
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
    };
    metric(&family.name, &family.help, Data::Histogram(histogram))
}

/// Cumulative bucket counts made per-bucket; the last bucket is everything above the
/// highest finite bound (`+Inf`, else `_count`).
fn histogram_point(
    labels: &[(String, String)],
    parts: &SeriesParts,
    time: u64,
) -> HistogramDataPoint {
    let mut buckets = parts.buckets.clone();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let infinite = buckets.iter().find(|(bound, _)| *bound == f64::INFINITY);
    let total = parts
        .count
        .or(infinite.map(|(_, count)| *count))
        .unwrap_or_default();
    let finite: Vec<(f64, f64)> = buckets.into_iter().filter(|(b, _)| b.is_finite()).collect();
    let mut bucket_counts = Vec::with_capacity(finite.len() + 1);
    let mut below = 0.0_f64;
    for (_, cumulative) in &finite {
        bucket_counts.push(count_of(cumulative - below));
        below = below.max(*cumulative);
    }
    bucket_counts.push(count_of(total - below));
    HistogramDataPoint {
        attributes: attributes(labels),
        time_unix_nano: time,
        count: count_of(total),
        sum: parts.sum,
        bucket_counts,
        explicit_bounds: finite.into_iter().map(|(bound, _)| bound).collect(),
        ..Default::default()
    }
}

fn summary(family: &Family, now: u64, starts: &mut SeriesStarts) -> Metric {
    let data_points = series_of(family, Some("quantile"))
        .into_iter()
        .map(|(labels, parts)| {
            let time = parts.timestamp.unwrap_or(now);
            let count = parts.count.unwrap_or_default();
            let key = (family.name.clone(), labels.clone());
            let start = starts.start(key, count, parts.created, time);
            SummaryDataPoint {
                attributes: attributes(&labels),
                start_time_unix_nano: start,
                time_unix_nano: time,
                count: count_of(count),
                sum: parts.sum.unwrap_or_default(),
                quantile_values: parts
                    .quantiles
                    .iter()
                    .map(|&(quantile, value)| ValueAtQuantile { quantile, value })
                    .collect(),
                ..Default::default()
            }
        })
        .collect();
    metric(
        &family.name,
        &family.help,
        Data::Summary(Summary { data_points }),
    )
}

/// Gauges, untyped series and the rarer OpenMetrics types: a gauge per sample name.
fn gauges(family: &Family, now: u64) -> Vec<Metric> {
    let mut by_name: BTreeMap<&str, Vec<NumberDataPoint>> = BTreeMap::new();
    for sample in &family.samples {
        let time = sample.timestamp.unwrap_or(now);
        let point = number_point(&sample.labels, sample.value, 0, time);
        by_name.entry(&sample.name).or_default().push(point);
    }
    by_name
        .into_iter()
        .map(|(name, data_points)| metric(name, &family.help, Data::Gauge(Gauge { data_points })))
        .collect()
}

/// The family's samples by series: their labels less `special` (`le`, `quantile`).
fn series_of(family: &Family, special: Option<&str>) -> BTreeMap<Labels, SeriesParts> {
    let mut series: BTreeMap<Labels, SeriesParts> = BTreeMap::new();
    for sample in &family.samples {
        let mut labels: Labels = sample
            .labels
            .iter()
            .filter(|(name, _)| Some(name.as_str()) != special)
            .cloned()
            .collect();
        labels.sort();
        let parts = series.entry(labels).or_default();
        parts.absorb(sample, family.suffix_of(sample), special);
    }
    series
}

impl SeriesParts {
    fn absorb(&mut self, sample: &Sample, suffix: &str, special: Option<&str>) {
        let value = sample.value;
        let special_value = special
            .and_then(|name| sample.label(name))
            .and_then(parse_float);
        match (suffix, special_value) {
            ("_bucket", Some(bound)) => self.buckets.push((bound, value)),
            ("" | "_total", Some(quantile)) => self.quantiles.push((quantile, value)),
            ("" | "_total", None) => self.value = Some(value),
            ("_sum", _) => self.sum = Some(value),
            ("_count", _) => self.count = Some(value),
            ("_created", _) => self.created = seconds_to_nanos(value),
            _ => {}
        }
        self.timestamp = self.timestamp.or(sample.timestamp);
    }
}

fn number_point(labels: &[(String, String)], value: f64, start: u64, time: u64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attributes(labels),
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    }
}

fn metric(name: &str, description: &str, data: Data) -> Metric {
    Metric {
        name: name.to_string(),
        description: description.to_string(),
        data: Some(data),
        ..Default::default()
    }
}

fn attributes(labels: &[(String, String)]) -> Vec<KeyValue> {
    labels
        .iter()
        .map(|(key, value)| KeyValue {
            key: key.clone(),
            value: Some(AnyValue {
                value: Some(string_value(value.as_str())),
            }),
            ..Default::default()
        })
        .collect()
}

/// A count written as a float: negative, NaN and infinite counts are 0.
fn count_of(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value.round() as u64
    } else {
        0
    }
}

#[cfg(test)]
#[path = "otlp_metrics_tests.rs"]
mod tests;
