//! Running totals (cumulative counters) followed per series: each sample becomes the
//! growth since the series' previous one, a restart of the counting process detected.

use opscope_model::timestamp::Nanos;

/// One sample of a running total.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// A hash of the series' identity.
    pub(crate) series: u64,
    /// When the total began counting (the OTLP start time); 0 when not known.
    pub(crate) start: Nanos,
    pub(crate) time: Nanos,
    pub(crate) value: f64,
}

/// What one sample of a running total says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Growth {
    /// A series more than may be followed.
    Untracked,
    /// Nothing to count yet, or a sample not newer than the last.
    Nothing,
    /// It grew by `increase` since `from`.
    Grew { increase: f64, from: Nanos },
}

/// The last sample of each series followed, at most `MAX_SERIES` of them.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunningTotals<const MAX_SERIES: usize> {
    last: Vec<Sample>,
}

impl<const MAX_SERIES: usize> RunningTotals<MAX_SERIES> {
    /// How `sample` grew since its series' previous sample: by the whole value after a
    /// reset (a new start, or a lower value: the process restarted). A first sample is
    /// nothing, unless its start lies within `count_first_from_start_within` of it:
    /// then the total was begun recently enough that all of it counts from its start.
    pub(crate) fn observe(
        &mut self,
        sample: Sample,
        count_first_from_start_within: Option<Nanos>,
    ) -> Growth {
        let Some(last) = self
            .last
            .iter_mut()
            .find(|last| last.series == sample.series)
        else {
            if self.last.len() >= MAX_SERIES {
                return Growth::Untracked;
            }
            self.last.push(sample);
            return first_growth(&sample, count_first_from_start_within);
        };
        // A late sample: the next newer one covers its growth.
        if sample.time <= last.time {
            return Growth::Nothing;
        }
        let restarted = sample.start != last.start || sample.value < last.value;
        let growth = if restarted {
            // Counted since its new start when that is known to fall in between.
            let from = if sample.start > last.time && sample.start < sample.time {
                sample.start
            } else {
                last.time
            };
            Growth::Grew {
                increase: sample.value,
                from,
            }
        } else {
            Growth::Grew {
                increase: sample.value - last.value,
                from: last.time,
            }
        };
        *last = sample;
        growth
    }

    /// Bytes the series take.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.last.capacity() * std::mem::size_of::<Sample>()
    }
}

/// The growth a series' first sample says.
fn first_growth(sample: &Sample, count_from_start_within: Option<Nanos>) -> Growth {
    let began_within = count_from_start_within.is_some_and(|within| {
        sample.start > 0 && sample.start < sample.time && sample.time - sample.start <= within
    });
    if began_within {
        Growth::Grew {
            increase: sample.value,
            from: sample.start,
        }
    } else {
        Growth::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Totals = RunningTotals<2>;

    fn sample(series: u64, start: Nanos, time: Nanos, value: f64) -> Sample {
        Sample {
            series,
            start,
            time,
            value,
        }
    }

    fn grew(increase: f64, from: Nanos) -> Growth {
        Growth::Grew { increase, from }
    }

    #[test]
    fn a_total_grows_by_the_difference_since_its_last_sample() {
        let mut totals = Totals::default();
        assert_eq!(totals.observe(sample(1, 0, 10, 5.0), None), Growth::Nothing);
        assert_eq!(totals.observe(sample(1, 0, 20, 8.0), None), grew(3.0, 10));
        assert_eq!(totals.observe(sample(1, 0, 30, 8.0), None), grew(0.0, 20));
    }

    #[test]
    fn a_lower_value_or_a_new_start_is_a_reset_that_counts_whole() {
        let mut totals = Totals::default();
        totals.observe(sample(1, 5, 10, 50.0), None);
        assert_eq!(totals.observe(sample(1, 5, 20, 4.0), None), grew(4.0, 10));
        // A new start after the last sample: counted from it.
        assert_eq!(totals.observe(sample(1, 25, 30, 9.0), None), grew(9.0, 25));
        // A new start not after the last sample: counted from the last sample.
        assert_eq!(
            totals.observe(sample(1, 15, 40, 20.0), None),
            grew(20.0, 30)
        );
    }

    #[test]
    fn a_first_sample_counts_from_its_start_only_when_asked_and_recent() {
        let mut totals = Totals::default();
        assert_eq!(
            totals.observe(sample(1, 90, 100, 7.0), Some(10)),
            grew(7.0, 90)
        );
        assert_eq!(
            totals.observe(sample(2, 89, 100, 7.0), Some(10)),
            Growth::Nothing
        );
        let mut totals = Totals::default();
        assert_eq!(
            totals.observe(sample(1, 90, 100, 7.0), None),
            Growth::Nothing
        );
        assert_eq!(
            totals.observe(sample(2, 0, 100, 7.0), Some(1_000)),
            Growth::Nothing
        );
    }

    #[test]
    fn a_sample_not_newer_than_the_last_is_nothing_and_forgotten() {
        let mut totals = Totals::default();
        totals.observe(sample(1, 0, 20, 10.0), None);
        assert_eq!(totals.observe(sample(1, 0, 10, 4.0), None), Growth::Nothing);
        assert_eq!(
            totals.observe(sample(1, 0, 20, 10.0), None),
            Growth::Nothing
        );
        assert_eq!(totals.observe(sample(1, 0, 30, 12.0), None), grew(2.0, 20));
    }

    #[test]
    fn series_are_bounded() {
        let mut totals = Totals::default();
        totals.observe(sample(1, 0, 10, 1.0), None);
        totals.observe(sample(2, 0, 10, 1.0), None);
        assert_eq!(
            totals.observe(sample(3, 0, 10, 1.0), None),
            Growth::Untracked
        );
        assert_eq!(totals.observe(sample(2, 0, 20, 3.0), None), grew(2.0, 10));
    }
}
