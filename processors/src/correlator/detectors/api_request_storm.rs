//! The `api_request_storm` detector: an operator pod whose send calls to the API
//! server, as the kernel probe counts them, stay above a rate for a while; one signal
//! per pod. Its rates also join the figures of the operator's other signals.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

use crate::correlator::compact::hash_parts;
use crate::correlator::instances::instance_table::InstanceTable;
use crate::correlator::instances::running_totals::{Growth, RunningTotals, Sample};
use crate::correlator::intake::events::{ApiTraffic, ApiTrafficEvent, ConnectionOutcome};
use crate::correlator::lifecycle::signal::{Finding, figures, severity_for};
use crate::correlator::window::{Bucket, BucketRing, nanos};
use opscope_model::config::{FieldError, Validate, duration, positive};
use opscope_model::kubernetes::{ObjectRef, OperatorRef};
use opscope_model::signal::{Signal, SignalState, SignalType};
use opscope_model::timestamp::Nanos;

/// Running totals followed per pod: a few measures of each of its containers.
const MAX_SERIES: usize = 64;
/// Buckets the duration is cut into.
const BUCKETS: usize = 24;
/// How often, in event time, the pods are evaluated.
const EVALUATION_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiRequestStormConfig {
    /// Send calls per second to the API server above which a pod storms.
    pub min_sends_per_second: f64,
    /// How long the rate must hold above the threshold.
    #[serde(deserialize_with = "duration")]
    pub duration: Duration,
    /// The newest stretch of samples a rate is measured over: at least the kernel
    /// probe's interval, best a few of them.
    #[serde(deserialize_with = "duration")]
    pub rate_window: Duration,
    /// Operator pods followed at most; beyond, the least recently seen is evicted.
    pub max_instances: usize,
}

impl Default for ApiRequestStormConfig {
    fn default() -> Self {
        Self {
            min_sends_per_second: 50.0,
            duration: Duration::from_secs(120),
            rate_window: Duration::from_secs(30),
            max_instances: 1_000,
        }
    }
}

impl ApiRequestStormConfig {
    /// The newest buckets the rate window spans.
    fn rate_buckets(&self) -> usize {
        let width = (self.duration.as_nanos() / BUCKETS as u128).max(1);
        let buckets = self.rate_window.as_nanos().div_ceil(width);
        usize::try_from(buckets).map_or(BUCKETS, |buckets| buckets.clamp(1, BUCKETS))
    }
}

impl Validate for ApiRequestStormConfig {
    fn validate(&self) -> Result<(), FieldError> {
        let threshold = self.min_sends_per_second;
        if !threshold.is_finite() || threshold <= 0.0 {
            return Err(FieldError::new(
                "min_sends_per_second",
                format!("must be a number above 0, not {threshold}"),
            ));
        }
        positive("duration", self.duration)?;
        positive("rate_window", self.rate_window)?;
        if self.rate_window > self.duration {
            return Err(FieldError::new(
                "rate_window",
                "must not be longer than duration",
            ));
        }
        if self.max_instances == 0 {
            return Err(FieldError::new("max_instances", "must be at least 1"));
        }
        Ok(())
    }
}

/// Why a pod storms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StormCause {
    /// It calls the API server again and again: its own writes re-trigger it, or it
    /// retries without backing off.
    SelfTriggeredOrRetryStorm,
    /// Most of its connections fail, and it keeps reconnecting.
    ConnectionRefused,
}

impl StormCause {
    fn name(self) -> &'static str {
        match self {
            Self::SelfTriggeredOrRetryStorm => "self_triggered_or_retry_storm",
            Self::ConnectionRefused => "connection_refused",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Self::SelfTriggeredOrRetryStorm => {
                "The pod calls the API server far more often than a healthy controller: look at \
                its reconcile loop (event filters such as GenerationChangedPredicate, so that its \
                own status writes do not trigger it again; status written only when it changed) \
                and at its retries (exponential backoff instead of an immediate or fixed requeue). \
                Its logs or traces name the objects, when collected."
            }
            Self::ConnectionRefused => {
                "Most of the pod's connections to the API server fail (refused, reset, timed out) \
                and it keeps reconnecting: check the API server's health and the address the \
                operator uses, and make its retries back off exponentially (client-go's rate \
                limiter, the work queue's rate limiting) instead of reconnecting at once."
            }
        }
    }
}

