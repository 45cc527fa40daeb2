//! What every detector of instance signals keeps about one operator instance (pod):
//! who it is, when it was last seen and its signal, around what the detector itself
//! measures of it.

use crate::correlator::lifecycle::signal::{Finding, SignalTrack, Subject, step};
use opscope_model::kubernetes::{ObjectRef, OperatorRef};
use opscope_model::signal::{Signal, SignalType};
use opscope_model::timestamp::Nanos;

/// One operator instance a detector follows; `state` is the detector's own (its
/// counters, its traffic, its gauges).
#[derive(Debug, Clone)]
pub(crate) struct TrackedInstance<T> {
    pub(crate) operator: OperatorRef,
    /// The instance as an object: its pod, which its signal is about.
    pub(crate) pod: ObjectRef,
    pub(crate) last_seen: Nanos,
    pub(crate) signal: Option<SignalTrack>,
    pub(crate) state: T,
}

impl<T: Default> TrackedInstance<T> {
    pub(crate) fn new(pod: ObjectRef, operator: OperatorRef) -> Self {
        Self {
            operator,
            pod,
            last_seen: 0,
            signal: None,
            state: T::default(),
        }
    }
}

impl<T> TrackedInstance<T> {
    /// A sample dated `time` reached the instance.
    pub(crate) fn seen(&mut self, time: Nanos) {
        self.last_seen = self.last_seen.max(time);
    }

    /// Whether its signal fires.
    pub(crate) fn firing(&self) -> bool {
        self.signal.is_some()
    }

    /// Moves the instance's `signal` on with the detector's latest `finding` at `now`
    /// and returns the signal to send, if any.
    pub(crate) fn step(
        &mut self,
        signal: SignalType,
        finding: Option<Finding>,
        now: Nanos,
        update_interval: Nanos,
    ) -> Option<Signal> {
        let key = self.pod.key();
        let subject = Subject {
            signal,
            key: &key,
            object: &self.pod,
            operator: &self.operator,
            controller: "",
        };
        step(&mut self.signal, finding, &subject, now, update_interval)
    }
}
