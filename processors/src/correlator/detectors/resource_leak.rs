//! The `resource_leak` detector: a runtime gauge of one operator instance (workqueue
//! depth, goroutines, memory) growing steadily over the window; one signal per instance.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

use crate::correlator::compact::bounded;
use crate::correlator::instances::gauge_series::{GaugeSeries, Trend};
use crate::correlator::instances::instance_table::InstanceTable;
use crate::correlator::intake::events::GaugeEvent;
use crate::correlator::lifecycle::signal::{Finding, figures, severity_for};
use crate::correlator::window::nanos;
use opscope_model::config::{FieldError, Validate, duration};
use opscope_model::config::{positive, share};
use opscope_model::kubernetes::ObjectRef;
use opscope_model::signal::{MAX_EVIDENCE, Signal, SignalType};
use opscope_model::timestamp::Nanos;

/// Gauges followed per instance.
const MAX_GAUGES: usize = 8;
/// Samples per series at most, whatever the settings.
const MAX_SAMPLES: u128 = 240;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceLeakConfig {
    /// How long a gauge must grow steadily.
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
    /// One averaged sample is kept per interval of the window.
    #[serde(deserialize_with = "duration")]
    pub sample_interval: Duration,
    /// The fit of the rising line (R²) above which growth counts as steady.
    pub min_r_squared: f64,
    /// A firing leak resolves once the fit falls below this, or the slope to zero.
    pub resolve_r_squared: f64,
    /// Operator instances followed at most; beyond, the least recently seen is evicted.
    pub max_instances: usize,
}

impl Default for ResourceLeakConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(15 * 60),
            sample_interval: Duration::from_secs(30),
            min_r_squared: 0.9,
            resolve_r_squared: 0.5,
            max_instances: 1_000,
        }
    }
}

impl ResourceLeakConfig {
    fn samples(&self) -> usize {
        let samples = self.window.as_nanos() / self.sample_interval.as_nanos().max(1);
        usize::try_from(samples.clamp(3, MAX_SAMPLES)).unwrap_or(3)
    }
}

impl Validate for ResourceLeakConfig {
    fn validate(&self) -> Result<(), FieldError> {
        positive("window", self.window)?;
        positive("sample_interval", self.sample_interval)?;
        let samples = self.window.as_nanos() / self.sample_interval.as_nanos();
        if !(3..=MAX_SAMPLES).contains(&samples) {
            return Err(FieldError::new(
                "sample_interval",
                format!("must cut the window into 3 to {MAX_SAMPLES} samples, not {samples}"),
            ));
        }
        share("min_r_squared", self.min_r_squared)?;
        if !(0.0..=self.min_r_squared).contains(&self.resolve_r_squared) {
            return Err(FieldError::new(
                "resolve_r_squared",
                "must lie between 0 and min_r_squared",
            ));
        }
        if self.max_instances == 0 {
            return Err(FieldError::new("max_instances", "must be at least 1"));
        }
        Ok(())
    }
}

/// What a growing gauge means, most telling first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum LeakCause {
    WorkqueueBacklog,
    GoroutineGrowth,
    MemoryGrowth,
}

/// Whether the resource-leak detector watches a runtime gauge.
pub fn watches(gauge: &str) -> bool {
    LeakCause::of_gauge(gauge).is_some()
}

impl LeakCause {
    /// The cause a growing gauge stands for, `None` for gauges not watched (counters
    /// included); a series of one work queue is named `workqueue_depth{<queue>}`.
    fn of_gauge(series: &str) -> Option<Self> {
        let name = series.split_once('{').map_or(series, |(name, _)| name);
        match name {
            "workqueue_depth" => Some(Self::WorkqueueBacklog),
            "go_goroutines" => Some(Self::GoroutineGrowth),
            "process_resident_memory_bytes" => Some(Self::MemoryGrowth),
            _ if name.starts_with("go_memstats_")
                && (name.ends_with("_bytes") || name.ends_with("_objects")) =>
            {
                Some(Self::MemoryGrowth)
            }
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::WorkqueueBacklog => "workqueue_backlog",
            Self::GoroutineGrowth => "goroutine_growth",
            Self::MemoryGrowth => "memory_growth",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Self::WorkqueueBacklog => {
                "The workqueue fills faster than it drains: look for what floods it \
                (a watch on a busy kind, a requeue loop), make reconciles cheaper, or raise \
                MaxConcurrentReconciles."
            }
            Self::GoroutineGrowth => {
                "Goroutines pile up: look for goroutines started per reconcile that never \
                end (watches, tickers, unclosed response bodies, missing context cancel); take a goroutine \
                profile."
            }
            Self::MemoryGrowth => {
                "Memory grows steadily: look for caches or maps keyed by object that are never \
                pruned, or informers on too many kinds; take a heap profile."
            }
        }
    }
}