/// What a pod's counters grew by within one bucket of time, and the span of event
/// time those increases cover (from the sample before the first to the newest).
#[derive(Debug, Clone, Copy, Default)]
struct Traffic {
    sends: f64,
    sent_bytes: f64,
    established: f64,
    refused: f64,
    /// Connections not established: refused, reset, timed out or failed.
    failed: f64,
    span: Option<(Nanos, Nanos)>,
}

impl Bucket for Traffic {
    fn absorb(&mut self, other: &Self) {
        self.sends += other.sends;
        self.sent_bytes += other.sent_bytes;
        self.established += other.established;
        self.refused += other.refused;
        self.failed += other.failed;
        self.span = match (self.span, other.span) {
            (Some((from, to)), Some((other_from, other_to))) => {
                Some((from.min(other_from), to.max(other_to)))
            }
            (mine, other) => mine.or(other),
        };
    }
}

impl Traffic {
    fn add(&mut self, measure: ApiTraffic, increase: f64, span: (Nanos, Nanos)) {
        let count = match measure {
            ApiTraffic::SendCalls => &mut self.sends,
            ApiTraffic::SentBytes => &mut self.sent_bytes,
            ApiTraffic::Connections(ConnectionOutcome::Established) => &mut self.established,
            ApiTraffic::Connections(ConnectionOutcome::Refused) => {
                self.refused += increase;
                &mut self.failed
            }
            ApiTraffic::Connections(_) => &mut self.failed,
        };
        *count += increase;
        self.absorb(&Self {
            span: Some(span),
            ..Self::default()
        });
    }

    /// The rates over the span covered, `None` when no span is.
    fn rates(&self) -> Option<Rates> {
        let (from, to) = self.span?;
        let seconds = to.checked_sub(from).filter(|span| *span > 0)? as f64 / 1e9;
        Some(Rates {
            sends_per_second: self.sends / seconds,
            sent_bytes_per_second: self.sent_bytes / seconds,
            refused_per_minute: self.refused * 60.0 / seconds,
            failed_per_minute: self.failed * 60.0 / seconds,
            established_per_minute: self.established * 60.0 / seconds,
            newest: to,
        })
    }
}

/// A pod's rates over its newest samples.
#[derive(Debug, Clone, Copy)]
struct Rates {
    sends_per_second: f64,
    sent_bytes_per_second: f64,
    refused_per_minute: f64,
    failed_per_minute: f64,
    established_per_minute: f64,
    /// The newest sample measured.
    newest: Nanos,
}

/// What the detector keeps of one operator pod's traffic.
#[derive(Debug, Clone, Default)]
struct PodTraffic {
    totals: RunningTotals<MAX_SERIES>,
    /// Increases over the detector's duration; created with the first one.
    traffic: Option<BucketRing<Traffic>>,
    /// The newest sample at which the send rate was first found above the threshold.
    above_since: Option<Nanos>,
}

impl PodTraffic {
    /// Takes one sample; false when the pod follows as many running totals as it may.
    fn record(&mut self, event: &ApiTrafficEvent, config: &ApiRequestStormConfig) -> bool {
        let growth = if event.cumulative {
            self.growth_of_total(event, config)
        } else {
            let from = if event.start > 0 && event.start < event.time {
                event.start
            } else {
                event.time
            };
            Growth::Grew {
                increase: event.value,
                from,
            }
        };
        let (increase, from) = match growth {
            Growth::Untracked => return false,
            Growth::Nothing => return true,
            Growth::Grew { increase, from } => (increase, from),
        };
        if !increase.is_finite() {
            return true;
        }
        let traffic = self
            .traffic
            .get_or_insert_with(|| BucketRing::new(config.duration, BUCKETS));
        if let Some(bucket) = traffic.bucket_mut(event.time) {
            bucket.add(event.measure, increase.max(0.0), (from, event.time));
        }
        true
    }

