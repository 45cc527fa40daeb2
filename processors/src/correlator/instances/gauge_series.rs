//! A fixed-size series of one runtime gauge of one operator instance: one averaged
//! sample per bucket over the window, and the least-squares line through them.

use std::time::Duration;

use crate::correlator::window::{Bucket, BucketRing};
use opscope_model::timestamp::Nanos;

/// Share of the buckets that must hold a sample for a trend.
const MIN_FILLED: f64 = 0.5;
/// The first sample must lie in this leading share of the window, so the trend
/// spans the whole window.
const LEADING_SHARE: f64 = 0.1;

#[derive(Debug, Clone, Copy, Default)]
struct GaugeSample {
    sum: f64,
    count: u32,
}

impl GaugeSample {
    fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / f64::from(self.count))
    }
}

impl Bucket for GaugeSample {
    fn absorb(&mut self, other: &Self) {
        self.sum += other.sum;
        self.count = self.count.saturating_add(other.count);
    }
}

/// The least-squares line through a series over its window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Trend {
    pub(crate) slope_per_second: f64,
    /// How well the line explains the samples: 1 is a straight line, 0 none at all.
    pub(crate) r_squared: f64,
    /// The newest sample (its bucket's mean).
    pub(crate) latest: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct GaugeSeries {
    samples: BucketRing<GaugeSample>,
}

impl GaugeSeries {
    /// A series of `buckets` averaged samples over `window`.
    pub(crate) fn new(window: Duration, buckets: usize) -> Self {
        Self {
            samples: BucketRing::new(window, buckets),
        }
    }

    pub(crate) fn record(&mut self, time: Nanos, value: f64) {
        if !value.is_finite() {
            return;
        }
        if let Some(sample) = self.samples.bucket_mut(time) {
            sample.sum += value;
            sample.count = sample.count.saturating_add(1);
        }
    }

    /// The trend over the window ending at `now`, when samples cover the window.
    pub(crate) fn trend(&self, now: Nanos) -> Option<Trend> {
        let points: Vec<(usize, f64)> = self
            .samples
            .window(now)
            .filter_map(|(place, sample)| sample.mean().map(|mean| (place, mean)))
            .collect();
        let buckets = self.samples.count() as f64;
        let (first_place, _) = *points.first()?;
        let (_, latest) = *points.last()?;
        let covered = points.len() >= 3
            && points.len() as f64 >= buckets * MIN_FILLED
            && first_place as f64 <= buckets * LEADING_SHARE;
        if !covered {
            return None;
        }
        let seconds = self.samples.width() as f64 / 1e9;
        let (slope, r_squared) = least_squares(
            points
                .iter()
                .map(|(place, mean)| (*place as f64 * seconds, *mean)),
        );
        Some(Trend {
            slope_per_second: slope,
            r_squared,
            latest,
        })
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.samples.footprint()
    }
}

/// Slope and coefficient of determination of the least-squares line through
/// `points`; a flat series has slope 0 and R² 0.
fn least_squares(points: impl Iterator<Item = (f64, f64)> + Clone) -> (f64, f64) {
    let (n, sum_x, sum_y) = points.clone().fold((0.0, 0.0, 0.0), |(n, sx, sy), (x, y)| {
        (n + 1.0, sx + x, sy + y)
    });
    if n < 2.0 {
        return (0.0, 0.0);
    }
    let (mean_x, mean_y) = (sum_x / n, sum_y / n);
    let (sxx, sxy, syy) = points.fold((0.0, 0.0, 0.0), |(sxx, sxy, syy), (x, y)| {
        let (dx, dy) = (x - mean_x, y - mean_y);
        (sxx + dx * dx, sxy + dx * dy, syy + dy * dy)
    });
    if sxx == 0.0 || syy == 0.0 {
        return (0.0, 0.0);
    }
    (sxy / sxx, sxy * sxy / (sxx * syy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::timestamp::NANOS_PER_SECOND;

    fn series(values: impl Iterator<Item = f64>) -> (GaugeSeries, Nanos) {
        let mut series = GaugeSeries::new(Duration::from_secs(900), 30);
        let mut now = 0;
        for (n, value) in values.enumerate() {
            now = 1_000 * NANOS_PER_SECOND + n as u64 * 30 * NANOS_PER_SECOND;
            series.record(now, value);
        }
        (series, now)
    }

    #[test]
    fn a_straight_rise_has_a_positive_slope_and_r_squared_one() {
        let (series, now) = series((0..30).map(|n| 100.0 + 2.0 * f64::from(n)));
        let trend = series.trend(now).unwrap();
        assert!(
            (trend.slope_per_second - 2.0 / 30.0).abs() < 1e-9,
            "{trend:?}"
        );
        assert!((trend.r_squared - 1.0).abs() < 1e-9);
        assert_eq!(trend.latest, 158.0);
    }

    #[test]
    fn a_flat_or_noisy_series_has_no_steady_rise() {
        let (flat, now) = series((0..30).map(|_| 50.0));
        assert_eq!(flat.trend(now).unwrap().r_squared, 0.0);
        let (noisy, now) = series((0..30).map(|n| if n % 2 == 0 { 10.0 } else { 90.0 }));
        assert!(noisy.trend(now).unwrap().r_squared < 0.1);
    }

    #[test]
    fn a_series_shorter_than_the_window_has_no_trend() {
        let (short, now) = series((0..20).map(f64::from));
        assert_eq!(short.trend(now), None);
    }
}
