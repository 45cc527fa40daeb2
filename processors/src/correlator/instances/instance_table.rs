//! The operator instances (pods) a detector of instance signals follows: keyed by
//! namespace and pod, capped (the least recently seen is evicted, firing ones last,
//! and its signal resolved), idle ones forgotten.

use std::collections::BTreeMap;

use super::instance_state::TrackedInstance;
use crate::correlator::compact::{bound_operator, bounded};
use crate::correlator::lifecycle::signal::SignalTrack;
use opscope_model::kubernetes::{Name, ObjectRef, OperatorRef};
use opscope_model::signal::Signal;
use opscope_model::timestamp::Nanos;

/// One operator instance (pod), as the table keys it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct InstanceKey {
    /// The operator's namespace, which is its pod's.
    namespace: Name,
    /// The pod name, cut to a bound.
    instance: Name,
}

impl InstanceKey {
    fn new(operator: &OperatorRef, instance: &str) -> Self {
        Self {
            namespace: operator.namespace.clone(),
            instance: bounded(instance),
        }
    }

    /// The instance as an object: its pod, which instance signals are about.
    fn pod(&self) -> ObjectRef {
        ObjectRef {
            kind: Name::const_new("Pod"),
            namespace: self.namespace.clone(),
            name: self.instance.clone(),
            ..ObjectRef::default()
        }
    }
}

/// The instances one detector follows, with what it keeps of each (`T`).
#[derive(Debug, Clone)]
pub(crate) struct InstanceTable<T> {
    instances: BTreeMap<InstanceKey, TrackedInstance<T>>,
    max_instances: usize,
    evicted: u64,
}

impl<T: Default> InstanceTable<T> {
    pub(crate) fn new(max_instances: usize) -> Self {
        Self {
            instances: BTreeMap::new(),
            max_instances,
            evicted: 0,
        }
    }

    /// Instances followed.
    pub(crate) fn len(&self) -> usize {
        self.instances.len()
    }

    /// Instances evicted to make room, in total.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The state of the pod `instance` of `operator` (names cut to their bounds),
    /// made room for when it is new; `None` when no pod is named. A signal of an
    /// instance evicted for it resolves into `out`.
    pub(crate) fn entry(
        &mut self,
        operator: &OperatorRef,
        instance: &str,
        now: Nanos,
        out: &mut Vec<Signal>,
    ) -> Option<&mut TrackedInstance<T>> {
        if instance.is_empty() {
            return None;
        }
        let mut operator = operator.clone();
        bound_operator(&mut operator);
        let key = InstanceKey::new(&operator, instance);
        if !self.instances.contains_key(&key) {
            self.make_room(now, out);
        }
        let tracked = self
            .instances
            .entry(key)
            .or_insert_with_key(|key| TrackedInstance::new(key.pod(), operator.clone()));
        if tracked.operator != operator {
            tracked.operator = operator;
        }
        Some(tracked)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &TrackedInstance<T>> {
        self.instances.values()
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut TrackedInstance<T>> {
        self.instances.values_mut()
    }

    /// The signals firing now.
    pub(crate) fn active(&self) -> impl Iterator<Item = &Signal> {
        self.instances
            .values()
            .filter_map(|instance| instance.signal.as_ref().map(SignalTrack::signal))
    }

    /// Forgets the instances not seen since `cutoff` that have nothing firing.
    pub(crate) fn forget_idle(&mut self, cutoff: Nanos) {
        self.instances
            .retain(|_, instance| instance.firing() || instance.last_seen > cutoff);
    }

    fn make_room(&mut self, now: Nanos, out: &mut Vec<Signal>) {
        if self.instances.len() < self.max_instances {
            return;
        }
        let oldest = self
            .instances
            .iter()
            .min_by_key(|(_, instance)| (instance.firing(), instance.last_seen))
            .map(|(key, _)| key.clone());
        if let Some(instance) = oldest.and_then(|key| self.instances.remove(&key)) {
            self.evicted += 1;
            out.extend(instance.signal.map(|signal| signal.resolve(now)));
        }
    }
}