    /// How a running total grew since its previous sample; a first sample the probe
    /// began counting within the duration counts whole, from its start.
    fn growth_of_total(
        &mut self,
        event: &ApiTrafficEvent,
        config: &ApiRequestStormConfig,
    ) -> Growth {
        let sample = Sample {
            series: hash_parts((&event.container, event.measure)),
            start: event.start,
            time: event.time,
            value: event.value,
        };
        self.totals.observe(sample, Some(nanos(config.duration)))
    }

    /// The rates over the rate window ending at `now`, when samples cover some of it.
    fn recent_rates(&self, config: &ApiRequestStormConfig, now: Nanos) -> Option<Rates> {
        let traffic = self.traffic.as_ref()?;
        let oldest = traffic.count().saturating_sub(config.rate_buckets());
        traffic
            .window(now)
            .filter(|(place, _)| *place >= oldest)
            .fold(Traffic::default(), |mut total, (_, bucket)| {
                total.absorb(bucket);
                total
            })
            .rates()
    }

    /// A storm of `pod` while the send rate holds above the threshold (fires once it
    /// has for the duration, holds while `firing`); none once it falls below.
    fn finding(
        &mut self,
        pod: &ObjectRef,
        firing: bool,
        config: &ApiRequestStormConfig,
        now: Nanos,
    ) -> Option<Finding<'static>> {
        let threshold = config.min_sends_per_second;
        let rates = self.recent_rates(config, now).filter(|rates| {
            if firing {
                rates.sends_per_second >= threshold
            } else {
                rates.sends_per_second > threshold
            }
        });
        let Some(rates) = rates else {
            self.above_since = None;
            return None;
        };
        let since = *self.above_since.get_or_insert(rates.newest);
        let lasted = rates.newest.saturating_sub(since);
        if !firing && lasted < nanos(config.duration) {
            return None;
        }
        let window = self
            .traffic
            .as_ref()
            .map(|traffic| traffic.total(now))
            .unwrap_or_default();
        let cause = if window.failed > window.established {
            StormCause::ConnectionRefused
        } else {
            StormCause::SelfTriggeredOrRetryStorm
        };
        let pod = format!("pod {}/{}", pod.namespace, pod.name);
        let mut evidence = vec![format!(
            "counter opscope.ebpf.api_server.send_calls of {pod}"
        )];
        if window.failed > 0.0 {
            evidence.push(format!(
                "counter opscope.ebpf.api_server.connections{{outcome!=\"established\"}} of {pod}"
            ));
        }
        Some(Finding {
            cause: Cow::Borrowed(cause.name()),
            severity: severity_for(rates.sends_per_second, threshold),
            figures: figures([
                ("sends_per_second", rates.sends_per_second),
                ("sent_bytes_per_second", rates.sent_bytes_per_second),
                ("refused_per_minute", rates.refused_per_minute),
                ("failed_connections_per_minute", rates.failed_per_minute),
                (
                    "established_connections_per_minute",
                    rates.established_per_minute,
                ),
                ("storm_minutes", (lasted as f64 / 60e9).floor()),
            ]),
            evidence: Cow::Owned(evidence),
            hint: Cow::Borrowed(cause.hint()),
            below_threshold: false,
        })
    }
}

/// The operator pods followed, their traffic to the API server and their storms.
#[derive(Debug, Clone)]
pub(crate) struct StormDetector {
    config: ApiRequestStormConfig,
    pods: InstanceTable<PodTraffic>,
    next_evaluation: Nanos,
}

impl StormDetector {
    pub(crate) fn new(config: &ApiRequestStormConfig) -> Self {
        Self {
            config: config.clone(),
            pods: InstanceTable::new(config.max_instances),
            next_evaluation: 0,
        }
    }

    /// Pods followed.
    pub(crate) fn len(&self) -> usize {
        self.pods.len()
    }

    /// Pods evicted to make room, in total.
    pub(crate) fn evicted(&self) -> u64 {
        self.pods.evicted()
    }

    /// Takes one sample; false when it is of no use (no pod named, or a running total
    /// too many). The signal of an evicted pod resolves into `out`.
    pub(crate) fn observe(
        &mut self,
        event: ApiTrafficEvent,
        now: Nanos,
        out: &mut Vec<Signal>,
    ) -> bool {
        self.pods
            .entry(&event.operator, &event.instance, now, out)
            .is_some_and(|pod| {
                pod.seen(event.time);
                pod.state.record(&event, &self.config)
            })
    }

