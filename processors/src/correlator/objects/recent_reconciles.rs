//! The latest reconcile ids seen for one object, so that the several records of one
//! reconcile count once and a later record can still supply its outcome.

use std::collections::VecDeque;

use crate::correlator::compact::hash_text;
use opscope_model::timestamp::Nanos;

/// Reconcile ids remembered per object.
const REMEMBERED: usize = 16;

/// 16 bytes rather than 24: every tracked object holds [`REMEMBERED`] of these.
#[derive(Debug, Clone, Copy)]
struct Remembered {
    /// The id's hash, its lowest bit replaced by whether the outcome is known.
    id_and_outcome: u64,
    first_seen: Nanos,
}

impl Remembered {
    fn new(id: u64, first_seen: Nanos, outcome_known: bool) -> Self {
        Self {
            id_and_outcome: (id & !1) | u64::from(outcome_known),
            first_seen,
        }
    }

    fn is(&self, id: u64) -> bool {
        self.id_and_outcome | 1 == id | 1
    }

    fn outcome_known(&self) -> bool {
        self.id_and_outcome & 1 == 1
    }

    fn know_outcome(&mut self) {
        self.id_and_outcome |= 1;
    }
}

/// What one record tells about its reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReconcileNote {
    /// When the reconcile was first seen: the time it is counted at.
    pub(crate) at: Nanos,
    /// This is the first record of the reconcile.
    pub(crate) new: bool,
    /// This record brings the first known outcome of the reconcile.
    pub(crate) first_outcome: bool,
}

impl ReconcileNote {
    /// A reconcile known from a single record (no id, or a write standing for it).
    pub(crate) fn single(at: Nanos, outcome_known: bool) -> Self {
        Self {
            at,
            new: true,
            first_outcome: outcome_known,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct RecentReconciles {
    remembered: VecDeque<Remembered>,
}

impl RecentReconciles {
    /// Notes a record of reconcile `id` at `time`; an empty id is a reconcile of its own.
    pub(crate) fn note(&mut self, id: &str, time: Nanos, outcome_known: bool) -> ReconcileNote {
        if id.is_empty() {
            return ReconcileNote::single(time, outcome_known);
        }
        let id = hash_text(id);
        if let Some(seen) = self.remembered.iter_mut().find(|seen| seen.is(id)) {
            let first_outcome = outcome_known && !seen.outcome_known();
            if outcome_known {
                seen.know_outcome();
            }
            return ReconcileNote {
                at: seen.first_seen,
                new: false,
                first_outcome,
            };
        }
        if self.remembered.len() >= REMEMBERED {
            self.remembered.pop_front();
        }
        self.remembered
            .push_back(Remembered::new(id, time, outcome_known));
        ReconcileNote::single(time, outcome_known)
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.remembered.capacity() * std::mem::size_of::<Remembered>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_one_reconcile_count_once_and_give_its_outcome_once() {
        let mut recent = RecentReconciles::default();
        assert_eq!(
            recent.note("r1", 10, false),
            ReconcileNote::single(10, false)
        );
        let outcome = recent.note("r1", 12, true);
        assert_eq!(
            outcome,
            ReconcileNote {
                at: 10,
                new: false,
                first_outcome: true
            }
        );
        assert!(!recent.note("r1", 13, true).first_outcome);
    }

    #[test]
    fn empty_ids_are_each_a_reconcile() {
        let mut recent = RecentReconciles::default();
        assert!(recent.note("", 1, true).new);
        assert!(recent.note("", 2, true).new);
    }

    #[test]
    fn remembers_a_bounded_number_of_ids() {
        let mut recent = RecentReconciles::default();
        for n in 0..100 {
            recent.note(&format!("r{n}"), n, false);
        }
        assert_eq!(recent.remembered.len(), REMEMBERED);
        assert!(recent.note("r0", 200, false).new, "forgotten");
    }

    #[test]
    fn the_outcome_bit_does_not_change_which_id_it_is() {
        let mut seen = Remembered::new(0b1010, 7, false);
        assert!(seen.is(0b1010) && seen.is(0b1011) && !seen.is(0b1000));
        assert!(!seen.outcome_known());
        seen.know_outcome();
        assert!(seen.outcome_known() && seen.is(0b1010));
        assert_eq!(seen.first_seen, 7);
        assert_eq!(std::mem::size_of::<Remembered>(), 16);
    }
}
