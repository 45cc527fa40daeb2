//! Tests of the correlator as a whole: a healthy operator stays quiet, time and
//! lateness, eviction and expiry, and a property test that its memory stays bounded.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use crate::correlator::test_support::*;
use crate::correlator::{ApiRequestStormConfig, Correlator, CorrelatorConfig, ResourceLeakConfig};
use opscope_model::signal::{Signal, SignalState, SignalType};

/// A healthy operator: every object reconciled every 30 s with its status refreshed,
/// a spec edit every 5 min, now and then a single 409, flat runtime gauges.
fn healthy_operator(objects: u64, minutes: u64) -> Vec<Event> {
    let mut events = Vec::new();
    for object in 0..objects {
        let name = format!("w{object}");
        for n in 0..minutes * 2 {
            let at = secs(n * 30 + object);
            let id = format!("{name}-r{n}");
            let generation = 1 + (n / 10) as i64;
            let digest = [format!("status.lastSyncTime={n:016x}")];
            events.push(Ev::reconcile(&name, at, &id).generation(generation).into());
            events.push(
                Ev::write(&name, at)
                    .status()
                    .reconcile_id(&id)
                    .digest(&digest)
                    .into(),
            );
            if n % 10 == 0 {
                events.push(
                    Ev::write(&name, at)
                        .by_person()
                        .generation(generation)
                        .into(),
                );
            }
            if n % 17 == 5 {
                events.push(Ev::write(&name, at).code(409).reconcile_id(&id).into());
            }
        }
    }
    for n in 0..minutes * 4 {
        let wobble = if n % 2 == 0 { 3.0 } else { -3.0 };
        events.push(gauge(
            "widget-operator-0",
            "go_goroutines",
            secs(n * 15),
            180.0 + wobble,
        ));
        events.push(gauge(
            "widget-operator-0",
            "workqueue_depth",
            secs(n * 15),
            (n % 3) as f64,
        ));
    }
    events.sort_by_key(Event::time);
    events
}

#[test]
fn a_healthy_operator_raises_nothing() {
    let signals = run_until(healthy_operator(20, 40), secs(45 * 60));
    assert!(
        signals.is_empty(),
        "{:#?}",
        signals.first().map(Signal::summary)
    );
}

#[test]
fn events_later_than_the_lateness_are_counted_and_dropped() {
    let mut correlator = correlator();
    correlator.observe(Ev::reconcile("w", secs(100), "r1").into());
    correlator.observe(Ev::reconcile("w", secs(75), "r2").into());
    correlator.observe(Ev::reconcile("w", secs(69), "r3").into());
    assert_eq!(correlator.watermark(), secs(100));
    assert_eq!(correlator.stats().late_events_dropped, 1);
}

#[test]
fn time_never_moves_backwards() {
    let mut correlator = correlator();
    correlator.advance(secs(50));
    correlator.advance(secs(10));
    assert_eq!(correlator.watermark(), secs(50));
    correlator.observe(Ev::reconcile("w", secs(40), "r1").into());
    assert_eq!(correlator.watermark(), secs(50));
}

#[test]
fn events_naming_no_object_or_instance_are_ignored_and_counted() {
    let mut correlator = correlator();
    let mut anonymous: Event = Ev::reconcile("", secs(1), "r1").into();
    if let Event::Object(event) = &mut anonymous {
        event.object.kind.clear();
    }
    correlator.observe(anonymous);
    correlator.observe(gauge("", "go_goroutines", secs(1), 1.0));
    correlator.observe(gauge("pod-0", "http_requests_total", secs(1), 1.0));
    let stats = correlator.stats();
    assert_eq!(stats.ignored_events, 3);
    assert_eq!((stats.tracked_objects, stats.tracked_instances), (0, 0));
}

fn capped(max_objects: usize) -> Correlator {
    Correlator::new(CorrelatorConfig {
        max_objects,
        ..CorrelatorConfig::default()
    })
}

#[test]
fn the_least_recently_seen_object_is_evicted_at_the_cap() {
    let mut correlator = capped(3);
    for (n, name) in ["a", "b", "c", "a", "d", "e"].into_iter().enumerate() {
        correlator.observe(Ev::reconcile(name, secs(n as u64), "").into());
    }
    correlator.advance(secs(6));
    let stats = correlator.stats();
    assert_eq!(stats.tracked_objects, 3);
    assert_eq!(stats.evicted_objects, 2);
    let mut names: Vec<String> = correlator
        .objects
        .entries()
        .map(|e| e.key.name.to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "d", "e"]);
}