    /// Evaluates every pod once per evaluation interval of event time, and forgets
    /// pods idle for `idle_expiry` with nothing firing.
    pub(crate) fn sweep(
        &mut self,
        now: Nanos,
        idle_expiry: Nanos,
        update_interval: Nanos,
        out: &mut Vec<Signal>,
    ) {
        if now < self.next_evaluation {
            return;
        }
        self.next_evaluation = now.saturating_add(nanos(EVALUATION_INTERVAL));
        for pod in self.pods.values_mut() {
            let firing = pod.firing();
            let finding = pod.state.finding(&pod.pod, firing, &self.config, now);
            out.extend(pod.step(SignalType::ApiRequestStorm, finding, now, update_interval));
        }
        if let Some(cutoff) = now.checked_sub(idle_expiry) {
            self.pods.forget_idle(cutoff);
        }
    }

    /// The signals firing now.
    pub(crate) fn active(&self) -> impl Iterator<Item = &Signal> {
        self.pods.active()
    }

    #[cfg(test)]
    pub(crate) fn footprint_per_instance(&self) -> impl Iterator<Item = usize> {
        self.pods.values().map(|pod| {
            std::mem::size_of_val(pod)
                + pod.state.totals.footprint()
                + pod.state.traffic.as_ref().map_or(0, BucketRing::footprint)
        })
    }

    /// Adds the API-server rates of the pod a firing signal is about (a pod signal),
    /// or of its operator's pods (an object signal), when the kernel probe counts them:
    /// `api_server_sends_per_second` and `api_server_refused_per_minute`.
    pub(crate) fn add_figures(&self, signal: &mut Signal, now: Nanos) {
        if signal.state != SignalState::Firing
            || signal.signal == SignalType::ApiRequestStorm
            || self.pods.len() == 0
        {
            return;
        }
        let about_pod = signal.object.kind == "Pod";
        let measured = self
            .pods
            .values()
            .filter(|pod| {
                if about_pod {
                    pod.pod.namespace == signal.object.namespace
                        && pod.pod.name == signal.object.name
                } else {
                    same_operator(&pod.operator, &signal.operator)
                }
            })
            .filter_map(|pod| pod.state.recent_rates(&self.config, now))
            .map(|rates| (rates.sends_per_second, rates.refused_per_minute))
            .reduce(|(sends, refused), (more_sends, more_refused)| {
                (sends + more_sends, refused + more_refused)
            });
        if let Some((sends, refused)) = measured {
            signal
                .figures
                .insert("api_server_sends_per_second".to_string(), sends);
            signal
                .figures
                .insert("api_server_refused_per_minute".to_string(), refused);
        }
    }
}

