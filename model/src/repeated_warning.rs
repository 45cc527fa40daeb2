//! A warning that repeats while its cause lasts (a name that does not resolve, a full
//! disk): said the first time, then at most once per interval with how many times it
//! was not said since, so a fault that recurs every second or every batch fills no log.
//! The caller logs; this only decides when, on the instants it is given.

use std::time::{Duration, Instant};

/// How often a repeated warning is said again, by default.
pub const REPEATED_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// The state of one warning: when it was last said, and how often it was held back
/// since.
#[derive(Debug, Clone)]
pub struct RepeatedWarning {
    interval: Duration,
    last_said: Option<Instant>,
    held_back: u64,
}

impl RepeatedWarning {
    /// A warning said again at most once per `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            last_said: None,
            held_back: 0,
        }
    }

    /// The warning occurred at `now`: `Some(held_back)` when it is to be said, with
    /// how many occurrences were not said since it last was; `None` when it is held
    /// back.
    pub fn occurred(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .last_said
            .is_none_or(|said| now.saturating_duration_since(said) >= self.interval);
        if !due {
            self.held_back += 1;
            return None;
        }
        self.last_said = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }

    /// As [`Self::occurred`], now.
    pub fn occurred_now(&mut self) -> Option<u64> {
        self.occurred(Instant::now())
    }

    /// The cause went away: the next occurrence is said at once. Returns how many
    /// occurrences were held back since the warning was last said, for a caller that
    /// says the fault is over.
    pub fn cleared(&mut self) -> u64 {
        self.last_said = None;
        std::mem::take(&mut self.held_back)
    }
}

impl Default for RepeatedWarning {
    fn default() -> Self {
        Self::new(REPEATED_WARNING_INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn said_first_then_once_per_interval_with_the_count_held_back() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut warning = RepeatedWarning::new(MINUTE);
        // A failure every second for three minutes.
        let said: Vec<(u64, u64)> = (0..180)
            .filter_map(|second| warning.occurred(at(second)).map(|held| (second, held)))
            .collect();
        assert_eq!(said, [(0, 0), (60, 59), (120, 59)]);
    }

    #[test]
    fn a_warning_after_a_quiet_interval_is_said_at_once_with_nothing_held_back() {
        let start = Instant::now();
        let mut warning = RepeatedWarning::new(MINUTE);
        assert_eq!(warning.occurred(start), Some(0));
        assert_eq!(warning.occurred(start + Duration::from_secs(1)), None);
        assert_eq!(warning.occurred(start + Duration::from_secs(61)), Some(1));
        assert_eq!(warning.occurred(start + Duration::from_secs(600)), Some(0));
    }

    #[test]
    fn cleared_says_what_was_held_back_and_the_next_occurrence_is_said() {
        let start = Instant::now();
        let mut warning = RepeatedWarning::new(MINUTE);
        assert_eq!(warning.occurred(start), Some(0));
        for second in 1..=4 {
            assert_eq!(warning.occurred(start + Duration::from_secs(second)), None);
        }
        assert_eq!(warning.cleared(), 4);
        assert_eq!(warning.occurred(start + Duration::from_secs(5)), Some(0));
        assert_eq!(warning.occurred(start + Duration::from_secs(6)), None);
    }

    #[test]
    fn an_instant_before_the_last_one_is_held_back() {
        let start = Instant::now() + MINUTE;
        let mut warning = RepeatedWarning::new(MINUTE);
        assert_eq!(warning.occurred(start), Some(0));
        assert_eq!(warning.occurred(start - Duration::from_secs(30)), None);
    }
}