#[test]
fn firing_objects_are_evicted_last_and_their_signals_resolve() {
    let mut correlator = capped(2);
    let looping = |name: &'static str, from: u64| {
        (0..30).map(move |n| Ev::reconcile(name, secs(from) + millis(n * 100), "").into())
    };
    feed(&mut correlator, looping("loop-a", 0));
    correlator.observe(Ev::reconcile("quiet-1", secs(4), "").into());
    correlator.observe(Ev::reconcile("quiet-2", secs(5), "").into());
    assert_eq!(
        correlator.stats().evicted_objects,
        1,
        "the idle one made room"
    );
    feed(&mut correlator, looping("loop-b", 6));
    assert_eq!(correlator.active().len(), 2);
    assert_eq!(correlator.stats().evicted_objects, 2);
    correlator.observe(Ev::write("quiet-3", secs(10)).by_person().into());
    assert_eq!(correlator.stats().evicted_objects, 3);
    let signals = correlator.advance(secs(10));
    assert_eq!(signals.len(), 1, "{signals:#?}");
    assert_eq!(signals[0].state, SignalState::Resolved);
    assert_eq!(signals[0].object.name, "loop-a");
    assert_eq!(correlator.active().len(), 1);
}

#[test]
fn idle_objects_expire_unless_something_fires() {
    let mut correlator = correlator();
    correlator.observe(Ev::reconcile("idle", secs(0), "r1").into());
    correlator.observe(
        Ev::state("stuck", secs(0))
            .deleting(secs(0))
            .finalizers(&["example.com/cleanup"])
            .into(),
    );
    correlator.advance(secs(0));
    correlator.advance(secs(16 * 60));
    let stats = correlator.stats();
    assert_eq!(stats.tracked_objects, 1);
    assert_eq!(stats.expired_objects, 1);
    assert_eq!(correlator.active()[0].signal, SignalType::FinalizerLeak);
}

#[test]
fn idle_instances_expire() {
    let mut correlator = correlator();
    correlator.observe(gauge("pod-0", "go_goroutines", secs(0), 10.0));
    correlator.advance(secs(0));
    assert_eq!(correlator.stats().tracked_instances, 1);
    correlator.advance(secs(16 * 60));
    assert_eq!(correlator.stats().tracked_instances, 0);
}

#[test]
fn instances_are_capped() {
    let mut correlator = Correlator::new(CorrelatorConfig {
        resource_leak: ResourceLeakConfig {
            max_instances: 2,
            ..ResourceLeakConfig::default()
        },
        ..CorrelatorConfig::default()
    });
    for n in 0..5 {
        correlator.observe(gauge(&format!("pod-{n}"), "go_goroutines", secs(n), 10.0));
    }
    let stats = correlator.stats();
    assert_eq!((stats.tracked_instances, stats.evicted_instances), (2, 3));
}

#[test]
fn one_signal_per_object_and_type_at_a_time() {
    let mut events = healthy_operator(3, 10);
    for n in 0..400u64 {
        let at = secs(60) + millis(n * 150);
        events.push(Ev::write("w1", at).status().into());
        events.push(Ev::reconcile("w1", at, &format!("loop{n}")).into());
        if n % 7 == 0 {
            events.push(Ev::write("w2", at).code(409).into());
        }
    }
    events.sort_by_key(Event::time);
    let signals = run_until(events, secs(15 * 60));
    assert_lifecycles(&signals);
    assert!(
        signals
            .iter()
            .any(|s| s.signal == SignalType::ReconcileLoop)
    );
    assert!(
        signals
            .iter()
            .any(|s| s.signal == SignalType::WriteConflict)
    );
}

/// Per signal id: firing, updates, resolved, firing again...; never two firings open.
fn assert_lifecycles(signals: &[Signal]) {
    let mut open: HashMap<&str, bool> = HashMap::new();
    for signal in signals {
        let was_open = open.insert(&signal.id, signal.state == SignalState::Firing);
        if signal.state == SignalState::Resolved {
            assert_eq!(
                was_open,
                Some(true),
                "resolved without firing: {}",
                signal.id
            );
        }
    }
}

