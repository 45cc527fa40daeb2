//! Start times of the cumulative series of one target (counters, histograms,
//! summaries): the first scrape that saw a series, moved on when its count resets.

use std::collections::HashMap;

use super::exposition::Labels;

/// A series: the OTLP metric name and the sample labels.
pub type SeriesKey = (String, Labels);

#[derive(Debug, Clone, Copy)]
struct Seen {
    start: u64,
    value: f64,
}

/// Only the series of the latest scrape are kept, so the map is bounded by the page.
#[derive(Debug, Default)]
pub struct SeriesStarts {
    previous: HashMap<SeriesKey, Seen>,
    current: HashMap<SeriesKey, Seen>,
}

impl SeriesStarts {
    /// The start of a series scraped at `now` with `value` (a running total): the one
    /// the page gives (`_created`), else the first scrape that saw it, or `now` when
    /// the total fell since the last scrape (the process restarted).
    pub fn start(&mut self, key: SeriesKey, value: f64, created: Option<u64>, now: u64) -> u64 {
        let start = match (created, self.previous.get(&key)) {
            (Some(created), _) => created,
            (None, Some(seen)) if value >= seen.value || value.is_nan() => seen.start,
            _ => now,
        };
        self.current.insert(key, Seen { start, value });
        start
    }

    /// Ends a scrape: series it did not show are forgotten.
    pub fn finish_scrape(&mut self) {
        self.previous = std::mem::take(&mut self.current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> SeriesKey {
        (
            name.to_string(),
            vec![("controller".into(), "rayjob".into())],
        )
    }

    #[test]
    fn first_scrape_then_kept_then_reset() {
        let mut starts = SeriesStarts::default();
        assert_eq!(starts.start(key("a"), 5.0, None, 100), 100);
        starts.finish_scrape();
        assert_eq!(starts.start(key("a"), 9.0, None, 200), 100);
        starts.finish_scrape();
        assert_eq!(starts.start(key("a"), 2.0, None, 300), 300, "a reset");
        starts.finish_scrape();
        assert_eq!(starts.start(key("a"), 3.0, None, 400), 300);
        assert_eq!(starts.start(key("b"), 3.0, Some(42), 400), 42);
    }

    #[test]
    fn series_gone_from_a_scrape_are_forgotten() {
        let mut starts = SeriesStarts::default();
        starts.start(key("a"), 5.0, None, 100);
        starts.finish_scrape();
        starts.finish_scrape();
        assert_eq!(starts.start(key("a"), 6.0, None, 300), 300);
    }
}
