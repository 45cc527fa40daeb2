//! Which objects the correlator tracks: found by key, kept in eviction order (least
//! recently seen first, retained ones last), marked dirty by events, checked when due.

use std::collections::BTreeSet;

// Seeded per process, and several times faster than SipHash on short keys: the index
// is looked up once per event.
use foldhash::HashMap;
use foldhash::HashMapExt;

use super::events::{Nanos, ObjectKey};
use super::object_state::{Settlement, TrackedObject};
use super::scheduler::DueQueue;

/// One tracked object with its place in the table's orders.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) key: ObjectKey,
    pub(crate) object: TrackedObject,
    last_seen: Nanos,
    /// Kept even when idle: something fires, or a deadline runs.
    retained: bool,
    due: Option<Nanos>,
}

impl Entry {
    fn order(&self, slot: usize) -> (bool, Nanos, usize) {
        (self.retained, self.last_seen, slot)
    }
}

#[derive(Debug, Default)]
struct Slot {
    /// Boxed: an entry is a kilobyte, and the slots grow by doubling, which would
    /// leave up to half of that unused per slot and copy them all at each growth.
    entry: Option<Box<Entry>>,
    /// Received events since it was last evaluated.
    dirty: bool,
}

#[derive(Debug)]
pub(crate) struct ObjectTable {
    slots: Vec<Slot>,
    free: Vec<usize>,
    index: HashMap<ObjectKey, usize>,
    /// Eviction and expiry order: idle before retained, then least recently seen.
    order: BTreeSet<(bool, Nanos, usize)>,
    due: DueQueue,
    dirty: Vec<usize>,
    capacity: usize,
}

impl ObjectTable {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            order: BTreeSet::new(),
            due: DueQueue::default(),
            dirty: Vec::new(),
            capacity: capacity.max(1),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slot of `key`, tracked anew from `make` when unknown. When the table is
    /// full, the first in eviction order makes room and is returned.
    pub(crate) fn slot_for(
        &mut self,
        key: ObjectKey,
        make: impl FnOnce() -> TrackedObject,
    ) -> (usize, Option<Entry>) {
        if let Some(slot) = self.index.get(&key) {
            return (*slot, None);
        }
        let evicted = if self.index.len() >= self.capacity {
            let first = self.order.first().map(|(_, _, slot)| *slot);
            first.and_then(|slot| self.remove(slot))
        } else {
            None
        };
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::default());
            self.slots.len() - 1
        });
        let entry = Entry {
            key: key.clone(),
            object: make(),
            last_seen: 0,
            retained: false,
            due: None,
        };
        self.order.insert(entry.order(slot));
        self.index.insert(key, slot);
        if let Some(place) = self.slots.get_mut(slot) {
            place.entry = Some(Box::new(entry));
        }
        (slot, evicted)
    }

    pub(crate) fn entry_mut(&mut self, slot: usize) -> Option<&mut Entry> {
        self.slots.get_mut(slot)?.entry.as_deref_mut()
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter_map(|slot| slot.entry.as_deref())
    }

    /// An event at `time` reached the object in `slot`.
    pub(crate) fn touch(&mut self, slot: usize, time: Nanos) {
        let Some(place) = self.slots.get_mut(slot) else {
            return;
        };
        let Some(entry) = place.entry.as_mut() else {
            return;
        };
        if time > entry.last_seen {
            self.order.remove(&entry.order(slot));
            entry.last_seen = time;
            self.order.insert(entry.order(slot));
        }
        if !place.dirty {
            place.dirty = true;
            self.dirty.push(slot);
        }
    }

    /// The slots that received events since the last call.
    pub(crate) fn take_dirty(&mut self) -> Vec<usize> {
        let dirty = std::mem::take(&mut self.dirty);
        for slot in &dirty {
            if let Some(place) = self.slots.get_mut(*slot) {
                place.dirty = false;
            }
        }
        dirty
    }

    /// Takes the earliest slot due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<usize> {
        let slot = self.due.pop_due(now)?;
        if let Some(entry) = self.entry_mut(slot) {
            entry.due = None;
        }
        Some(slot)
    }

    /// Records what an evaluation of `slot` at `now` concluded. A due time not after
    /// `now` is moved just past it, so one advance never looks twice.
    pub(crate) fn settle(&mut self, slot: usize, settlement: Settlement, now: Nanos) {
        let Some(entry) = self
            .slots
            .get_mut(slot)
            .and_then(|place| place.entry.as_mut())
        else {
            return;
        };
        let due = settlement.due.map(|due| due.max(now.saturating_add(1)));
        self.due.reschedule(slot, entry.due, due);
        entry.due = due;
        if entry.retained != settlement.retained {
            self.order.remove(&entry.order(slot));
            entry.retained = settlement.retained;
            self.order.insert(entry.order(slot));
        }
    }

    /// Forgets idle objects last seen at or before `cutoff`; returns how many.
    pub(crate) fn expire(&mut self, cutoff: Nanos) -> usize {
        let mut expired = 0;
        while let Some(&(false, last_seen, slot)) = self.order.first() {
            if last_seen > cutoff {
                break;
            }
            self.remove(slot);
            expired += 1;
        }
        expired
    }

    fn remove(&mut self, slot: usize) -> Option<Entry> {
        let entry = self.slots.get_mut(slot)?.entry.take()?;
        self.order.remove(&entry.order(slot));
        self.due.reschedule(slot, entry.due, None);
        self.index.remove(&entry.key);
        self.free.push(slot);
        Some(*entry)
    }
}
