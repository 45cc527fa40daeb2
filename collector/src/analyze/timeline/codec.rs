//! A correlator event in a few bytes: each field in order as a number (LEB128; signed
//! ones zigzagged), a text as its length and bytes, an option or a variant as a tag
//! first. Written and read back within one run, never stored.

use std::sync::Arc;
use std::time::Duration;

use opscope_model::kubernetes::{Name, ObjectRef, OperatorRef};
use opscope_processors::correlator::events::{
    ApiTraffic, ApiTrafficEvent, ConnectionOutcome, Counter, CounterEvent, Event, GaugeEvent,
    ObjectEvent, ObjectEventKind, ObjectState, Outcome, Reconcile, RecordPlace, Write,
};

/// Appends `event` to `out`.
pub fn encode(event: &Event, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    match event {
        Event::Object(event) => {
            w.tag(0);
            object_event(&mut w, event);
        }
        Event::Gauge(GaugeEvent {
            time,
            operator,
            instance,
            name,
            value,
        }) => {
            w.tag(1);
            w.number(*time);
            w.operator(operator);
            w.text(instance);
            w.text(name);
            w.number(value.to_bits());
        }
        Event::Counter(CounterEvent {
            time,
            operator,
            instance,
            counter,
            controller,
            series,
            value,
            cumulative,
        }) => {
            w.tag(2);
            w.number(*time);
            w.operator(operator);
            w.text(instance);
            w.tag(counter_tag(*counter));
            w.text(controller);
            w.text(series);
            w.number(value.to_bits());
            w.tag(u8::from(*cumulative));
        }
        Event::ApiTraffic(ApiTrafficEvent {
            time,
            operator,
            instance,
            container,
            measure,
            start,
            value,
            cumulative,
        }) => {
            w.tag(3);
            w.number(*time);
            w.operator(operator);
            w.text(instance);
            w.text(container);
            match measure {
                ApiTraffic::SendCalls => w.tag(0),
                ApiTraffic::SentBytes => w.tag(1),
                ApiTraffic::Connections(outcome) => {
                    w.tag(2);
                    w.tag(outcome_tag(*outcome));
                }
            }
            w.number(*start);
            w.number(value.to_bits());
            w.tag(u8::from(*cumulative));
        }
    }
}

fn object_event(w: &mut Writer<'_>, event: &ObjectEvent) {
    let ObjectEvent {
        time,
        object,
        operator,
        kind,
        place,
    } = event;
    w.number(*time);
    let ObjectRef {
        group,
        kind: object_kind,
        resource,
        namespace,
        name,
    } = object;
    for text in [group, object_kind, resource, namespace, name] {
        w.text(text);
    }
    w.operator(operator);
    match kind {
        ObjectEventKind::Reconcile(reconcile) => {
            w.tag(0);
            write_reconcile(w, reconcile);
        }
        ObjectEventKind::Write(write) => {
            w.tag(1);
            write_write(w, write);
        }
        ObjectEventKind::State(ObjectState {
            generation,
            observed_generation,
            resource_version,
            deletion_timestamp,
            finalizers,
        }) => {
            w.tag(2);
            w.option(generation, |w, g| w.signed(*g));
            w.option(observed_generation, |w, g| w.signed(*g));
            w.option(resource_version, |w, v| w.text(v));
            w.option(deletion_timestamp, |w, t| w.number(*t));
            w.option(finalizers, |w, f| w.texts(f));
        }
        ObjectEventKind::Gone => w.tag(3),
    }
    let RecordPlace {
        source,
        trace_id,
        span_id,
    } = place;
    w.option(source, |w, s| w.text(s));
    w.option(trace_id, |w, id| w.0.extend_from_slice(id));
    w.option(span_id, |w, id| w.0.extend_from_slice(id));
}

fn write_reconcile(w: &mut Writer<'_>, reconcile: &Reconcile) {
    let Reconcile {
        controller,
        instance,
        reconcile_id,
        trace_id,
        start,
        duration,
        outcome,
        generation,
    } = reconcile;
    w.text(controller);
    w.text(instance);
    w.text(reconcile_id);
    w.text(trace_id);
    w.option(start, |w, t| w.number(*t));
    w.option(duration, |w, d| w.duration(*d));
    match outcome {
        Outcome::Unknown => w.tag(0),
        Outcome::Ok => w.tag(1),
        Outcome::Error(error) => {
            w.tag(2);
            w.text(error);
        }
        Outcome::Requeue => w.tag(3),
        Outcome::RequeueAfter(after) => {
            w.tag(4);
            w.duration(*after);
        }
    }
    w.option(generation, |w, g| w.signed(*g));
}

