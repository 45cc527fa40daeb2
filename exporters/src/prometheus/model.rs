//! The series model both Prometheus outputs read: metric families, series values,
//! the changes a batch makes to them, and the samples a series stands for
//! (`_total`, `_bucket{le}`, `_sum`, `_count`, ...).

use std::sync::Arc;

/// Label pairs of a series, sorted by name, names unique.
pub type Labels = Vec<(String, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Info,
}

impl Kind {
    /// What each sample name adds to the family name.
    pub fn suffixes(self) -> &'static [&'static str] {
        match self {
            Self::Counter => &["_total"],
            Self::Gauge => &[""],
            Self::Histogram => &["_bucket", "_sum", "_count"],
            Self::Summary => &["", "_sum", "_count"],
            Self::Info => &["_info"],
        }
    }
}

/// What every series of a family shares.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyDesc {
    /// Valid metric name without the `_total` of counters or the `_info` of infos.
    pub name: String,
    pub help: String,
    /// The unit word `name` ends with (`seconds`), or empty.
    pub unit: String,
    pub kind: Kind,
    /// Whether its series are dropped once not updated for `metric_expiration`.
    pub expires: bool,
}

impl FamilyDesc {
    /// Every name the family's exposition uses: its own and its samples'.
    pub fn exposed_names(&self) -> Vec<String> {
        let mut names = vec![self.name.clone()];
        for suffix in self.kind.suffixes().iter().filter(|s| !s.is_empty()) {
            names.push(format!("{}{suffix}", self.name));
        }
        names
    }
}

/// A trace reference attached to one histogram bucket (OpenMetrics only).
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    pub labels: Labels,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistogramValue {
    /// Finite upper bounds, ascending; the `+Inf` bucket follows them.
    pub bounds: Vec<f64>,
    /// Observations per bucket, not cumulative: one more entry than `bounds`.
    pub counts: Vec<u64>,
    pub sum: f64,
    /// The latest exemplar of each bucket: empty, or one entry per bucket.
    pub exemplars: Vec<Option<Exemplar>>,
}

impl HistogramValue {
    /// One observation in a histogram with these bounds (the tests' building block).
    #[cfg(test)]
    pub fn observation(bounds: &[f64], value: f64, exemplar: Option<Exemplar>) -> Self {
        let bucket = bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(bounds.len());
        let counts = (0..=bounds.len()).map(|i| u64::from(i == bucket)).collect();
        let exemplars = match exemplar {
            Some(exemplar) => (0..=bounds.len())
                .map(|i| (i == bucket).then(|| exemplar.clone()))
                .collect(),
            None => Vec::new(),
        };
        Self {
            bounds: bounds.to_vec(),
            counts,
            sum: value,
            exemplars,
        }
    }

    /// Adds another histogram's observations, when the buckets are the same.
    fn add(&self, other: &HistogramValue) -> Option<HistogramValue> {
        if self.bounds != other.bounds || self.counts.len() != other.counts.len() {
            return None;
        }
        let counts = self
            .counts
            .iter()
            .zip(&other.counts)
            .map(|(a, b)| a.saturating_add(*b))
            .collect();
        let exemplars = if other.exemplars.is_empty() {
            self.exemplars.clone()
        } else {
            let mine = self.exemplars.iter().chain(std::iter::repeat(&None));
            other
                .exemplars
                .iter()
                .zip(mine)
                .map(|(new, old)| new.clone().or_else(|| old.clone()))
                .collect()
        };
        Some(HistogramValue {
            bounds: self.bounds.clone(),
            counts,
            sum: self.sum + other.sum,
            exemplars,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SummaryValue {
    /// `(quantile, value)` pairs.
    pub quantiles: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A counter's, gauge's or info's value.
    Number(f64),
    Histogram(HistogramValue),
    Summary(SummaryValue),
}

impl Value {
    /// The samples the value stands for, in exposition order.
    pub fn samples(&self, kind: Kind) -> Vec<Sample<'_>> {
        match self {
            Value::Number(value) => {
                let suffix = kind.suffixes().first().copied().unwrap_or_default();
                vec![Sample::plain(suffix, *value)]
            }
            Value::Histogram(histogram) => histogram_samples(histogram),
            Value::Summary(summary) => {
                let mut samples: Vec<Sample<'_>> = summary
                    .quantiles
                    .iter()
                    .map(|(quantile, value)| Sample {
                        extra: Some(("quantile", format_float(*quantile))),
                        ..Sample::plain("", *value)
                    })
                    .collect();
                samples.push(Sample::plain("_sum", summary.sum));
                samples.push(Sample::plain("_count", summary.count as f64));
                samples
            }
        }
    }
}

fn histogram_samples(histogram: &HistogramValue) -> Vec<Sample<'_>> {
    let mut samples = Vec::with_capacity(histogram.counts.len() + 2);
    let mut cumulative = 0u64;
    let bounds = histogram.bounds.iter().copied().chain([f64::INFINITY]);
    for (i, (bound, count)) in bounds.zip(&histogram.counts).enumerate() {
        cumulative = cumulative.saturating_add(*count);
        samples.push(Sample {
            extra: Some(("le", format_float(bound))),
            exemplar: histogram.exemplars.get(i).and_then(Option::as_ref),
            ..Sample::plain("_bucket", cumulative as f64)
        });
    }
    samples.push(Sample::plain("_sum", histogram.sum));
    samples.push(Sample::plain("_count", cumulative as f64));
    samples
}

/// One sample of a series: one exposition line, one remote-write series.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// Added to the family name: `_total`, `_bucket`, ...
    pub suffix: &'static str,
    /// `le` or `quantile`, with its value.
    pub extra: Option<(&'static str, String)>,
    pub value: f64,
    pub exemplar: Option<&'a Exemplar>,
}

impl Sample<'_> {
    fn plain(suffix: &'static str, value: f64) -> Self {
        Self {
            suffix,
            extra: None,
            value,
            exemplar: None,
        }
    }
}

/// A number as Prometheus writes it: `+Inf`, `-Inf`, `NaN`, else the shortest
/// decimal that reads back to the same value (`1`, `0.25`).
pub fn format_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{value}")
    }
}