/// One watched gauge of an instance.
#[derive(Debug, Clone)]
struct WatchedGauge {
    name: String,
    cause: LeakCause,
    series: GaugeSeries,
    /// When steady growth was first found, until the series turned flat.
    growing_since: Option<Nanos>,
}

/// How a gauge fares at one evaluation.
struct Assessment {
    trend: Trend,
    /// Steady growth: enough to fire.
    steady: bool,
    /// Still rising: enough to keep firing.
    rising: bool,
}

impl WatchedGauge {
    fn assess(&mut self, config: &ResourceLeakConfig, now: Nanos) -> Option<Assessment> {
        let Some(trend) = self.series.trend(now) else {
            self.growing_since = None;
            return None;
        };
        let upward = trend.slope_per_second > 0.0;
        let steady = upward && trend.r_squared > config.min_r_squared;
        let rising = upward && trend.r_squared >= config.resolve_r_squared;
        if steady {
            self.growing_since.get_or_insert(now);
        } else if !rising {
            self.growing_since = None;
        }
        Some(Assessment {
            trend,
            steady,
            rising,
        })
    }
}

/// What the leak detector keeps about one operator instance: its watched gauges.
#[derive(Debug, Clone, Default)]
struct InstanceGauges {
    gauges: Vec<WatchedGauge>,
}

impl InstanceGauges {
    /// Takes one sample; false when the instance follows as many gauges as it may.
    fn record(
        &mut self,
        event: &GaugeEvent,
        cause: LeakCause,
        config: &ResourceLeakConfig,
    ) -> bool {
        if let Some(gauge) = self
            .gauges
            .iter_mut()
            .find(|gauge| gauge.name == event.name)
        {
            gauge.series.record(event.time, event.value);
            return true;
        }
        if self.gauges.len() >= MAX_GAUGES {
            return false;
        }
        let mut series = GaugeSeries::new(config.window, config.samples());
        series.record(event.time, event.value);
        self.gauges.push(WatchedGauge {
            name: bounded(&event.name),
            cause,
            series,
            growing_since: None,
        });
        true
    }

    /// A leak of the instance's `pod` while a gauge grows steadily, or, while `firing`,
    /// still rises.
    fn finding(
        &mut self,
        pod: &ObjectRef,
        firing: bool,
        config: &ResourceLeakConfig,
        now: Nanos,
    ) -> Option<Finding<'static>> {
        let mut growing: Vec<(&WatchedGauge, Trend)> = Vec::new();
        for gauge in &mut self.gauges {
            if let Some(assessment) = gauge.assess(config, now)
                && (assessment.steady || (firing && assessment.rising))
            {
                growing.push((gauge, assessment.trend));
            }
        }
        growing.sort_by(|(a, ta), (b, tb)| {
            a.cause
                .cmp(&b.cause)
                .then(tb.r_squared.total_cmp(&ta.r_squared))
        });
        let (gauge, trend) = growing.first()?;
        let evidence = growing
            .iter()
            .take(MAX_EVIDENCE)
            .map(|(gauge, _)| format!("gauge {} of pod {}/{}", gauge.name, pod.namespace, pod.name))
            .collect();
        Some(leak_finding(gauge, trend, evidence, config, now))
    }
}

