//! The tick: while no event comes, event time follows the wall clock, less the
//! lateness, so that what time alone decides fires on time (a window sliding past a
//! loop, a finalizer's deadline, a leak's age, a resolution) while data late within
//! the lateness still counts. The agent ticks its correlators every [`TICK_INTERVAL`].

use std::collections::BTreeMap;
use std::time::Duration;

use opscope_model::timestamp::Nanos;

use crate::correlator::engine::CorrelatorStats;
use crate::correlator::processor::SharedCorrelator;

/// How often the correlators' event time follows the wall clock when idle.
pub const TICK_INTERVAL: Duration = Duration::from_secs(1);

/// The correlators of one process, by processor id, ticked together.
#[derive(Clone)]
pub struct Ticker {
    correlators: BTreeMap<String, SharedCorrelator>,
}

impl Ticker {
    pub fn new(correlators: BTreeMap<String, SharedCorrelator>) -> Self {
        Self { correlators }
    }

    /// Moves every correlator's event time on to `wall_clock` less its lateness, which
    /// fires and resolves what time alone decides (each correlator emits it to its
    /// sink); returns each one's figures after the tick, by processor id.
    pub fn tick(&self, wall_clock: Nanos) -> Vec<(&str, CorrelatorStats)> {
        self.correlators
            .iter()
            .map(|(id, correlator)| {
                correlator.tick(wall_clock);
                (id.as_str(), correlator.stats())
            })
            .collect()
    }
}

/// Where a tick at `wall_clock` moves event time: the wall clock less the `lateness`,
/// never back from the newest event time, the `watermark`.
pub(crate) fn tick_time(watermark: Nanos, wall_clock: Nanos, lateness: Nanos) -> Nanos {
    watermark.max(wall_clock.saturating_sub(lateness))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::correlator::CorrelatorConfig;
    use crate::correlator::test_support::*;
    use crate::correlator::window::nanos;
    use opscope_model::signal::{Signal, SignalState, SignalType};

    #[test]
    fn a_tick_moves_event_time_to_the_wall_clock_less_the_lateness_never_back() {
        assert_eq!(tick_time(secs(100), secs(400), secs(60)), secs(340));
        assert_eq!(tick_time(secs(100), secs(130), secs(60)), secs(100));
        assert_eq!(tick_time(secs(100), secs(10), secs(60)), secs(100));
    }

    #[test]
    fn a_tick_fires_what_time_alone_decides_and_reports_each_correlator() {
        let sent: Arc<Mutex<Vec<Signal>>> = Arc::default();
        let sink = {
            let sent = Arc::clone(&sent);
            Arc::new(move |signals: Vec<Signal>| sent.lock().unwrap().extend(signals))
        };
        let config = CorrelatorConfig::default();
        let lateness = nanos(config.lateness);
        let correlator = SharedCorrelator::new(config, sink);
        correlator.observe(vec![
            Ev::state("stuck", secs(0))
                .deleting(secs(0))
                .finalizers(&["example.com/cleanup"])
                .into(),
        ]);
        assert!(sent.lock().unwrap().is_empty());
        let ticker = Ticker::new(BTreeMap::from([("correlator".to_string(), correlator)]));

        let figures = ticker.tick(secs(6 * 60) + lateness);

        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0].signal, SignalType::FinalizerLeak);
        assert_eq!(sent[0].state, SignalState::Firing);
        assert_eq!(figures.len(), 1);
        assert_eq!(figures[0].0, "correlator");
        assert_eq!(figures[0].1.tracked_objects, 1);
    }
}