/// What a batch does to one series.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The value is now this (gauges, cumulative data, signals).
    Set(Value),
    /// The value grows by this (delta data, counted events).
    Add(Value),
    Remove,
}

impl Op {
    /// The series' value after the operation; `None` when it is removed. A histogram
    /// added to one with other buckets starts the series again.
    pub fn apply(&self, current: Option<&Value>) -> Option<Value> {
        match (self, current) {
            (Op::Remove, _) => None,
            (Op::Set(value), _) | (Op::Add(value), None) => Some(value.clone()),
            (Op::Add(Value::Number(add)), Some(Value::Number(old))) => {
                Some(Value::Number(old + add))
            }
            (Op::Add(Value::Histogram(add)), Some(Value::Histogram(old))) => Some(
                Value::Histogram(old.add(add).unwrap_or_else(|| add.clone())),
            ),
            (Op::Add(value), Some(_)) => Some(value.clone()),
        }
    }
}

/// One operation on the series `labels` of `family`.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub family: Arc<FamilyDesc>,
    pub labels: Labels,
    pub op: Op,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exemplar(trace: &str) -> Exemplar {
        Exemplar {
            labels: vec![("trace_id".into(), trace.into())],
            value: 0.3,
        }
    }

    #[test]
    fn histogram_samples_are_cumulative_and_end_with_inf() {
        let bounds = [0.1, 1.0];
        let mut value = HistogramValue::observation(&bounds, 0.3, Some(exemplar("a")));
        value = value
            .add(&HistogramValue::observation(&bounds, 5.0, None))
            .expect("same buckets");
        let value = Value::Histogram(value);
        let samples = value.samples(Kind::Histogram);
        let lines: Vec<_> = samples
            .iter()
            .map(|s| {
                let le = s.extra.as_ref().map(|(_, v)| v.as_str()).unwrap_or("");
                (s.suffix, le.to_string(), s.value, s.exemplar.is_some())
            })
            .collect();
        assert_eq!(
            lines,
            vec![
                ("_bucket", "0.1".to_string(), 0.0, false),
                ("_bucket", "1".to_string(), 1.0, true),
                ("_bucket", "+Inf".to_string(), 2.0, false),
                ("_sum", String::new(), 5.3, false),
                ("_count", String::new(), 2.0, false),
            ]
        );
    }

    #[test]
    fn adding_keeps_older_exemplars_and_restarts_on_new_buckets() {
        let old = Value::Histogram(HistogramValue::observation(
            &[1.0],
            0.5,
            Some(exemplar("a")),
        ));
        let newer = HistogramValue::observation(&[1.0], 2.0, Some(exemplar("b")));
        let Some(Value::Histogram(sum)) = Op::Add(Value::Histogram(newer)).apply(Some(&old)) else {
            panic!("a histogram");
        };
        assert_eq!(sum.counts, vec![1, 1]);
        assert_eq!(
            sum.exemplars,
            vec![Some(exemplar("a")), Some(exemplar("b"))]
        );
        let other = HistogramValue::observation(&[2.0, 4.0], 3.0, None);
        let restarted = Op::Add(Value::Histogram(other.clone())).apply(Some(&old));
        assert_eq!(restarted, Some(Value::Histogram(other)));
    }

    #[test]
    fn numbers_add_set_and_remove() {
        let old = Value::Number(2.0);
        assert_eq!(
            Op::Add(Value::Number(3.0)).apply(Some(&old)),
            Some(Value::Number(5.0))
        );
        assert_eq!(
            Op::Set(Value::Number(1.0)).apply(Some(&old)),
            Some(Value::Number(1.0))
        );
        assert_eq!(Op::Remove.apply(Some(&old)), None);
        assert_eq!(
            Op::Add(Value::Number(3.0)).apply(None),
            Some(Value::Number(3.0))
        );
    }

    #[test]
    fn floats_are_written_as_prometheus_reads_them() {
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(0.25), "0.25");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
        assert_eq!(format_float(-3.5e-7), "-0.00000035");
    }
}