fn write_write(w: &mut Writer<'_>, write: &Write) {
    let Write {
        actor,
        instance,
        verb,
        subresource,
        code,
        reconcile_id,
        generation,
        resource_version,
        status_digest,
    } = write;
    for text in [actor, instance, verb, subresource] {
        w.text(text);
    }
    w.number(u64::from(*code));
    w.text(reconcile_id);
    w.option(generation, |w, g| w.signed(*g));
    w.option(resource_version, |w, v| w.text(v));
    w.texts(status_digest);
}

const COUNTERS: [Counter; 5] = [
    Counter::Reconciles,
    Counter::ReconcileErrors,
    Counter::Retries,
    Counter::ApiRequests,
    Counter::ApiConflicts,
];

fn counter_tag(counter: Counter) -> u8 {
    match counter {
        Counter::Reconciles => 0,
        Counter::ReconcileErrors => 1,
        Counter::Retries => 2,
        Counter::ApiRequests => 3,
        Counter::ApiConflicts => 4,
    }
}

const OUTCOMES: [ConnectionOutcome; 5] = [
    ConnectionOutcome::Established,
    ConnectionOutcome::Refused,
    ConnectionOutcome::Reset,
    ConnectionOutcome::TimedOut,
    ConnectionOutcome::Failed,
];

fn outcome_tag(outcome: ConnectionOutcome) -> u8 {
    match outcome {
        ConnectionOutcome::Established => 0,
        ConnectionOutcome::Refused => 1,
        ConnectionOutcome::Reset => 2,
        ConnectionOutcome::TimedOut => 3,
        ConnectionOutcome::Failed => 4,
    }
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn tag(&mut self, tag: u8) {
        self.0.push(tag);
    }

    fn number(&mut self, value: u64) {
        opscope_proto::varint::write(self.0, value);
    }

    fn signed(&mut self, value: i64) {
        self.number(((value << 1) ^ (value >> 63)) as u64);
    }

    fn text(&mut self, text: &str) {
        self.number(text.len() as u64);
        self.0.extend_from_slice(text.as_bytes());
    }

    fn texts(&mut self, texts: &[String]) {
        self.number(texts.len() as u64);
        for text in texts {
            self.text(text);
        }
    }

    fn duration(&mut self, duration: Duration) {
        self.number(duration.as_secs());
        self.number(u64::from(duration.subsec_nanos()));
    }

    fn operator(&mut self, operator: &OperatorRef) {
        let OperatorRef { name, namespace } = operator;
        self.text(name);
        self.text(namespace);
    }

    fn option<T>(&mut self, value: &Option<T>, write: impl FnOnce(&mut Self, &T)) {
        match value {
            Some(value) => {
                self.tag(1);
                write(self, value);
            }
            None => self.tag(0),
        }
    }
}

/// Reads back the event at the start of `bytes`; `None` only for bytes that
/// [`encode`] did not write.
pub fn decode(bytes: &[u8]) -> Option<Event> {
    let mut r = Reader(bytes);
    Some(match r.tag()? {
        0 => Event::Object(read_object_event(&mut r)?),
        1 => Event::Gauge(GaugeEvent {
            time: r.number()?,
            operator: r.operator()?,
            instance: r.text()?.to_string(),
            name: r.text()?.to_string(),
            value: f64::from_bits(r.number()?),
        }),
        2 => Event::Counter(CounterEvent {
            time: r.number()?,
            operator: r.operator()?,
            instance: r.text()?.to_string(),
            counter: *COUNTERS.get(usize::from(r.tag()?))?,
            controller: r.text()?.to_string(),
            series: r.text()?.to_string(),
            value: f64::from_bits(r.number()?),
            cumulative: r.tag()? == 1,
        }),
        3 => Event::ApiTraffic(ApiTrafficEvent {
            time: r.number()?,
            operator: r.operator()?,
            instance: r.text()?.to_string(),
            container: r.text()?.to_string(),
            measure: match r.tag()? {
                0 => ApiTraffic::SendCalls,
                1 => ApiTraffic::SentBytes,
                2 => ApiTraffic::Connections(*OUTCOMES.get(usize::from(r.tag()?))?),
                _ => return None,
            },
            start: r.number()?,
            value: f64::from_bits(r.number()?),
            cumulative: r.tag()? == 1,
        }),
        _ => return None,
    })
}

