//! Who writes one object: the few latest writers with their instances, and the order
//! of the latest spec writes, to tell one writer from several and a fight from edits.

use std::collections::VecDeque;

use opscope_model::timestamp::Nanos;

/// Writers remembered per object.
const WRITERS: usize = 4;
/// Spec writes remembered per object.
const SPEC_WRITES: usize = 8;
/// Spec writes needed before their order can show a fight.
const MIN_SPEC_WRITES: usize = 4;

/// A writer: the hash of its actor, and of its instance when known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Writer {
    pub(crate) actor: u64,
    pub(crate) instance: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct LastWrite {
    writer: Writer,
    at: Nanos,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct RecentWriters {
    writers: Vec<LastWrite>,
}

impl RecentWriters {
    pub(crate) fn record(&mut self, writer: Writer, time: Nanos) {
        if let Some(known) = self.writers.iter_mut().find(|w| w.writer == writer) {
            known.at = known.at.max(time);
            return;
        }
        if self.writers.len() >= WRITERS {
            self.forget_oldest();
        }
        self.writers.push(LastWrite { writer, at: time });
    }

    /// Distinct actors that wrote at or after `since`.
    pub(crate) fn actors_since(&self, since: Nanos) -> usize {
        self.distinct_since(since, |writer| Some(writer.actor))
    }

    /// Distinct known instances that wrote at or after `since`.
    pub(crate) fn instances_since(&self, since: Nanos) -> usize {
        self.distinct_since(since, |writer| writer.instance)
    }

    fn distinct_since(&self, since: Nanos, identity: impl Fn(&Writer) -> Option<u64>) -> usize {
        let mut seen: Vec<u64> = Vec::with_capacity(WRITERS);
        for last in self.writers.iter().filter(|last| last.at >= since) {
            if let Some(id) = identity(&last.writer)
                && !seen.contains(&id)
            {
                seen.push(id);
            }
        }
        seen.len()
    }

    fn forget_oldest(&mut self) {
        let oldest = self
            .writers
            .iter()
            .enumerate()
            .min_by_key(|(_, last)| last.at)
            .map(|(place, _)| place);
        if let Some(place) = oldest {
            self.writers.swap_remove(place);
        }
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.writers.capacity() * std::mem::size_of::<LastWrite>()
    }
}

/// The actors of the latest spec writes, in the order they arrived.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecWrites {
    writes: VecDeque<(u64, Nanos)>,
}

impl SpecWrites {
    pub(crate) fn record(&mut self, actor: u64, time: Nanos) {
        if self.writes.len() >= SPEC_WRITES {
            self.writes.pop_front();
        }
        self.writes.push_back((actor, time));
    }

    /// At least two actors wrote the spec since `since`, mostly taking turns.
    pub(crate) fn alternating_since(&self, since: Nanos) -> bool {
        let mut actors = self
            .writes
            .iter()
            .filter(|(_, at)| *at >= since)
            .map(|(actor, _)| *actor);
        let Some(first) = actors.next() else {
            return false;
        };
        let (mut writes, mut turns, mut previous) = (1usize, 0usize, first);
        for actor in actors {
            writes += 1;
            if actor != previous {
                turns += 1;
            }
            previous = actor;
        }
        writes >= MIN_SPEC_WRITES && turns * 2 >= writes - 1
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.writes.capacity() * std::mem::size_of::<(u64, Nanos)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(actor: u64, instance: u64) -> Writer {
        Writer {
            actor,
            instance: Some(instance),
        }
    }

    #[test]
    fn counts_distinct_recent_actors_and_instances() {
        let mut writers = RecentWriters::default();
        writers.record(writer(1, 10), 5);
        writers.record(writer(1, 11), 6);
        writers.record(writer(2, 10), 7);
        assert_eq!(writers.actors_since(0), 2);
        assert_eq!(writers.instances_since(0), 2);
        assert_eq!(writers.actors_since(6), 2);
        assert_eq!(writers.instances_since(7), 1);
    }

    #[test]
    fn remembers_a_bounded_number_of_writers() {
        let mut writers = RecentWriters::default();
        for n in 0..20 {
            writers.record(writer(n, n), n);
        }
        assert_eq!(writers.writers.len(), WRITERS);
        assert_eq!(writers.actors_since(16), WRITERS);
    }

    #[test]
    fn turns_taken_between_two_actors_are_a_fight() {
        let mut writes = SpecWrites::default();
        for (n, actor) in [1, 2, 1, 2, 1].into_iter().enumerate() {
            writes.record(actor, n as u64);
        }
        assert!(writes.alternating_since(0));
        assert!(!writes.alternating_since(3), "too few writes since");
    }

    #[test]
    fn one_actor_or_a_single_edit_is_no_fight() {
        let mut writes = SpecWrites::default();
        for (n, actor) in [1, 1, 1, 1, 2, 1, 1, 1].into_iter().enumerate() {
            writes.record(actor, n as u64);
        }
        assert!(!writes.alternating_since(0));
    }
}
