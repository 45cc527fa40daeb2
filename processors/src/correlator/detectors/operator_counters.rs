//! An operator's own counters, scraped from its metrics endpoint: reconciles, reconcile
//! errors and work-queue retries per controller, API requests and 409 answers per
//! instance. They name no object, so they measure rather than locate: their rates join
//! the figures of the operator's object signals, and 409s that no object signal
//! accounts for fire a `write_conflict` on the operator pod that received them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::write_conflict::{ConflictCause, WriteConflictConfig};
use crate::correlator::compact::{bounded, hash_parts};
use crate::correlator::instances::instance_state::TrackedInstance;
use crate::correlator::instances::instance_table::InstanceTable;
use crate::correlator::instances::running_totals::{Growth, RunningTotals, Sample};
use crate::correlator::intake::events::{Counter, CounterEvent};
use crate::correlator::lifecycle::signal::{Finding, figures, severity_for};
use crate::correlator::window::{Bucket, BucketRing, nanos};
use opscope_model::kubernetes::ObjectRef;
use opscope_model::signal::{MAX_EVIDENCE, Signal, SignalState, SignalType};
use opscope_model::timestamp::Nanos;

/// Series followed per instance: a running total each, to turn samples into increases.
const MAX_SERIES: usize = 64;
/// Rates kept per instance: one per counter and controller.
const MAX_RATES: usize = 32;
/// Buckets of the sliding window rates are counted in.
const BUCKETS: usize = 12;
/// How often, in event time, the instances are evaluated.
const EVALUATION_INTERVAL: Duration = Duration::from_secs(1);

/// How much a counter grew within one bucket of time.
#[derive(Debug, Clone, Copy, Default)]
struct Increase(f64);

impl Bucket for Increase {
    fn absorb(&mut self, other: &Self) {
        self.0 += other.0;
    }
}

/// How one counter of one controller grew over the window.
#[derive(Debug, Clone)]
struct Rate {
    counter: Counter,
    controller: String,
    increases: BucketRing<Increase>,
}

/// What is kept of one operator instance's counters.
#[derive(Debug, Clone, Default)]
struct InstanceCounters {
    totals: RunningTotals<MAX_SERIES>,
    rates: Vec<Rate>,
}

impl InstanceCounters {
    /// Takes one sample; false when the instance follows as many series as it may.
    fn record(&mut self, event: &CounterEvent, window: Duration) -> bool {
        let increase = if event.cumulative {
            match self.increase_of_total(event) {
                Some(increase) => increase,
                None => return false,
            }
        } else {
            event.value
        };
        let known = self
            .rates
            .iter()
            .position(|rate| rate.counter == event.counter && rate.controller == event.controller);
        let rate = match known {
            Some(index) => self.rates.get_mut(index),
            None if self.rates.len() < MAX_RATES => {
                self.rates.push(Rate {
                    counter: event.counter,
                    controller: bounded(&event.controller),
                    increases: BucketRing::new(window, BUCKETS),
                });
                self.rates.last_mut()
            }
            None => return false,
        };
        if let Some(rate) = rate
            && increase.is_finite()
            && increase > 0.0
            && let Some(bucket) = rate.increases.bucket_mut(event.time)
        {
            bucket.0 += increase;
        }
        true
    }

    /// The growth of a running total since its previous sample: the whole value after
    /// a reset (the process restarted), nothing for its first sample or a late one.
    /// `None` when the series is new and no more can be followed.
    fn increase_of_total(&mut self, event: &CounterEvent) -> Option<f64> {
        let sample = Sample {
            series: hash_parts((event.counter, &event.controller, &event.series)),
            // Scrapes turned into counter events carry no start time.
            start: 0,
            time: event.time,
            value: event.value,
        };
        match self.totals.observe(sample, None) {
            Growth::Untracked => None,
            Growth::Nothing => Some(0.0),
            Growth::Grew { increase, .. } => Some(increase),
        }
    }

    /// How much `counter` grew over the window ending at `now`, over the controllers
    /// `controller` selects; `None` when the instance reports no such series.
    fn increase(&self, counter: Counter, controller: Option<&str>, now: Nanos) -> Option<f64> {
        let mut matched = self
            .rates
            .iter()
            .filter(|rate| rate.counter == counter)
            .filter(|rate| controller.is_none_or(|wanted| rate.controller == wanted))
            .peekable();
        matched.peek()?;
        Some(matched.map(|rate| rate.increases.total(now).0).sum())
    }
}

/// The counters of every operator instance followed, and their conflict signals.
#[derive(Debug, Clone)]
pub(crate) struct OperatorCounters {
    conflict: WriteConflictConfig,
    instances: InstanceTable<InstanceCounters>,
    next_evaluation: Nanos,
}