#[test]
fn a_busy_object_stays_within_a_few_kilobytes() {
    let mut correlator = correlator();
    let events = (0..200u64).flat_map(|n| {
        let at = secs(n);
        let id = format!("{n:032x}");
        let digest: Vec<String> = (0..32)
            .map(|leaf| {
                format!(
                    "status.conditions[type=Ready{leaf}].lastTransitionTime={:016x}",
                    n * leaf
                )
            })
            .collect();
        [
            Ev::write("w", at)
                .status()
                .reconcile_id(&id)
                .digest(&digest)
                .evidence(&format!("trace {id}"))
                .into(),
            Ev::reconcile("w", at, &id).into(),
            Ev::write("w", at)
                .code(409)
                .actor(&format!("actor-{}", n % 5))
                .into(),
            Ev::reconcile("w", at, &id).error(&"e".repeat(300)).into(),
            Ev::state("w", at)
                .deleting(at)
                .finalizers(&["example.com/finalizer"])
                .into(),
        ]
    });
    feed(&mut correlator, events);
    let footprints: Vec<usize> = correlator
        .objects
        .entries()
        .map(|e| e.object.footprint())
        .collect();
    assert_eq!(footprints.len(), 1);
    assert!(footprints[0] <= 6 * 1024, "{footprints:?}");
}

/// One random event among few kinds, about one of many objects.
fn arbitrary_event() -> impl Strategy<Value = (u64, u32, u8, u64)> {
    (0..400u64, 0..5_000u32, 0..9u8, 0..100u64)
}

