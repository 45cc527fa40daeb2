//! The events of a run, held until every file is read and then given back in event
//! time order (files interleave in time). Each event is held encoded ([`codec`]) in
//! blocks of bytes, and the order is sorted on compact keys (time, place), so that
//! an event costs its encoded size and a 16-byte key: about 100 bytes for a
//! reconcile of a log line, where the event itself is over 400 and a stable sort of
//! events takes half as much again.

mod codec;

use opscope_model::timestamp::Nanos;
use opscope_processors::correlator::events::Event;

/// Bytes of a block; an event larger than that has a block of its own.
const BLOCK_BYTES: usize = 1024 * 1024;

#[derive(Default)]
pub struct Timeline {
    blocks: Vec<Vec<u8>>,
    /// In the order the events came; sorted when they are given back.
    keys: Vec<Key>,
    scratch: Vec<u8>,
}

/// Where an event is, after its time: events of one time keep the order they came in.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    time: Nanos,
    block: u32,
    offset: u32,
}

impl Timeline {
    /// Holds the events, emptying `events`.
    pub fn extend(&mut self, events: &mut Vec<Event>) {
        for event in events.drain(..) {
            self.push(&event);
        }
    }

    fn push(&mut self, event: &Event) {
        self.scratch.clear();
        codec::encode(event, &mut self.scratch);
        let fits = self
            .blocks
            .last()
            .is_some_and(|block| block.len() + self.scratch.len() <= block.capacity());
        if !fits {
            self.blocks
                .push(Vec::with_capacity(BLOCK_BYTES.max(self.scratch.len())));
        }
        let block = self.blocks.len() - 1;
        let Some(bytes) = self.blocks.last_mut() else {
            return;
        };
        self.keys.push(Key {
            time: event.time(),
            block: block as u32,
            offset: bytes.len() as u32,
        });
        bytes.extend_from_slice(&self.scratch);
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The events by event time, those of one time in the order they came.
    pub fn into_sorted(mut self) -> impl Iterator<Item = Event> {
        // Keys are distinct (no two events share a place): unstable is stable here.
        self.keys.sort_unstable();
        let Timeline { blocks, keys, .. } = self;
        keys.into_iter().filter_map(move |key| {
            let block = blocks.get(key.block as usize)?;
            let event = codec::decode(block.get(key.offset as usize..)?);
            debug_assert!(event.is_some(), "an event held cannot be read back");
            event
        })
    }
}

#[cfg(test)]
mod tests {
    use opscope_processors::correlator::events::{ObjectEvent, ObjectEventKind, RecordPlace};

    use super::*;

    fn gone(time: Nanos, name: &str) -> Event {
        Event::Object(ObjectEvent {
            time,
            object: opscope_model::kubernetes::ObjectRef {
                kind: "Widget".into(),
                name: name.into(),
                ..Default::default()
            },
            operator: Default::default(),
            kind: ObjectEventKind::Gone,
            place: RecordPlace::default(),
        })
    }

    fn names(timeline: Timeline) -> Vec<String> {
        timeline
            .into_sorted()
            .filter_map(|event| match event {
                Event::Object(event) => Some(event.object.name.to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn events_come_back_by_time_and_in_their_order_within_a_time() {
        let mut timeline = Timeline::default();
        timeline.extend(&mut vec![gone(3, "c"), gone(1, "a1"), gone(2, "b")]);
        timeline.extend(&mut vec![gone(1, "a2"), gone(0, "first")]);
        assert_eq!(timeline.len(), 5);
        assert_eq!(names(timeline), ["first", "a1", "a2", "b", "c"]);
    }

    #[test]
    fn events_span_many_blocks_and_a_large_one_has_its_own() {
        let mut timeline = Timeline::default();
        let large = "x".repeat(2 * BLOCK_BYTES);
        let mut events: Vec<Event> = (0..40_000u64)
            .map(|i| gone(40_000 - i, &format!("{i:040}")))
            .collect();
        events.push(gone(0, &large));
        timeline.extend(&mut events);
        assert!(timeline.blocks.len() > 2);
        let names = names(timeline);
        assert_eq!(names.len(), 40_001);
        assert_eq!(names[0], large);
        assert_eq!(names[1], format!("{:040}", 39_999));
        assert_eq!(names[40_000], format!("{:040}", 0));
    }
}
