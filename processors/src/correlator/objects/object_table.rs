//! Which objects the correlator tracks: found by key, kept in eviction order (least
//! recently seen first, retained ones last), marked dirty by events, checked when due.

use std::collections::BTreeSet;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use opscope_model::kubernetes::ObjectRef;
use opscope_model::kubernetes::kinds::push_plural_of_kind;

use opscope_model::kubernetes::{Name, ObjectKey};
use opscope_model::signal::Signal;

use super::object_state::{Settlement, TrackedObject};
use crate::correlator::lifecycle::scheduler::DueQueue;
use opscope_model::timestamp::Nanos;

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
    /// Looked up once per event, by the event's names (see [`KeyParts`]). It holds
    /// slot numbers only: the keys are in the entries, where a map would hold them a
    /// second time (80 bytes a bucket instead of 8). foldhash is seeded per table and
    /// several times faster than SipHash on short keys.
    index: HashTable<usize>,
    hasher: RandomState,
    /// Where a lookup's lowercase resource is written.
    scratch: String,
    /// The last kind looked up and its plural: events come in runs of one kind.
    plural: Option<(Name, String)>,
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
            index: HashTable::new(),
            hasher: RandomState::default(),
            scratch: String::new(),
            plural: None,
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
        object: &ObjectRef,
        make: impl FnOnce() -> TrackedObject,
    ) -> (usize, Option<Entry>) {
        if let Some(slot) = self.find(object) {
            return (slot, None);
        }
        let key = object.key();
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
            key,
            object: make(),
            last_seen: 0,
            retained: false,
            due: None,
        };
        self.order.insert(entry.order(slot));
        let hash = self.hasher.hash_one(KeyParts::of(&entry.key));
        if let Some(place) = self.slots.get_mut(slot) {
            place.entry = Some(Box::new(entry));
        }
        let Self {
            slots,
            hasher,
            index,
            ..
        } = self;
        index.insert_unique(hash, slot, |&slot| rehash(slots, hasher, slot));
        (slot, evicted)
    }

    /// Whether the object is tracked.
    pub(crate) fn holds(&mut self, object: &ObjectRef) -> bool {
        self.find(object).is_some()
    }

    /// The slot of the object, found without making its key.
    fn find(&mut self, object: &ObjectRef) -> Option<usize> {
        let resource = if object.resource.is_empty() {
            let cached = self.plural.take().filter(|(kind, _)| *kind == object.kind);
            let (_, plural) = self.plural.insert(cached.unwrap_or_else(|| {
                let mut plural = String::new();
                push_plural_of_kind(&object.kind, &mut plural);
                (object.kind.clone(), plural)
            }));
            plural.as_str()
        } else if object.resource.bytes().any(|b| b.is_ascii_uppercase()) {
            self.scratch.clear();
            self.scratch.push_str(&object.resource);
            self.scratch.make_ascii_lowercase();
            self.scratch.as_str()
        } else {
            object.resource.as_str()
        };
        let parts = KeyParts {
            namespace: &object.namespace,
            resource,
            name: &object.name,
        };
        let slots = &self.slots;
        self.index
            .find(self.hasher.hash_one(&parts), |&slot| {
                key_of(slots, slot).is_some_and(|key| KeyParts::of(key) == parts)
            })
            .copied()
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

    /// Forgets the objects `keep` says no to (objects another correlator now owns);
    /// returns their firing signals, which the caller withdraws.
    pub(crate) fn release(&mut self, mut keep: impl FnMut(&ObjectKey) -> bool) -> Vec<Signal> {
        let released: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, held)| {
                let entry = held.entry.as_deref()?;
                (!keep(&entry.key)).then_some(slot)
            })
            .collect();
        let mut signals = Vec::new();
        for &slot in &released {
            if let Some(held) = self.slots.get_mut(slot) {
                held.dirty = false;
            }
            self.dirty.retain(|&dirty| dirty != slot);
            if let Some(entry) = self.remove(slot) {
                signals.extend(entry.object.active().cloned());
            }
        }
        signals
    }

    fn remove(&mut self, slot: usize) -> Option<Entry> {
        let entry = self.slots.get_mut(slot)?.entry.take()?;
        self.order.remove(&entry.order(slot));
        self.due.reschedule(slot, entry.due, None);
        let hash = self.hasher.hash_one(KeyParts::of(&entry.key));
        if let Ok(found) = self.index.find_entry(hash, |&found| found == slot) {
            found.remove();
        }
        self.free.push(slot);
        Some(*entry)
    }
}