impl OperatorCounters {
    pub(crate) fn new(conflict: &WriteConflictConfig, max_instances: usize) -> Self {
        Self {
            conflict: conflict.clone(),
            instances: InstanceTable::new(max_instances),
            next_evaluation: 0,
        }
    }

    /// Instances followed.
    pub(crate) fn len(&self) -> usize {
        self.instances.len()
    }

    /// Instances evicted to make room, in total.
    pub(crate) fn evicted(&self) -> u64 {
        self.instances.evicted()
    }

    /// Takes one counter sample; false when it is of no use (no instance named, or a
    /// series too many). Signals of an evicted instance resolve into `out`.
    pub(crate) fn observe(
        &mut self,
        event: CounterEvent,
        now: Nanos,
        out: &mut Vec<Signal>,
    ) -> bool {
        let window = self.conflict.window;
        self.instances
            .entry(&event.operator, &event.instance, now, out)
            .is_some_and(|instance| {
                instance.seen(event.time);
                instance.state.record(&event, window)
            })
    }

    /// Evaluates the conflict signal of every instance once per evaluation interval of
    /// event time; operators named in `explained` already have object signals for
    /// their conflicts. Forgets instances idle for `idle_expiry` with nothing firing.
    pub(crate) fn sweep(
        &mut self,
        now: Nanos,
        explained: &BTreeSet<&str>,
        idle_expiry: Nanos,
        update_interval: Nanos,
        out: &mut Vec<Signal>,
    ) {
        if now < self.next_evaluation {
            return;
        }
        self.next_evaluation = now.saturating_add(nanos(EVALUATION_INTERVAL));
        let conflicted = self.conflicted_pods(now);
        let findings: Vec<Option<Finding>> = self
            .instances
            .values()
            .map(|instance| {
                if explained.contains(instance.operator.name.as_str()) {
                    None
                } else {
                    conflict_finding(instance, &conflicted, &self.conflict, now)
                }
            })
            .collect();
        for (instance, finding) in self.instances.values_mut().zip(findings) {
            out.extend(instance.step(SignalType::WriteConflict, finding, now, update_interval));
        }
        if let Some(cutoff) = now.checked_sub(idle_expiry) {
            self.instances.forget_idle(cutoff);
        }
    }

    /// The signals firing now.
    pub(crate) fn active(&self) -> impl Iterator<Item = &Signal> {
        self.instances.active()
    }

    /// Adds what the operator's counters say to a firing object signal: the rates of
    /// its controller for loops and leaks, the operator's 409 rate for conflicts.
    pub(crate) fn add_figures(&self, signal: &mut Signal, now: Nanos) {
        if signal.state != SignalState::Firing || signal.object.kind == "Pod" {
            return;
        }
        let per_minute = 60.0 / self.conflict.window.as_secs_f64();
        let instances = || {
            self.instances
                .values()
                .filter(|instance| instance.operator.name == signal.operator.name)
        };
        let total = |counter: Counter, controller: Option<&str>| {
            instances()
                .filter_map(|instance| instance.state.increase(counter, controller, now))
                .reduce(|a, b| a + b)
        };
        let added: Vec<(&str, Option<f64>)> = match signal.signal {
            SignalType::WriteConflict => vec![(
                "operator_conflicts_per_minute",
                total(Counter::ApiConflicts, None),
            )],
            SignalType::ReconcileLoop | SignalType::FinalizerLeak
                if !signal.controller.is_empty() =>
            {
                let controller = Some(signal.controller.as_str());
                vec![
                    (
                        "controller_reconciles_per_minute",
                        total(Counter::Reconciles, controller),
                    ),
                    (
                        "controller_errors_per_minute",
                        total(Counter::ReconcileErrors, controller),
                    ),
                    (
                        "controller_retries_per_minute",
                        total(Counter::Retries, controller),
                    ),
                ]
            }
            _ => Vec::new(),
        };
        for (name, increase) in added {
            if let Some(increase) = increase {
                signal
                    .figures
                    .insert(name.to_string(), increase * per_minute);
            }
        }
    }

    /// The pods of each operator that received 409s within the window ending at `now`.
    fn conflicted_pods(&self, now: Nanos) -> BTreeMap<&str, Vec<&ObjectRef>> {
        let mut conflicted: BTreeMap<&str, Vec<&ObjectRef>> = BTreeMap::new();
        for instance in self.instances.values() {
            if instance
                .state
                .increase(Counter::ApiConflicts, None, now)
                .is_some_and(|conflicts| conflicts > 0.0)
            {
                conflicted
                    .entry(instance.operator.name.as_str())
                    .or_default()
                    .push(&instance.pod);
            }
        }
        conflicted
    }
}

