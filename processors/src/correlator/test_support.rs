//! Readable events for the correlator's tests: one kind of object (`Widget`), one
//! operator, times in seconds or milliseconds, and runs of a correlator over them.

use std::time::Duration;

pub(crate) use crate::correlator::intake::events::{
    ApiTraffic, ApiTrafficEvent, Counter, CounterEvent, Event, Outcome,
};

use super::{Correlator, CorrelatorConfig};
use crate::correlator::intake::events::{
    GaugeEvent, ObjectEvent, ObjectEventKind, ObjectState, Reconcile, RecordPlace, Write,
};
use opscope_model::kubernetes::{ObjectRef, OperatorRef};
use opscope_model::signal::Signal;
use opscope_model::timestamp::NANOS_PER_SECOND;
pub(crate) use opscope_model::timestamp::Nanos;

pub(crate) const OPERATOR: &str = "widget-operator";
pub(crate) const OPERATOR_ACCOUNT: &str = "system:serviceaccount:operators:widget-operator";

pub(crate) fn secs(seconds: u64) -> Nanos {
    seconds * NANOS_PER_SECOND
}

pub(crate) fn millis(millis: u64) -> Nanos {
    millis * 1_000_000
}

pub(crate) fn widget(name: &str) -> ObjectRef {
    ObjectRef {
        group: "example.com".into(),
        kind: "Widget".into(),
        namespace: "default".into(),
        name: name.into(),
        ..ObjectRef::default()
    }
}

pub(crate) fn operator() -> OperatorRef {
    OperatorRef {
        name: OPERATOR.into(),
        namespace: "operators".into(),
    }
}

/// An object event under construction.
pub(crate) struct Ev(ObjectEvent);

impl Ev {
    fn new(name: &str, at: Nanos, kind: ObjectEventKind) -> Self {
        Self(ObjectEvent {
            time: at,
            object: widget(name),
            operator: operator(),
            kind,
            place: RecordPlace::default(),
        })
    }

    /// A successful reconcile of `name` by the `widget` controller on instance 0.
    pub(crate) fn reconcile(name: &str, at: Nanos, id: &str) -> Self {
        Self::new(
            name,
            at,
            ObjectEventKind::Reconcile(Reconcile {
                controller: "widget".into(),
                instance: "widget-operator-0".into(),
                reconcile_id: id.into(),
                outcome: Outcome::Ok,
                generation: Some(1),
                ..Reconcile::default()
            }),
        )
    }

    /// A successful update of `name` by the operator on instance 0.
    pub(crate) fn write(name: &str, at: Nanos) -> Self {
        Self::new(
            name,
            at,
            ObjectEventKind::Write(Write {
                actor: OPERATOR_ACCOUNT.into(),
                instance: "widget-operator-0".into(),
                verb: "update".into(),
                code: 200,
                ..Write::default()
            }),
        )
    }

    pub(crate) fn state(name: &str, at: Nanos) -> Self {
        Self::new(name, at, ObjectEventKind::State(ObjectState::default()))
    }

    pub(crate) fn gone(name: &str, at: Nanos) -> Self {
        Self::new(name, at, ObjectEventKind::Gone)
    }

    /// Where the event's record is, as a source's own reference.
    pub(crate) fn evidence(mut self, reference: &str) -> Self {
        self.0.place.source = Some(reference.into());
        self
    }

    /// Made by a person: no operator, actor `alice`.
    pub(crate) fn by_person(mut self) -> Self {
        self.0.operator = OperatorRef::default();
        self.actor("alice").instance("")
    }

    pub(crate) fn outcome(mut self, outcome: Outcome) -> Self {
        self.reconcile_mut().outcome = outcome;
        self
    }

    pub(crate) fn error(self, error: &str) -> Self {
        self.outcome(Outcome::Error(error.into()))
    }

    pub(crate) fn span(mut self, start: Nanos, duration: Nanos) -> Self {
        let reconcile = self.reconcile_mut();
        reconcile.start = Some(start);
        reconcile.duration = Some(Duration::from_nanos(duration));
        self
    }

    pub(crate) fn instance(mut self, instance: &str) -> Self {
        match &mut self.0.kind {
            ObjectEventKind::Reconcile(reconcile) => reconcile.instance = instance.into(),
            ObjectEventKind::Write(write) => write.instance = instance.into(),
            other => panic!("no instance on {other:?}"),
        }
        self
    }

    pub(crate) fn generation(mut self, generation: i64) -> Self {
        match &mut self.0.kind {
            ObjectEventKind::Reconcile(reconcile) => reconcile.generation = Some(generation),
            ObjectEventKind::Write(write) => write.generation = Some(generation),
            ObjectEventKind::State(state) => state.generation = Some(generation),
            ObjectEventKind::Gone => panic!("no generation on Gone"),
        }
        self
    }

    pub(crate) fn status(mut self) -> Self {
        self.write_mut().subresource = "status".into();
        self
    }

    pub(crate) fn code(mut self, code: u16) -> Self {
        self.write_mut().code = code;
        self
    }

    pub(crate) fn actor(mut self, actor: &str) -> Self {
        self.write_mut().actor = actor.into();
        self
    }

    pub(crate) fn reconcile_id(mut self, id: &str) -> Self {
        self.write_mut().reconcile_id = id.into();
        self
    }

    pub(crate) fn digest(mut self, digest: &[String]) -> Self {
        self.write_mut().status_digest = digest.to_vec();
        self
    }