/// An [`ObjectKey`] by borrowed parts: what the index hashes, so that a lookup by an
/// event's names needs no key made.
#[derive(Hash, PartialEq, Eq)]
struct KeyParts<'a> {
    namespace: &'a str,
    resource: &'a str,
    name: &'a str,
}

impl<'a> KeyParts<'a> {
    fn of(key: &'a ObjectKey) -> Self {
        Self {
            namespace: &key.namespace,
            resource: &key.resource,
            name: &key.name,
        }
    }
}

fn key_of(slots: &[Slot], slot: usize) -> Option<&ObjectKey> {
    Some(&slots.get(slot)?.entry.as_deref()?.key)
}

/// The hash of the key in `slot`, for the index to grow. Every slot in the index
/// holds an entry; the fallback hash is never used.
fn rehash(slots: &[Slot], hasher: &RandomState, slot: usize) -> u64 {
    key_of(slots, slot).map_or(0, |key| hasher.hash_one(KeyParts::of(key)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlator::CorrelatorConfig;

    fn object(kind: &str, resource: &str, name: &str) -> ObjectRef {
        ObjectRef {
            kind: kind.into(),
            resource: resource.into(),
            namespace: "ml".into(),
            name: name.into(),
            ..ObjectRef::default()
        }
    }

    #[test]
    fn an_object_is_found_by_kind_or_resource_as_its_key_says() {
        let config = CorrelatorConfig::default();
        let mut table = ObjectTable::new(8);
        let by_kind = object("RayJob", "", "train");
        let (slot, _) = table.slot_for(&by_kind, || TrackedObject::new(&config, &by_kind));
        for same in [
            object("", "rayjobs", "train"),
            object("", "RayJobs", "train"),
            object("RayJob", "rayjobs", "train"),
        ] {
            let (found, _) = table.slot_for(&same, || TrackedObject::new(&config, &same));
            assert_eq!(found, slot, "{same:?}");
        }
        let other = object("RayJob", "", "eval");
        let (second, _) = table.slot_for(&other, || TrackedObject::new(&config, &other));
        assert_ne!(second, slot);
        assert_eq!(table.len(), 2);
        assert_eq!(table.entries().count(), 2);
        table.remove(slot);
        assert!(
            table.find(&by_kind).is_none(),
            "a removed object is not found"
        );
        assert_eq!(table.find(&other), Some(second));
    }

    #[test]
    fn objects_stay_found_as_the_index_grows_and_the_full_table_evicts() {
        let config = CorrelatorConfig::default();
        let mut table = ObjectTable::new(500);
        let objects: Vec<ObjectRef> = (0..800)
            .map(|n| object("RayJob", "", &format!("job-{n}")))
            .collect();
        let mut slots = Vec::new();
        for (n, each) in objects.iter().enumerate() {
            let (slot, evicted) = table.slot_for(each, || TrackedObject::new(&config, each));
            table.touch(slot, n as Nanos + 1);
            assert_eq!(evicted.is_some(), n >= 500, "object {n}");
            slots.push(slot);
        }
        assert_eq!(table.len(), 500);
        for (n, each) in objects.iter().enumerate() {
            let found = table.find(each);
            if n < 300 {
                assert_eq!(found, None, "object {n} was the least recently seen");
            } else {
                assert_eq!(found, Some(slots[n]), "object {n}");
            }
        }
        assert_eq!(table.expire(600), 300);
        assert_eq!(table.find(&objects[599]), None);
        assert_eq!(table.find(&objects[600]), Some(slots[600]));
    }
}