fn leak_finding(
    gauge: &WatchedGauge,
    trend: &Trend,
    evidence: Vec<String>,
    config: &ResourceLeakConfig,
    now: Nanos,
) -> Finding<'static> {
    let window = nanos(config.window);
    let growing_for = now
        .saturating_sub(gauge.growing_since.unwrap_or(now))
        .saturating_add(window);
    let window_seconds = config.window.as_secs_f64();
    Finding {
        cause: Cow::Borrowed(gauge.cause.name()),
        severity: severity_for(growing_for as f64, window as f64),
        figures: figures([
            ("slope_per_minute", trend.slope_per_second * 60.0),
            ("r_squared", trend.r_squared),
            ("value", trend.latest),
            ("growth_per_window", trend.slope_per_second * window_seconds),
            ("growing_minutes", (growing_for as f64 / 60e9).floor()),
        ]),
        evidence: Cow::Owned(evidence),
        hint: Cow::Borrowed(gauge.cause.hint()),
        below_threshold: false,
    }
}

/// The instances followed, their gauges and their signals.
#[derive(Debug, Clone)]
pub(crate) struct LeakDetector {
    config: ResourceLeakConfig,
    instances: InstanceTable<InstanceGauges>,
    next_sweep: Nanos,
}

impl LeakDetector {
    pub(crate) fn new(config: &ResourceLeakConfig) -> Self {
        Self {
            config: config.clone(),
            instances: InstanceTable::new(config.max_instances),
            next_sweep: 0,
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

    /// Takes one gauge sample; false when it is of no use here (a gauge not watched,
    /// no instance, or one gauge too many). Signals of an evicted instance resolve into `out`.
    pub(crate) fn observe(&mut self, event: GaugeEvent, now: Nanos, out: &mut Vec<Signal>) -> bool {
        let Some(cause) = LeakCause::of_gauge(&event.name) else {
            return false;
        };
        self.instances
            .entry(&event.operator, &event.instance, now, out)
            .is_some_and(|instance| {
                instance.seen(event.time);
                instance.state.record(&event, cause, &self.config)
            })
    }

    /// Evaluates every instance once per sample interval of event time, and forgets
    /// instances idle for `idle_expiry` with nothing firing.
    pub(crate) fn sweep(
        &mut self,
        now: Nanos,
        idle_expiry: Nanos,
        update_interval: Nanos,
        out: &mut Vec<Signal>,
    ) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now.saturating_add(nanos(self.config.sample_interval));
        for instance in self.instances.values_mut() {
            let firing = instance.firing();
            let finding = instance
                .state
                .finding(&instance.pod, firing, &self.config, now);
            out.extend(instance.step(SignalType::ResourceLeak, finding, now, update_interval));
        }
        if let Some(cutoff) = now.checked_sub(idle_expiry) {
            self.instances.forget_idle(cutoff);
        }
    }

    /// The signals firing now.
    pub(crate) fn active(&self) -> impl Iterator<Item = &Signal> {
        self.instances.active()
    }

    #[cfg(test)]
    pub(crate) fn footprint_per_instance(&self) -> impl Iterator<Item = usize> {
        self.instances.values().map(|instance| {
            std::mem::size_of_val(instance)
                + instance.state.gauges.capacity() * std::mem::size_of::<WatchedGauge>()
                + instance
                    .state
                    .gauges
                    .iter()
                    .map(|gauge| gauge.name.capacity() + gauge.series.footprint())
                    .sum::<usize>()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlator::test_support::*;
    use opscope_model::signal::{Severity, SignalState};

    fn leak_signals(signals: &[Signal]) -> Vec<&Signal> {
        signals
            .iter()
            .filter(|s| s.signal == SignalType::ResourceLeak)
            .collect()
    }

    /// One sample of `name` every 15 s for `minutes`, valued by `value(minute)`.
    fn samples(name: &str, minutes: u64, value: impl Fn(f64) -> f64) -> Vec<Event> {
        (0..minutes * 4)
            .map(|n| {
                let at = secs(n * 15);
                gauge("widget-operator-0", name, at, value(at as f64 / 60e9))
            })
            .collect()
    }

    #[test]
    fn goroutines_growing_steadily_over_the_window_are_a_leak() {
        let signals = run(samples("go_goroutines", 16, |minute| 200.0 + 10.0 * minute));
        let fired = leak_signals(&signals);
        assert!(
            fired.iter().all(|s| s.state == SignalState::Firing),
            "{signals:#?}"
        );
        let signal = fired[0];
        assert_eq!(signal.cause, "goroutine_growth");
        assert_eq!(signal.severity, Severity::Warning);
        assert_eq!(signal.object.kind, "Pod");
        assert_eq!(signal.object.namespace, "operators");
        assert_eq!(signal.object.name, "widget-operator-0");
        assert_eq!(signal.id, "resource_leak:pods/operators/widget-operator-0");
        assert!(
            (signal.figures["slope_per_minute"] - 10.0).abs() < 0.5,
            "{:?}",
            signal.figures
        );
        assert!(signal.figures["r_squared"] > 0.99);
        assert!(signal.hint.contains("goroutine"));
    }

    #[test]
    fn each_gauge_names_its_cause() {
        let cases = [
            ("workqueue_depth", "workqueue_backlog"),
            ("process_resident_memory_bytes", "memory_growth"),
            ("go_memstats_heap_inuse_bytes", "memory_growth"),
        ];
        for (gauge, cause) in cases {
            let signals = run(samples(gauge, 16, |minute| 1_000.0 + 50.0 * minute));
            assert_eq!(leak_signals(&signals)[0].cause, cause, "{gauge}");
        }
    }

    #[test]
    fn the_backlog_is_named_before_the_memory_it_costs() {
        let mut events = samples("process_resident_memory_bytes", 16, |minute| {
            5e7 + 1e6 * minute
        });
        events.extend(samples("workqueue_depth", 16, |minute| 3.0 * minute));
        events.sort_by_key(Event::time);
        let signals = run(events);
        let fired = leak_signals(&signals);
        assert!(fired.iter().all(|s| s.cause == "workqueue_backlog"));
        assert_eq!(fired[0].evidence.len(), 2);
    }

    #[test]
    fn no_leak_just_under_the_thresholds() {
        let short = samples("go_goroutines", 13, |minute| 200.0 + 10.0 * minute);
        assert!(
            leak_signals(&run(short)).is_empty(),
            "shorter than the window"
        );
        let flat = samples("go_goroutines", 30, |minute| {
            200.0 + (minute * 7.0).sin() * 20.0
        });
        assert!(leak_signals(&run(flat)).is_empty(), "noise");
        let counter = samples("go_memstats_alloc_bytes_total", 30, |minute| 1e6 * minute);
        assert!(
            leak_signals(&run(counter)).is_empty(),
            "counters are not watched"
        );
    }

    #[test]
    fn resolves_when_the_gauge_is_flat_for_a_window() {
        let events = samples("go_goroutines", 60, |minute| {
            200.0 + 10.0 * minute.min(20.0)
        });
        let signals = run(events);
        let states: Vec<SignalState> = leak_signals(&signals).iter().map(|s| s.state).collect();
        assert_eq!(states.first(), Some(&SignalState::Firing));
        assert_eq!(states.last(), Some(&SignalState::Resolved));
        let resolved = leak_signals(&signals).last().copied().unwrap();
        assert!(resolved.last_seen > secs(20 * 60) && resolved.last_seen <= secs(36 * 60));
    }

    #[test]
    fn out_of_order_samples_within_lateness_fire_the_same() {
        let mut events = samples("go_goroutines", 16, |minute| 200.0 + 10.0 * minute);
        shuffle_within(&mut events, 20);
        let signals = run(events);
        assert_eq!(leak_signals(&signals)[0].cause, "goroutine_growth");
    }

    #[test]
    fn growth_for_ten_windows_is_critical() {
        let signals = run(samples("go_goroutines", 152, |minute| {
            200.0 + 10.0 * minute
        }));
        let last = leak_signals(&signals).last().copied().unwrap();
        assert_eq!(last.severity, Severity::Critical);
        assert!(last.figures["growing_minutes"] >= 150.0);
    }
}