/// Whether an instance's 409s make a conflict at `now`: one pod of the operator
/// receiving them points at a stale cache, several at writers competing.
fn conflict_finding(
    instance: &TrackedInstance<InstanceCounters>,
    conflicted: &BTreeMap<&str, Vec<&ObjectRef>>,
    config: &WriteConflictConfig,
    now: Nanos,
) -> Option<Finding<'static>> {
    let conflicts = instance.state.increase(Counter::ApiConflicts, None, now)?;
    let threshold = f64::from(config.min_conflicts);
    let holds = if instance.firing() {
        conflicts > 0.0
    } else {
        conflicts >= threshold
    };
    if !holds {
        return None;
    }
    let pods = conflicted
        .get(instance.operator.name.as_str())
        .map_or(&[][..], Vec::as_slice);
    let cause = if pods.len() >= 2 {
        ConflictCause::ConcurrentWriters
    } else {
        ConflictCause::StaleCache
    };
    let mut figures = figures([
        ("conflicts", conflicts),
        (
            "conflicts_per_minute",
            conflicts * 60.0 / config.window.as_secs_f64(),
        ),
        ("instances", pods.len().max(1) as f64),
    ]);
    if let Some(requests) = instance
        .state
        .increase(Counter::ApiRequests, None, now)
        .filter(|requests| *requests > 0.0)
    {
        figures.push(("conflict_ratio", conflicts / requests));
    }
    let evidence = std::iter::once(&instance.pod)
        .chain(pods.iter().copied().filter(|pod| **pod != instance.pod))
        .take(MAX_EVIDENCE)
        .map(|pod| {
            format!(
                "counter rest_client_requests_total{{code=\"409\"}} of pod {}/{}",
                pod.namespace, pod.name
            )
        })
        .collect();
    Some(Finding {
        cause: Cow::Borrowed(cause.name()),
        severity: severity_for(conflicts, threshold),
        figures,
        evidence: Cow::Owned(evidence),
        hint: Cow::Owned(format!(
            "{} The operator's metrics do not say which objects conflict: its logs or the \
            API server's audit log do.",
            cause.hint()
        )),
        below_threshold: conflicts < threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlator::test_support::*;
    use opscope_model::signal::{Severity, SignalType};

    fn conflict_signals(signals: &[Signal]) -> Vec<&Signal> {
        signals
            .iter()
            .filter(|s| s.signal == SignalType::WriteConflict)
            .collect()
    }

    /// Scrapes of `pod` every 15 s for `minutes`: the 409 total grows by `per_scrape`.
    fn scrapes(pod: &str, minutes: u64, per_scrape: f64) -> Vec<Event> {
        (0..minutes * 4)
            .flat_map(|n| {
                let at = secs(n * 15);
                let scraped = n as f64;
                [
                    counter(
                        pod,
                        Counter::ApiConflicts,
                        "",
                        at,
                        3.0 + per_scrape * scraped,
                    ),
                    counter(pod, Counter::ApiRequests, "", at, 1000.0 + 50.0 * scraped),
                ]
            })
            .collect()
    }

    #[test]
    fn conflicts_counted_by_one_pod_are_a_stale_cache_on_that_pod() {
        let signals = run_until(scrapes("widget-operator-0", 3, 4.0), secs(180));
        let fired = conflict_signals(&signals);
        assert_eq!(fired[0].state, SignalState::Firing);
        assert_eq!(fired[0].cause, "stale_cache");
        assert_eq!(fired[0].object.display(), "Pod operators/widget-operator-0");
        assert_eq!(
            fired[0].id,
            "write_conflict:pods/operators/widget-operator-0"
        );
        assert_eq!(fired[0].severity, Severity::Warning);
        assert!(fired[0].figures["conflicts"] >= 5.0);
        let ratio = fired[0].figures["conflict_ratio"];
        assert!((ratio - 4.0 / 50.0).abs() < 1e-9, "{ratio}");
        assert_eq!(
            fired[0].evidence,
            ["counter rest_client_requests_total{code=\"409\"} of pod operators/widget-operator-0"]
        );
        assert!(fired[0].hint.contains("audit log"));
    }

    #[test]
    fn conflicts_on_two_pods_of_one_operator_are_concurrent_writers() {
        let mut events = scrapes("widget-operator-0", 2, 4.0);
        events.extend(scrapes("widget-operator-1", 2, 4.0));
        events.sort_by_key(Event::time);
        let signals = run_until(events, secs(120));
        let causes: BTreeSet<&str> = conflict_signals(&signals)
            .iter()
            .map(|s| s.cause.as_str())
            .collect();
        assert!(causes.contains("concurrent_writers"), "{causes:?}");
    }

    #[test]
    fn a_steady_total_or_a_restart_is_no_conflict() {
        let mut events = scrapes("widget-operator-0", 3, 0.0);
        // The process restarts: its total starts again from a low value.
        events.push(counter(
            "widget-operator-0",
            Counter::ApiConflicts,
            "",
            secs(181),
            1.0,
        ));
        assert!(conflict_signals(&run_until(events, secs(300))).is_empty());
    }

    #[test]
    fn a_late_sample_is_no_restart() {
        // One conflict a minute, too few to fire; then a sample from before the
        // newest arrives late, lower than it: counted whole, it would fire.
        let mut events = scrapes("widget-operator-0", 3, 0.25);
        events.push(counter(
            "widget-operator-0",
            Counter::ApiConflicts,
            "",
            secs(150),
            3.0 + 0.25 * 10.0,
        ));
        assert!(conflict_signals(&run_until(events, secs(200))).is_empty());
    }

    #[test]
    fn resolves_after_a_window_without_409s() {
        let mut events = scrapes("widget-operator-0", 2, 4.0);
        let last = 3.0 + 4.0 * 7.0;
        for n in 8..20u64 {
            events.push(counter(
                "widget-operator-0",
                Counter::ApiConflicts,
                "",
                secs(n * 15),
                last,
            ));
        }
        let signals = run_until(events, secs(300));
        let states: Vec<SignalState> = conflict_signals(&signals).iter().map(|s| s.state).collect();
        assert_eq!(states.first(), Some(&SignalState::Firing));
        assert_eq!(states.last(), Some(&SignalState::Resolved));
    }

    #[test]
    fn object_conflicts_of_the_operator_take_the_place_of_the_pod_signal() {
        let mut events = scrapes("widget-operator-0", 1, 4.0);
        for n in 0..10u64 {
            events.push(Ev::write("w", secs(n)).code(409).into());
        }
        events.sort_by_key(Event::time);
        let mut correlator = correlator();
        let signals = feed(&mut correlator, events);
        let fired = conflict_signals(&signals);
        assert!(!fired.is_empty());
        assert!(
            fired.iter().all(|s| s.object.kind == "Widget"),
            "{fired:#?}"
        );
        let active = correlator.active();
        let object = conflict_signals(&active)[0];
        assert!(object.figures["operator_conflicts_per_minute"] > 0.0);
    }

    #[test]
    fn a_loop_carries_the_rates_of_its_controller() {
        let mut events = Vec::new();
        for n in 0..8u64 {
            let at = secs(n * 15);
            let total = 100.0 + 150.0 * n as f64;
            events.push(counter(
                "widget-operator-0",
                Counter::Reconciles,
                "widget",
                at,
                total,
            ));
            events.push(counter(
                "widget-operator-0",
                Counter::Retries,
                "widget",
                at,
                7.0,
            ));
            events.push(counter(
                "widget-operator-0",
                Counter::Reconciles,
                "other",
                at,
                1e6,
            ));
        }
        for n in 0..100u64 {
            let at = secs(60) + millis(n * 300);
            events.push(Ev::write("w", at).status().into());
            events.push(Ev::reconcile("w", at, &format!("r{n}")).into());
        }
        events.sort_by_key(Event::time);
        let signals = run_until(events, secs(95));
        let looping = signals
            .iter()
            .find(|s| s.signal == SignalType::ReconcileLoop)
            .expect("a loop fires");
        // 150 per 15 s scrape, of which the window holds what grew since its start.
        assert!(looping.figures["controller_reconciles_per_minute"] >= 450.0);
        assert!(looping.figures["controller_reconciles_per_minute"] <= 600.0);
        assert_eq!(looping.figures["controller_retries_per_minute"], 0.0);
        assert!(!looping.figures.contains_key("controller_errors_per_minute"));
    }

    #[test]
    fn series_and_instances_are_bounded() {
        let mut counters = OperatorCounters::new(&WriteConflictConfig::default(), 2);
        let mut out = Vec::new();
        for n in 0..(MAX_SERIES + 5) {
            let mut event = counter_event("pod-0", Counter::ApiRequests, "", secs(1), 1.0);
            event.series = format!("code={n}");
            let kept = counters.observe(event, secs(1), &mut out);
            assert_eq!(kept, n < MAX_SERIES);
        }
        for pod in ["pod-1", "pod-2", "pod-3"] {
            let event = counter_event(pod, Counter::ApiRequests, "", secs(2), 1.0);
            counters.observe(event, secs(2), &mut out);
        }
        assert_eq!((counters.len(), counters.evicted()), (2, 2));
    }
}
