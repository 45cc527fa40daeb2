//! Which reconcile a trace belongs to, remembered for a while so that child spans
//! and logs of the trace are tagged even when they do not carry it themselves.
//! Bounded in entries and in age (event time).

use std::collections::VecDeque;

// Looked up once per span: seeded foldhash, several times faster than SipHash.
use foldhash::{HashMap, HashMapExt};

/// What a reconcile's records share.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileContext {
    pub reconcile_id: String,
    pub controller: String,
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

pub struct TraceMap {
    entries: HashMap<Vec<u8>, (ReconcileContext, u64)>,
    /// Trace ids in insertion order with their insertion time, for expiry.
    order: VecDeque<(Vec<u8>, u64)>,
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
        if trace_id.iter().all(|b| *b == 0) {
            return;
        }
        self.newest = self.newest.max(time);
        if self
            .entries
            .insert(trace_id.to_vec(), (context, time))
            .is_none()
        {
            self.order.push_back((trace_id.to_vec(), time));
        }
        self.expire();
    }

    pub fn get(&self, trace_id: &[u8]) -> Option<&ReconcileContext> {
        self.entries.get(trace_id).map(|(context, _)| context)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn expire(&mut self) {
        let horizon = self.newest.saturating_sub(self.ttl_nanos);
        while let Some((trace_id, inserted)) = self.order.front() {
            let too_many = self.entries.len() > self.capacity;
            if !too_many && *inserted >= horizon {
                break;
            }
            let trace_id = trace_id.clone();
            self.order.pop_front();
            self.entries.remove(&trace_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(id: &str) -> ReconcileContext {
        ReconcileContext {
            reconcile_id: id.into(),
            ..Default::default()
        }
    }

    #[test]
    fn bounded_by_capacity_and_age() {
        let mut map = TraceMap::new(2, 100);
        map.insert(&[1], context("a"), 10);
        map.insert(&[2], context("b"), 20);
        map.insert(&[3], context("c"), 30);
        assert_eq!(map.len(), 2);
        assert!(map.get(&[1]).is_none(), "the oldest is evicted at capacity");
        map.insert(&[4], context("d"), 200);
        assert!(
            map.get(&[2]).is_none() && map.get(&[3]).is_none(),
            "older than the ttl"
        );
        assert_eq!(map.get(&[4]).map(|c| c.reconcile_id.as_str()), Some("d"));
        map.insert(&[0; 16], context("invalid"), 200);
        assert_eq!(map.len(), 1, "an all-zero trace id is no trace");
    }
}
