//! Reconciles of one object running at the same time on two instances of one
//! operator: the mark of a split brain (leader election missing or broken).

use opscope_model::timestamp::Nanos;

/// Instances whose latest reconcile is remembered per object.
const INSTANCES: usize = 4;

/// One reconcile run: which operator and instance ran it, from when to when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) operator: u64,
    pub(crate) instance: u64,
    pub(crate) start: Nanos,
    pub(crate) end: Nanos,
}

impl Run {
    fn overlaps(&self, other: &Run) -> bool {
        self.operator == other.operator
            && self.instance != other.instance
            && self.start < other.end
            && other.start < self.end
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ReconcileOverlap {
    /// The latest run of each remembered instance.
    runs: Vec<Run>,
    /// The end of the latest run seen overlapping another.
    last_overlap: Option<Nanos>,
}

impl ReconcileOverlap {
    /// Records `run`; true when it overlaps the latest run of another instance.
    pub(crate) fn record(&mut self, run: Run) -> bool {
        let overlapped = self.runs.iter().any(|other| run.overlaps(other));
        if overlapped {
            self.last_overlap = self.last_overlap.max(Some(run.end));
        }
        self.remember(run);
        overlapped
    }

    /// Overlapping runs were seen ending at or after `since`.
    pub(crate) fn overlapped_since(&self, since: Nanos) -> bool {
        self.last_overlap.is_some_and(|at| at >= since)
    }

    fn remember(&mut self, run: Run) {
        let same_instance = |other: &Run| other.instance == run.instance;
        if let Some(latest) = self.runs.iter_mut().find(|other| same_instance(other)) {
            if run.end >= latest.end {
                *latest = run;
            }
            return;
        }
        if self.runs.len() >= INSTANCES {
            let oldest = self
                .runs
                .iter()
                .enumerate()
                .min_by_key(|(_, other)| other.end)
                .map(|(place, _)| place);
            if let Some(place) = oldest {
                self.runs.swap_remove(place);
            }
        }
        self.runs.push(run);
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<Run>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(instance: u64, start: Nanos, end: Nanos) -> Run {
        Run {
            operator: 1,
            instance,
            start,
            end,
        }
    }

    #[test]
    fn runs_of_two_instances_at_the_same_time_overlap() {
        let mut overlap = ReconcileOverlap::default();
        assert!(!overlap.record(run(1, 10, 20)));
        assert!(overlap.record(run(2, 15, 25)));
        assert!(overlap.overlapped_since(25));
        assert!(!overlap.overlapped_since(26));
    }

    #[test]
    fn consecutive_runs_or_one_instance_do_not_overlap() {
        let mut overlap = ReconcileOverlap::default();
        overlap.record(run(1, 10, 20));
        assert!(!overlap.record(run(1, 15, 25)), "same instance");
        assert!(!overlap.record(run(2, 25, 30)), "after it");
        assert!(!overlap.overlapped_since(0));
    }

    #[test]
    fn remembers_a_bounded_number_of_instances() {
        let mut overlap = ReconcileOverlap::default();
        for n in 0..20 {
            overlap.record(run(n, n * 10, n * 10 + 5));
        }
        assert_eq!(overlap.runs.len(), INSTANCES);
    }
}
