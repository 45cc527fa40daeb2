//! Which reconcile a trace belongs to, remembered for a while so that child spans
//! and logs of the trace are tagged even when they do not carry it themselves.
//! Bounded in entries and in age (event time).

use std::collections::VecDeque;

// Looked up once per span: seeded foldhash, several times faster than SipHash.
use foldhash::{HashMap, HashMapExt};

/// What a reconcile's records share: its id, controller, and the object's group,
/// kind, namespace and name. The map holds thousands, so the six are kept in one
/// allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileContext {
    names: Box<str>,
    /// Where each name ends in `names`.
    ends: [u32; CONTEXT_NAMES],
}

/// The names of a [`ReconcileContext`].
pub const CONTEXT_NAMES: usize = 6;

impl ReconcileContext {
    /// From the reconcile id, controller, group, kind, namespace and name. A name is
    /// cut where the six together would pass 4 GiB, which no record holds.
    pub fn new(names: [&str; CONTEXT_NAMES]) -> Self {
        let mut joined = String::with_capacity(names.iter().map(|name| name.len()).sum());
        let ends = names.map(|name| {
            if u32::try_from(joined.len() + name.len()).is_ok() {
                joined.push_str(name);
            }
            u32::try_from(joined.len()).unwrap_or(u32::MAX)
        });
        Self {
            names: joined.into_boxed_str(),
            ends,
        }
    }

    /// The reconcile id, controller, group, kind, namespace and name.
    pub fn names(&self) -> [&str; CONTEXT_NAMES] {
        let mut start = 0;
        self.ends.map(|end| {
            let end = end as usize;
            let name = self.names.get(start..end).unwrap_or_default();
            start = end;
            name
        })
    }

    pub fn reconcile_id(&self) -> &str {
        let [reconcile_id, ..] = self.names();
        reconcile_id
    }
}

/// A trace id as a number: OTLP trace ids are 16 bytes, and a number is hashed and
/// compared without a pointer to follow. Other lengths are no trace.
fn trace_key(trace_id: &[u8]) -> Option<u128> {
    let bytes: [u8; 16] = trace_id.try_into().ok()?;
    Some(u128::from_be_bytes(bytes)).filter(|key| *key != 0)
}

pub struct TraceMap {
    entries: HashMap<u128, (ReconcileContext, u64)>,
    /// Trace ids in insertion order with their insertion time, for expiry.
    order: VecDeque<(u128, u64)>,
    capacity: usize,
    ttl_nanos: u64,
    newest: u64,
}

impl TraceMap {
    pub fn new(capacity: usize, ttl_nanos: u64) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            ttl_nanos,
            newest: 0,
        }
    }

    pub fn insert(&mut self, trace_id: &[u8], context: ReconcileContext, time: u64) {
        let Some(key) = trace_key(trace_id) else {
            return;
        };
        self.newest = self.newest.max(time);
        if self.entries.insert(key, (context, time)).is_none() {
            self.order.push_back((key, time));
        }
        self.expire();
    }

    pub fn get(&self, trace_id: &[u8]) -> Option<&ReconcileContext> {
        let key = trace_key(trace_id)?;
        self.entries.get(&key).map(|(context, _)| context)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn expire(&mut self) {
        let horizon = self.newest.saturating_sub(self.ttl_nanos);
        while let Some(&(key, inserted)) = self.order.front() {
            let too_many = self.entries.len() > self.capacity;
            if !too_many && inserted >= horizon {
                break;
            }
            self.order.pop_front();
            self.entries.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(id: &str) -> ReconcileContext {
        ReconcileContext::new([id, "", "", "", "", ""])
    }

    #[test]
    fn bounded_by_capacity_and_age() {
        let mut map = TraceMap::new(2, 100);
        map.insert(&[1; 16], context("a"), 10);
        map.insert(&[2; 16], context("b"), 20);
        map.insert(&[3; 16], context("c"), 30);
        assert_eq!(map.len(), 2);
        assert!(
            map.get(&[1; 16]).is_none(),
            "the oldest is evicted at capacity"
        );
        map.insert(&[4; 16], context("d"), 200);
        assert!(
            map.get(&[2; 16]).is_none() && map.get(&[3; 16]).is_none(),
            "older than the ttl"
        );
        assert_eq!(
            map.get(&[4; 16]).map(ReconcileContext::reconcile_id),
            Some("d")
        );
        map.insert(&[0; 16], context("invalid"), 200);
        map.insert(&[5; 8], context("short"), 200);
        assert_eq!(map.len(), 1, "an all-zero or short trace id is no trace");
    }

    #[test]
    fn a_context_gives_back_its_names() {
        let names = ["31c80a03", "rayjob", "ray.io", "RayJob", "", "train"];
        assert_eq!(ReconcileContext::new(names).names(), names);
        assert_eq!(ReconcileContext::default().names(), [""; 6]);
    }
}