/// Whether a pod's operator is a signal's: the same name, and the same namespace when
/// both say.
fn same_operator(of_pod: &OperatorRef, of_signal: &OperatorRef) -> bool {
    !of_pod.name.is_empty()
        && of_pod.name == of_signal.name
        && (of_pod.namespace.is_empty()
            || of_signal.namespace.is_empty()
            || of_pod.namespace == of_signal.namespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlator::test_support::*;
    use opscope_model::signal::Severity;

    const POD: &str = "widget-operator-5d6b8c9f7-q8w2z";

    fn storms(signals: &[Signal]) -> Vec<&Signal> {
        signals
            .iter()
            .filter(|s| s.signal == SignalType::ApiRequestStorm)
            .collect()
    }

    /// The probe's samples of `pod`'s container `manager` every 10 s from second 0 to
    /// `seconds`: `sends(second)` and `refused(second)` a second, one established
    /// connection a minute.
    fn probe(
        pod: &str,
        seconds: u64,
        sends: impl Fn(u64) -> f64,
        refused: impl Fn(u64) -> f64,
    ) -> Vec<Event> {
        let (mut sent, mut failed, mut established) = (0.0, 0.0, 0.0);
        let mut events = Vec::new();
        for second in (0..=seconds).step_by(10) {
            let at = secs(second);
            let traffic = |measure, value| api_traffic(pod, "manager", measure, at, 0, value);
            events.push(traffic(ApiTraffic::SendCalls, sent));
            events.push(traffic(ApiTraffic::SentBytes, sent * 300.0));
            let outcome = ApiTraffic::Connections;
            events.push(traffic(outcome(ConnectionOutcome::Refused), failed));
            events.push(traffic(
                outcome(ConnectionOutcome::Established),
                established,
            ));
            sent += sends(second) * 10.0;
            failed += refused(second) * 10.0;
            established += 10.0 / 60.0;
        }
        events
    }

    #[test]
    fn a_pod_sending_100_calls_a_second_storms_after_the_duration() {
        let signals = run_batches(probe(POD, 300, |_| 100.0, |_| 0.0));
        let fired = storms(&signals);
        let first = fired.first().copied().expect("a storm fires");
        assert_eq!(first.state, SignalState::Firing);
        assert!(
            (secs(120)..=secs(135)).contains(&first.first_seen),
            "fired at {}",
            first.first_seen
        );
        assert_eq!(first.cause, "self_triggered_or_retry_storm");
        assert_eq!(first.severity, Severity::Warning);
        assert_eq!(first.object.kind, "Pod");
        assert_eq!(first.object.namespace, "operators");
        assert_eq!(first.object.name, POD);
        assert_eq!(first.id, format!("api_request_storm:pods/operators/{POD}"));
        assert_eq!(first.operator.name, OPERATOR);
        assert!((first.figures["sends_per_second"] - 100.0).abs() < 1e-6);
        assert!((first.figures["sent_bytes_per_second"] - 30_000.0).abs() < 1e-3);
        assert_eq!(first.figures["refused_per_minute"], 0.0);
        assert_eq!(first.figures["storm_minutes"], 2.0);
        assert_eq!(
            first.evidence,
            [format!(
                "counter opscope.ebpf.api_server.send_calls of pod operators/{POD}"
            )]
        );
        assert!(first.hint.contains("GenerationChangedPredicate"));
        assert!(first.hint.contains("backoff"));
    }

    #[test]
    fn five_calls_a_second_or_a_short_burst_are_no_storm() {
        assert!(storms(&run_batches(probe(POD, 600, |_| 5.0, |_| 0.0))).is_empty());
        let burst = probe(
            POD,
            600,
            |second| if second < 100 { 500.0 } else { 5.0 },
            |_| 0.0,
        );
        assert!(
            storms(&run_batches(burst)).is_empty(),
            "shorter than the duration"
        );
    }

    #[test]
    fn a_pod_whose_connections_mostly_fail_storms_for_refused_connections() {
        let signals = run_batches(probe(POD, 300, |_| 100.0, |_| 2.0));
        let first = storms(&signals)[0];
        assert_eq!(first.cause, "connection_refused");
        assert!((first.figures["refused_per_minute"] - 120.0).abs() < 1e-6);
        assert!((first.figures["failed_connections_per_minute"] - 120.0).abs() < 1e-6);
        assert_eq!(first.evidence.len(), 2);
        assert!(first.hint.contains("API server's health"));
    }

    #[test]
    fn resolves_when_the_rate_falls_below_the_threshold() {
        let events = probe(
            POD,
            600,
            |second| if second < 300 { 100.0 } else { 10.0 },
            |_| 0.0,
        );
        let signals = run_batches(events);
        let states: Vec<SignalState> = storms(&signals).iter().map(|s| s.state).collect();
        assert_eq!(states.first(), Some(&SignalState::Firing));
        assert_eq!(states.last(), Some(&SignalState::Resolved));
        let resolved = storms(&signals).last().copied().unwrap();
        assert!(
            (secs(300)..=secs(340)).contains(&resolved.last_seen),
            "resolved at {}",
            resolved.last_seen
        );
    }

    #[test]
    fn a_thousand_calls_a_second_is_critical() {
        let signals = run_batches(probe(POD, 200, |_| 1_000.0, |_| 0.0));
        assert_eq!(storms(&signals)[0].severity, Severity::Critical);
    }

    #[test]
    fn the_containers_of_a_pod_add_up() {
        let mut events = probe(POD, 300, |_| 30.0, |_| 0.0);
        let sidecar = probe(POD, 300, |_| 30.0, |_| 0.0)
            .into_iter()
            .map(|event| match event {
                Event::ApiTraffic(mut traffic) => {
                    traffic.container = "kube-rbac-proxy".into();
                    Event::ApiTraffic(traffic)
                }
                other => other,
            });
        events.extend(sidecar);
        events.sort_by_key(Event::time);
        let first = storms(&run_batches(events))[0].clone();
        assert!((first.figures["sends_per_second"] - 60.0).abs() < 1e-6);
    }

    #[test]
    fn a_restarted_total_counts_from_its_new_start() {
        // The agent restarts at second 150: its totals start again from zero, with a
        // new start time; 10 calls a second throughout.
        let mut events = probe(POD, 140, |_| 10.0, |_| 0.0);
        for second in (150..=400).step_by(10) {
            let value = (second - 145) as f64 * 10.0;
            events.push(api_traffic(
                POD,
                "manager",
                ApiTraffic::SendCalls,
                secs(second),
                secs(145),
                value,
            ));
        }
        assert!(storms(&run_batches(events)).is_empty());
    }

    #[test]
    fn other_signals_of_the_operator_carry_its_pods_rates() {
        let mut events = probe(POD, 120, |_| 20.0, |_| 0.5);
        for n in 0..100u64 {
            let at = secs(60) + millis(n * 300);
            events.push(Ev::write("w", at).status().into());
            events.push(Ev::reconcile("w", at, &format!("r{n}")).into());
        }
        events.sort_by_key(Event::time);
        let signals = run_batches(events);
        let looping = signals
            .iter()
            .rfind(|s| s.signal == SignalType::ReconcileLoop && s.state == SignalState::Firing)
            .expect("a loop fires");
        assert!((looping.figures["api_server_sends_per_second"] - 20.0).abs() < 1e-6);
        assert!((looping.figures["api_server_refused_per_minute"] - 30.0).abs() < 1e-6);
    }

    #[test]
    fn pods_and_their_totals_are_bounded() {
        let mut detector = StormDetector::new(&ApiRequestStormConfig {
            max_instances: 2,
            ..ApiRequestStormConfig::default()
        });
        let mut out = Vec::new();
        for n in 0..(MAX_SERIES + 5) {
            let mut event = api_traffic_event("pod-0", "c", ApiTraffic::SendCalls, secs(1), 0, 1.0);
            event.container = format!("container-{n}");
            assert_eq!(detector.observe(event, secs(1), &mut out), n < MAX_SERIES);
        }
        for pod in ["pod-1", "pod-2", "pod-3"] {
            let event = api_traffic_event(pod, "c", ApiTraffic::SendCalls, secs(2), 0, 1.0);
            detector.observe(event, secs(2), &mut out);
        }
        assert_eq!((detector.len(), detector.evicted()), (2, 2));
    }

    #[test]
    fn settings_are_checked_with_their_field() {
        assert_eq!(ApiRequestStormConfig::default().validate(), Ok(()));
        assert_eq!(ApiRequestStormConfig::default().rate_buckets(), 6);
        let cases = [
            (
                ApiRequestStormConfig {
                    min_sends_per_second: 0.0,
                    ..ApiRequestStormConfig::default()
                },
                "min_sends_per_second",
            ),
            (
                ApiRequestStormConfig {
                    min_sends_per_second: f64::NAN,
                    ..ApiRequestStormConfig::default()
                },
                "min_sends_per_second",
            ),
            (
                ApiRequestStormConfig {
                    duration: Duration::ZERO,
                    ..ApiRequestStormConfig::default()
                },
                "duration",
            ),
            (
                ApiRequestStormConfig {
                    rate_window: Duration::from_secs(600),
                    ..ApiRequestStormConfig::default()
                },
                "rate_window",
            ),
            (
                ApiRequestStormConfig {
                    max_instances: 0,
                    ..ApiRequestStormConfig::default()
                },
                "max_instances",
            ),
        ];
        for (config, field) in cases {
            assert_eq!(config.validate().unwrap_err().field, field);
        }
    }
}