    pub(crate) fn deleting(mut self, since: Nanos) -> Self {
        self.state_mut().deletion_timestamp = Some(since);
        self
    }

    pub(crate) fn finalizers(mut self, finalizers: &[&str]) -> Self {
        self.state_mut().finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        self
    }

    fn reconcile_mut(&mut self) -> &mut Reconcile {
        match &mut self.0.kind {
            ObjectEventKind::Reconcile(reconcile) => reconcile,
            other => panic!("not a reconcile: {other:?}"),
        }
    }

    fn write_mut(&mut self) -> &mut Write {
        match &mut self.0.kind {
            ObjectEventKind::Write(write) => write,
            other => panic!("not a write: {other:?}"),
        }
    }

    fn state_mut(&mut self) -> &mut ObjectState {
        match &mut self.0.kind {
            ObjectEventKind::State(state) => state,
            other => panic!("not a state: {other:?}"),
        }
    }
}

impl From<Ev> for Event {
    fn from(event: Ev) -> Self {
        Event::Object(event.0)
    }
}

/// A sample of gauge `name` of an operator instance.
pub(crate) fn gauge(instance: &str, name: &str, at: Nanos, value: f64) -> Event {
    Event::Gauge(GaugeEvent {
        time: at,
        operator: operator(),
        instance: instance.into(),
        name: name.into(),
        value,
    })
}

/// A sample of one counter of an operator instance, as a running total.
pub(crate) fn counter_event(
    instance: &str,
    counter: Counter,
    controller: &str,
    at: Nanos,
    value: f64,
) -> CounterEvent {
    CounterEvent {
        time: at,
        operator: operator(),
        instance: instance.into(),
        counter,
        controller: controller.into(),
        series: String::new(),
        value,
        cumulative: true,
    }
}

pub(crate) fn counter(
    instance: &str,
    counter: Counter,
    controller: &str,
    at: Nanos,
    value: f64,
) -> Event {
    Event::Counter(counter_event(instance, counter, controller, at, value))
}

/// A sample of one of the kernel probe's running totals of a container of an
/// operator pod, counting since `start`.
pub(crate) fn api_traffic_event(
    instance: &str,
    container: &str,
    measure: ApiTraffic,
    at: Nanos,
    start: Nanos,
    value: f64,
) -> ApiTrafficEvent {
    ApiTrafficEvent {
        time: at,
        operator: operator(),
        instance: instance.into(),
        container: container.into(),
        measure,
        start,
        value,
        cumulative: true,
    }
}

pub(crate) fn api_traffic(
    instance: &str,
    container: &str,
    measure: ApiTraffic,
    at: Nanos,
    start: Nanos,
    value: f64,
) -> Event {
    Event::ApiTraffic(api_traffic_event(
        instance, container, measure, at, start, value,
    ))
}

pub(crate) fn correlator() -> Correlator {
    Correlator::new(CorrelatorConfig::default())
}

/// Observes each event and advances to its time; returns every signal sent.
pub(crate) fn run(events: impl IntoIterator<Item = Event>) -> Vec<Signal> {
    let mut correlator = correlator();
    feed(&mut correlator, events)
}

/// Replays events as a live agent would see them: time advances second by second
/// up to each event and then until `end`, as a wall clock would.
pub(crate) fn run_until(events: impl IntoIterator<Item = Event>, end: Nanos) -> Vec<Signal> {
    let mut correlator = correlator();
    let mut signals = Vec::new();
    for event in events {
        signals.extend(tick_until(&mut correlator, event.time()));
        signals.extend(feed(&mut correlator, [event]));
    }
    signals.extend(tick_until(&mut correlator, end));
    signals
}

fn tick_until(correlator: &mut Correlator, end: Nanos) -> Vec<Signal> {
    let mut signals = Vec::new();
    let mut now = correlator.watermark();
    while now < end {
        now = (now + secs(1)).min(end);
        signals.extend(correlator.advance(now));
    }
    signals
}

pub(crate) fn feed(
    correlator: &mut Correlator,
    events: impl IntoIterator<Item = Event>,
) -> Vec<Signal> {
    let mut signals = Vec::new();
    for event in events {
        let time = event.time();
        correlator.observe(event);
        signals.extend(correlator.advance(time));
    }
    signals
}

/// Observes the events of each event time together, then advances to it, as the
/// processor takes a batch: samples taken at once are evaluated together.
pub(crate) fn run_batches(events: impl IntoIterator<Item = Event>) -> Vec<Signal> {
    let mut correlator = correlator();
    let mut signals = Vec::new();
    let mut events = events.into_iter().peekable();
    while let Some(event) = events.next() {
        let time = event.time();
        correlator.observe(event);
        while let Some(next) = events.next_if(|next| next.time() == time) {
            correlator.observe(next);
        }
        signals.extend(correlator.advance(time));
    }
    signals
}

/// Shuffles events so that none arrives more than `seconds` after a later one
/// (a deterministic shuffle: blocks of `seconds` of event time, each reversed).
pub(crate) fn shuffle_within(events: &mut [Event], seconds: u64) {
    events.sort_by_key(Event::time);
    let block = secs(seconds);
    let mut start = 0;
    while start < events.len() {
        let first = events[start].time();
        let len = events[start..]
            .iter()
            .take_while(|e| e.time() < first + block)
            .count();
        events[start..start + len].reverse();
        start += len;
    }
}
