//! The operator instances (pods) a detector of instance signals follows: keyed by
//! namespace and pod, capped (the least recently seen is evicted, firing ones last,
//! and its signal resolved), idle ones forgotten.

use std::collections::BTreeMap;

use crate::correlator::compact::bound_operator;
use crate::correlator::intake::events::InstanceKey;
use crate::correlator::lifecycle::signal::SignalTrack;
use opscope_model::kubernetes::OperatorRef;
use opscope_model::signal::Signal;
use opscope_model::timestamp::Nanos;

/// What a detector keeps about one instance.
pub(crate) trait InstanceState {
    fn new(key: &InstanceKey, operator: OperatorRef) -> Self;
    fn operator_mut(&mut self) -> &mut OperatorRef;
    fn last_seen(&self) -> Nanos;
    fn signal(&self) -> Option<&SignalTrack>;
    fn into_signal(self) -> Option<SignalTrack>;
}

#[derive(Debug, Clone)]
pub(crate) struct InstanceTable<T> {
    instances: BTreeMap<InstanceKey, T>,
    max_instances: usize,
    evicted: u64,
}

impl<T: InstanceState> InstanceTable<T> {
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
    ) -> Option<&mut T> {
        if instance.is_empty() {
            return None;
        }
        let mut operator = operator.clone();
        bound_operator(&mut operator);
        let key = InstanceKey::new(&operator, instance);
        if !self.instances.contains_key(&key) {
            self.make_room(now, out);
        }
        let state = self
            .instances
            .entry(key)
            .or_insert_with_key(|key| T::new(key, operator.clone()));
        let known = state.operator_mut();
        if *known != operator {
            *known = operator;
        }
        Some(state)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.instances.values()
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.instances.values_mut()
    }

    /// The signals firing now.
    pub(crate) fn active(&self) -> impl Iterator<Item = &Signal> {
        self.instances
            .values()
            .filter_map(|instance| instance.signal().map(SignalTrack::signal))
    }

    /// Forgets the instances not seen since `cutoff` that have nothing firing.
    pub(crate) fn forget_idle(&mut self, cutoff: Nanos) {
        self.instances
            .retain(|_, instance| instance.signal().is_some() || instance.last_seen() > cutoff);
    }

    fn make_room(&mut self, now: Nanos, out: &mut Vec<Signal>) {
        if self.instances.len() < self.max_instances {
            return;
        }
        let oldest = self
            .instances
            .iter()
            .min_by_key(|(_, instance)| (instance.signal().is_some(), instance.last_seen()))
            .map(|(key, _)| key.clone());
        if let Some(instance) = oldest.and_then(|key| self.instances.remove(&key)) {
            self.evicted += 1;
            out.extend(instance.into_signal().map(|signal| signal.resolve(now)));
        }
    }
}