fn read_object_event(r: &mut Reader<'_>) -> Option<ObjectEvent> {
    Some(ObjectEvent {
        time: r.number()?,
        object: ObjectRef {
            group: r.name()?,
            kind: r.name()?,
            resource: r.name()?,
            namespace: r.name()?,
            name: r.name()?,
        },
        operator: r.operator()?,
        kind: match r.tag()? {
            0 => ObjectEventKind::Reconcile(read_reconcile(r)?),
            1 => ObjectEventKind::Write(read_write(r)?),
            2 => ObjectEventKind::State(ObjectState {
                generation: r.option(Reader::signed)?,
                observed_generation: r.option(Reader::signed)?,
                resource_version: r.option(|r| r.text().map(str::to_string))?,
                deletion_timestamp: r.option(Reader::number)?,
                finalizers: r.option(Reader::texts)?,
            }),
            3 => ObjectEventKind::Gone,
            _ => return None,
        },
        place: RecordPlace {
            source: r.option(|r| r.text().map(Arc::from))?,
            trace_id: r.option(Reader::array)?,
            span_id: r.option(Reader::array)?,
        },
    })
}

fn read_reconcile(r: &mut Reader<'_>) -> Option<Reconcile> {
    Some(Reconcile {
        controller: r.name()?,
        instance: r.name()?,
        reconcile_id: r.text()?.to_string(),
        trace_id: r.text()?.to_string(),
        start: r.option(Reader::number)?,
        duration: r.option(Reader::duration)?,
        outcome: match r.tag()? {
            0 => Outcome::Unknown,
            1 => Outcome::Ok,
            2 => Outcome::Error(r.text()?.to_string()),
            3 => Outcome::Requeue,
            4 => Outcome::RequeueAfter(r.duration()?),
            _ => return None,
        },
        generation: r.option(Reader::signed)?,
    })
}