fn make_event((step, object, kind, detail): (u64, u32, u8, u64)) -> Event {
    let name = format!("obj-{object}");
    let at = secs(step) + millis(detail * 7);
    let id = format!("r{detail}");
    match kind {
        0 => Ev::reconcile(&name, at, &id).into(),
        1 => Ev::reconcile(&name, at, &id)
            .error(&"x".repeat(detail as usize * 10))
            .into(),
        2 => Ev::write(&name, at)
            .status()
            .digest(&[format!("status.t{detail}={step}")])
            .into(),
        3 => Ev::write(&name, at)
            .code(409)
            .actor(&format!("actor-{detail}"))
            .into(),
        4 => Ev::state(&name, at)
            .deleting(at)
            .finalizers(&["example.com/f"])
            .into(),
        5 => Ev::gone(&name, at).into(),
        6 => gauge(&format!("pod-{object}"), "go_goroutines", at, detail as f64),
        7 => Ev::reconcile(&name, at, "")
            .span(at, millis(detail))
            .instance(&format!("pod-{detail}"))
            .into(),
        _ => api_traffic(
            &format!("pod-{object}"),
            &format!("container-{detail}"),
            ApiTraffic::SendCalls,
            at,
            0,
            (detail * step) as f64,
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn memory_stays_bounded_under_random_keys(raw in proptest::collection::vec(arbitrary_event(), 1..1_500)) {
        let mut correlator = Correlator::new(CorrelatorConfig {
            max_objects: 64,
            resource_leak: ResourceLeakConfig { max_instances: 16, ..ResourceLeakConfig::default() },
            api_request_storm: ApiRequestStormConfig { max_instances: 16, ..ApiRequestStormConfig::default() },
            idle_expiry: Duration::from_secs(120),
            ..CorrelatorConfig::default()
        });
        let mut events: Vec<Event> = raw.into_iter().map(make_event).collect();
        events.sort_by_key(Event::time);
        let mut signals = Vec::new();
        for (n, event) in events.into_iter().enumerate() {
            let time = event.time();
            correlator.observe(event);
            if n % 10 == 0 {
                signals.extend(correlator.advance(time));
            }
            let stats = correlator.stats();
            prop_assert!(stats.tracked_objects <= 64);
            // Pods with gauges and pods with the probe's traffic, capped apart.
            prop_assert!(stats.tracked_instances <= 32);
        }
        for entry in correlator.objects.entries() {
            let footprint = entry.object.footprint();
            prop_assert!(footprint <= 16 * 1024, "object state of {footprint} bytes");
        }
        for footprint in correlator.leaks.footprint_per_instance() {
            prop_assert!(footprint <= 8 * 1024, "instance state of {footprint} bytes");
        }
        for footprint in correlator.storms.footprint_per_instance() {
            prop_assert!(footprint <= 8 * 1024, "pod traffic state of {footprint} bytes");
        }
        assert_lifecycles(&signals);
    }
}

/// A gateway taking over an object: what the old owner hands over is old by the new
/// owner's event time, and taken all the same; the old owner lets the object go and
/// withdraws its signal, without resolving it.
#[test]
fn handed_over_events_are_taken_whatever_their_age_and_released_objects_withdraw_their_signals() {
    let stuck = || {
        Ev::state("stuck", secs(0))
            .deleting(secs(0))
            .finalizers(&["example.com/cleanup"])
    };
    let mut old_owner = correlator();
    old_owner.observe(stuck().into());
    let fired = old_owner.advance(secs(6 * 60));
    assert_eq!(fired.len(), 1, "{fired:?}");

    let mut new_owner = correlator();
    new_owner.observe(Ev::reconcile("other", secs(6 * 60), "r1").into());
    new_owner.advance(secs(6 * 60));
    new_owner.observe(stuck().into());
    assert_eq!(new_owner.stats().late_events_dropped, 1, "live, it is late");
    new_owner.observe_handed_over(stuck().into());
    let taken_over = new_owner.advance(secs(6 * 60 + 1));
    assert_eq!(taken_over.len(), 1, "{taken_over:?}");
    assert_eq!(taken_over[0].signal, SignalType::FinalizerLeak);
    assert_eq!(taken_over[0].state, SignalState::Firing);

    let withdrawn = old_owner.release(|key| key.name != "stuck");
    assert_eq!(withdrawn.len(), 1, "{withdrawn:?}");
    assert_eq!(withdrawn[0].state, SignalState::HandedOver);
    assert_eq!(withdrawn[0].id, taken_over[0].id, "the new owner's signal");
    assert!(old_owner.active().is_empty());
    assert!(
        old_owner.advance(secs(30 * 60)).is_empty(),
        "no resolve for an object let go"
    );
}

/// A gateway that let an object go may see it fire again from records still routed
/// to it: neither that firing nor its end is sent, the object's new owner reports it.
/// What it let go while firing it withdraws.
#[test]
fn a_correlator_reports_nothing_of_what_it_does_not_own_and_withdraws_what_it_lets_go() {
    use std::sync::{Arc, Mutex};

    use crate::correlator::SharedCorrelator;

    let sent: Arc<Mutex<Vec<Signal>>> = Arc::default();
    let sink = {
        let sent = Arc::clone(&sent);
        Arc::new(move |signals: Vec<Signal>| sent.lock().unwrap().extend(signals))
    };
    let correlator = SharedCorrelator::new(CorrelatorConfig::default(), sink);
    correlator.own(Arc::new(|key| key.name != "stuck"));
    let deleting = |name: &str| {
        Ev::state(name, secs(0))
            .deleting(secs(0))
            .finalizers(&["example.com/cleanup"])
            .into()
    };
    correlator.observe(vec![deleting("stuck"), deleting("mine")]);
    // The wall clock the live agent ticks with: event time trails it by the lateness.
    correlator.tick(secs(6 * 60) + secs(CorrelatorConfig::default().lateness.as_secs()));
    correlator.observe(vec![
        Ev::state("stuck", secs(6 * 60 + 1)).finalizers(&[]).into(),
        Ev::state("mine", secs(6 * 60 + 1)).finalizers(&[]).into(),
    ]);
    let received = sent.lock().unwrap();
    let states = |name: &str| -> Vec<SignalState> {
        received
            .iter()
            .filter(|signal| signal.object.name == name)
            .map(|signal| signal.state)
            .collect()
    };
    assert_eq!(states("mine"), [SignalState::Firing, SignalState::Resolved]);
    assert_eq!(states("stuck"), [], "not this correlator's object");
    drop(received);

    let since = secs(7 * 60);
    correlator.observe(vec![
        Ev::state("moving", since)
            .deleting(since)
            .finalizers(&["example.com/cleanup"])
            .into(),
    ]);
    correlator.tick(since + secs(6 * 60) + secs(CorrelatorConfig::default().lateness.as_secs()));
    assert_eq!(
        correlator.release(|key| key.name != "moving"),
        1,
        "one object let go"
    );
    let sent = sent.lock().unwrap();
    let moving: Vec<SignalState> = (sent.iter())
        .filter(|signal| signal.object.name == "moving")
        .map(|signal| signal.state)
        .collect();
    assert_eq!(
        moving,
        [SignalState::Firing, SignalState::HandedOver],
        "withdrawn once let go, though no longer owned"
    );
}
