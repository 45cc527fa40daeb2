//! When tracked objects need a look again though no event came: a queue of due times
//! in event time (a window sliding past a firing signal, a finalizer deadline).

use std::collections::BTreeSet;

use opscope_model::timestamp::Nanos;

/// Due checks, ordered by time, each naming the slot of a tracked object.
#[derive(Debug, Clone, Default)]
pub(crate) struct DueQueue {
    queue: BTreeSet<(Nanos, usize)>,
}

impl DueQueue {
    /// Moves the check of `slot` from `from` to `to` (either may be none).
    pub(crate) fn reschedule(&mut self, slot: usize, from: Option<Nanos>, to: Option<Nanos>) {
        if from == to {
            return;
        }
        if let Some(from) = from {
            self.queue.remove(&(from, slot));
        }
        if let Some(to) = to {
            self.queue.insert((to, slot));
        }
    }

    /// Takes the earliest check due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<usize> {
        let (due, _) = *self.queue.first()?;
        if due > now {
            return None;
        }
        self.queue.pop_first().map(|(_, slot)| slot)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_due_checks_in_time_order() {
        let mut queue = DueQueue::default();
        queue.reschedule(1, None, Some(30));
        queue.reschedule(2, None, Some(10));
        queue.reschedule(3, None, Some(20));
        queue.reschedule(3, Some(20), Some(40));
        assert_eq!(queue.pop_due(25), Some(2));
        assert_eq!(queue.pop_due(25), None);
        assert_eq!(queue.pop_due(50), Some(1));
        assert_eq!(queue.pop_due(50), Some(3));
        assert_eq!(queue.len(), 0);
    }
}