fn read_write(r: &mut Reader<'_>) -> Option<Write> {
    Some(Write {
        actor: r.name()?,
        instance: r.name()?,
        verb: r.name()?,
        subresource: r.name()?,
        code: u16::try_from(r.number()?).ok()?,
        reconcile_id: r.text()?.to_string(),
        generation: r.option(Reader::signed)?,
        resource_version: r.option(|r| r.text().map(str::to_string))?,
        status_digest: r.texts()?,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn tag(&mut self) -> Option<u8> {
        let (first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*first)
    }

    fn number(&mut self) -> Option<u64> {
        opscope_proto::varint::read(&mut self.0).ok()
    }

    fn signed(&mut self) -> Option<i64> {
        let value = self.number()?;
        Some((value >> 1) as i64 ^ -((value & 1) as i64))
    }

    fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        let (bytes, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(bytes)
    }

    fn text(&mut self) -> Option<&'a str> {
        let len = usize::try_from(self.number()?).ok()?;
        std::str::from_utf8(self.bytes(len)?).ok()
    }

    fn name(&mut self) -> Option<Name> {
        self.text().map(Name::from)
    }

    fn texts(&mut self) -> Option<Vec<String>> {
        let len = self.number()?;
        (0..len).map(|_| self.text().map(str::to_string)).collect()
    }

    fn duration(&mut self) -> Option<Duration> {
        let secs = self.number()?;
        let nanos = u32::try_from(self.number()?).ok()?;
        Some(Duration::new(secs, nanos))
    }

    fn operator(&mut self) -> Option<OperatorRef> {
        Some(OperatorRef {
            name: self.name()?,
            namespace: self.name()?,
        })
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    /// An option: `None` for bytes [`encode`] did not write, `Some(None)` for none.
    fn option<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.tag()? {
            0 => Some(None),
            1 => read(self).map(Some),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator() -> OperatorRef {
        OperatorRef {
            name: "kuberay-operator".into(),
            namespace: "ray-system".into(),
        }
    }

    fn object_event(kind: ObjectEventKind, place: RecordPlace) -> Event {
        Event::Object(ObjectEvent {
            time: 1_714_564_800_123_456_789,
            object: ObjectRef {
                group: "ray.io".into(),
                kind: "RayJob".into(),
                resource: "rayjobs".into(),
                namespace: "ml".into(),
                name: "a-name-longer-than-twenty-four-bytes".into(),
            },
            operator: operator(),
            kind,
            place,
        })
    }

    /// One event of every variant, every field set (and unset where it may be).
    fn every_kind_of_event() -> Vec<Event> {
        let reconcile = |outcome| {
            ObjectEventKind::Reconcile(Reconcile {
                controller: "rayjob".into(),
                instance: "pod-1".into(),
                reconcile_id: "6f3c".into(),
                trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
                start: Some(17),
                duration: Some(Duration::new(2, 500)),
                outcome,
                generation: Some(-3),
            })
        };
        let place = RecordPlace {
            source: Some(Arc::from("pod.log:12")),
            trace_id: Some([7; 16]),
            span_id: Some([9; 8]),
        };
        let mut events = vec![
            object_event(reconcile(Outcome::Unknown), place.clone()),
            object_event(reconcile(Outcome::Ok), RecordPlace::default()),
            object_event(reconcile(Outcome::Error("é failed".into())), place.clone()),
            object_event(reconcile(Outcome::Requeue), place.clone()),
            object_event(
                reconcile(Outcome::RequeueAfter(Duration::from_millis(1500))),
                place.clone(),
            ),
            object_event(
                ObjectEventKind::Reconcile(Reconcile::default()),
                place.clone(),
            ),
            object_event(
                ObjectEventKind::Write(Write {
                    actor: "system:serviceaccount:ray-system:kuberay".into(),
                    instance: "pod-1".into(),
                    verb: "update".into(),
                    subresource: "status".into(),
                    code: 409,
                    reconcile_id: "6f3c".into(),
                    generation: Some(i64::MAX),
                    resource_version: Some("12345".into()),
                    status_digest: vec!["status.phase=1".into(), "status.x=2".into()],
                }),
                place.clone(),
            ),
            object_event(ObjectEventKind::Write(Write::default()), place.clone()),
            object_event(
                ObjectEventKind::State(ObjectState {
                    generation: Some(i64::MIN),
                    observed_generation: Some(0),
                    resource_version: Some("9".into()),
                    deletion_timestamp: Some(u64::MAX),
                    finalizers: Some(vec!["ray.io/cleanup".into()]),
                }),
                place.clone(),
            ),
            object_event(
                ObjectEventKind::State(ObjectState {
                    finalizers: Some(Vec::new()),
                    ..ObjectState::default()
                }),
                place.clone(),
            ),
            object_event(ObjectEventKind::Gone, place),
            Event::Gauge(GaugeEvent {
                time: 5,
                operator: operator(),
                instance: "pod-1".into(),
                name: "go_goroutines".into(),
                value: 1234.5,
            }),
        ];
        events.extend(COUNTERS.map(|counter| {
            Event::Counter(CounterEvent {
                time: 6,
                operator: operator(),
                instance: "pod-1".into(),
                counter,
                controller: "rayjob".into(),
                series: "code=409,method=PUT".into(),
                value: -0.25,
                cumulative: true,
            })
        }));
        let measures = [ApiTraffic::SendCalls, ApiTraffic::SentBytes]
            .into_iter()
            .chain(OUTCOMES.map(ApiTraffic::Connections));
        events.extend(measures.map(|measure| {
            Event::ApiTraffic(ApiTrafficEvent {
                time: 7,
                operator: operator(),
                instance: "pod-1".into(),
                container: "manager".into(),
                measure,
                start: 3,
                value: 1e12,
                cumulative: false,
            })
        }));
        events
    }

    #[test]
    fn every_event_reads_back_as_written() {
        for event in every_kind_of_event() {
            let mut bytes = Vec::new();
            encode(&event, &mut bytes);
            assert_eq!(decode(&bytes).as_ref(), Some(&event));
            // Cut anywhere, it is refused, never misread.
            for end in 0..bytes.len() {
                assert_eq!(decode(&bytes[..end]), None, "{event:?} cut at {end}");
            }
        }
    }

    #[test]
    fn a_reconcile_takes_a_fraction_of_an_event() {
        let event = object_event(
            ObjectEventKind::Reconcile(Reconcile {
                controller: "widget".into(),
                reconcile_id: "00000001-0000-4000-8000-000000000001".into(),
                ..Reconcile::default()
            }),
            RecordPlace {
                source: Some(Arc::from("captured/operator-0.log:123456")),
                ..RecordPlace::default()
            },
        );
        let mut bytes = Vec::new();
        encode(&event, &mut bytes);
        assert!(
            bytes.len() < std::mem::size_of::<Event>() / 2,
            "{} bytes",
            bytes.len()
        );
    }
}
