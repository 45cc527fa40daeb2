//! Resolved series as a remote-write `WriteRequest`: one time series per sample
//! name (`_bucket{le}`, `_sum`, ...), labels sorted with `__name__` among them, one
//! sample each at the send time, stale markers for removed series, and metadata per
//! family.

use std::collections::BTreeMap;

use opscope_proto::remote_write::{
    Label, MetricMetadata, MetricType, Sample as WireSample, TimeSeries, WriteRequest,
};

use super::model::{FamilyDesc, Kind, Labels, Sample};
use super::store::{Outcome, Update};

/// The NaN Prometheus reads as "this series ended" (a staleness marker).
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// The request for a batch's updates, every sample at `timestamp_ms`.
pub fn write_request(updates: &[Update], timestamp_ms: i64) -> WriteRequest {
    let mut timeseries = Vec::new();
    let mut metadata: BTreeMap<&str, MetricMetadata> = BTreeMap::new();
    for update in updates {
        let (value, stale) = match &update.outcome {
            Outcome::Set(value) => (value, false),
            Outcome::Removed(last) => (last, true),
        };
        for sample in value.samples(update.family.kind) {
            let value = if stale {
                f64::from_bits(STALE_NAN)
            } else {
                sample.value
            };
            timeseries.push(TimeSeries {
                labels: series_labels(&update.family.name, &update.labels, &sample),
                samples: vec![WireSample {
                    value,
                    timestamp: timestamp_ms,
                }],
            });
        }
        metadata
            .entry(update.family.name.as_str())
            .or_insert_with(|| family_metadata(&update.family));
    }
    WriteRequest {
        timeseries,
        metadata: metadata.into_values().collect(),
    }
}

fn series_labels(family: &str, labels: &Labels, sample: &Sample<'_>) -> Vec<Label> {
    let mut wire: Vec<Label> = labels
        .iter()
        .map(|(name, value)| Label {
            name: name.clone(),
            value: value.clone(),
        })
        .collect();
    if let Some((name, value)) = &sample.extra {
        wire.push(Label {
            name: name.to_string(),
            value: value.clone(),
        });
    }
    wire.push(Label {
        name: "__name__".into(),
        value: format!("{family}{}", sample.suffix),
    });
    wire.sort_by(|a, b| a.name.cmp(&b.name));
    wire
}

fn family_metadata(family: &FamilyDesc) -> MetricMetadata {
    let kind = match family.kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
        Kind::Histogram => MetricType::Histogram,
        Kind::Summary => MetricType::Summary,
        Kind::Info => MetricType::Info,
    };
    MetricMetadata {
        r#type: kind as i32,
        metric_family_name: family.name.clone(),
        help: family.help.clone(),
        unit: family.unit.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::prometheus::model::{HistogramValue, Value};

    fn update(name: &str, kind: Kind, outcome: Outcome) -> Update {
        Update {
            family: Arc::new(FamilyDesc {
                name: name.into(),
                help: "h".into(),
                unit: String::new(),
                kind,
                expires: true,
            }),
            labels: vec![("Zone".into(), "a".into()), ("job".into(), "j".into())],
            outcome,
        }
    }

    fn names(series: &TimeSeries) -> Vec<String> {
        series
            .labels
            .iter()
            .map(|l| format!("{}={}", l.name, l.value))
            .collect()
    }

    #[test]
    fn samples_become_sorted_series_at_one_time() {
        let histogram = HistogramValue::observation(&[1.0], 0.5, None);
        let request = write_request(
            &[
                update("requests", Kind::Counter, Outcome::Set(Value::Number(4.0))),
                update(
                    "latency",
                    Kind::Histogram,
                    Outcome::Set(Value::Histogram(histogram)),
                ),
            ],
            1_700_000_000_000,
        );
        let all: Vec<_> = request.timeseries.iter().map(names).collect();
        assert_eq!(
            all,
            vec![
                vec!["Zone=a", "__name__=requests_total", "job=j"],
                vec!["Zone=a", "__name__=latency_bucket", "job=j", "le=1"],
                vec!["Zone=a", "__name__=latency_bucket", "job=j", "le=+Inf"],
                vec!["Zone=a", "__name__=latency_sum", "job=j"],
                vec!["Zone=a", "__name__=latency_count", "job=j"],
            ]
        );
        let samples: Vec<_> = request
            .timeseries
            .iter()
            .flat_map(|s| s.samples.iter().map(|x| (x.value, x.timestamp)))
            .collect();
        assert_eq!(samples.first(), Some(&(4.0, 1_700_000_000_000)));
        assert!(samples.iter().all(|(_, t)| *t == 1_700_000_000_000));
        let families: Vec<_> = request
            .metadata
            .iter()
            .map(|m| (m.metric_family_name.as_str(), m.r#type))
            .collect();
        assert_eq!(
            families,
            vec![
                ("latency", MetricType::Histogram as i32),
                ("requests", MetricType::Counter as i32)
            ]
        );
    }

    #[test]
    fn removed_series_are_marked_stale() {
        let request = write_request(
            &[update(
                "active",
                Kind::Gauge,
                Outcome::Removed(Value::Number(1.0)),
            )],
            5,
        );
        let sample = request
            .timeseries
            .first()
            .and_then(|s| s.samples.first())
            .expect("one sample");
        assert_eq!(sample.value.to_bits(), STALE_NAN);
    }
}
