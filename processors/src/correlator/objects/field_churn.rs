//! Which status field changes from one write of an object to the next, from the
//! `path=hash` digests of the written status: a timestamp rewritten on every write.

use crate::correlator::compact::{bounded, hash_text};
use opscope_model::timestamp::Nanos;

/// Status leaves compared per write (the tagger's digest holds at most 32).
const LEAVES: usize = 32;
/// Paths followed per object.
const CANDIDATES: usize = 8;
/// Comparisons after which a path's counts are halved, so they follow recent writes.
const HALVE_AT: u16 = 32;
/// Comparisons a path needs before its share of changes means anything.
const MIN_COMPARISONS: u16 = 4;

#[derive(Debug, Clone, Copy)]
struct Leaf {
    path: u64,
    value: u64,
}

#[derive(Debug, Clone)]
struct Candidate {
    path: String,
    hash: u64,
    changed: u16,
    compared: u16,
}

impl Candidate {
    fn count(&mut self, changed: bool) {
        self.compared += 1;
        self.changed += u16::from(changed);
        if self.compared >= HALVE_AT {
            self.compared /= 2;
            self.changed /= 2;
        }
    }

    fn ratio(&self) -> f64 {
        f64::from(self.changed) / f64::from(self.compared.max(1))
    }
}

/// A status field that changed on most consecutive writes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Churn<'a> {
    pub(crate) path: &'a str,
    /// Share of consecutive writes on which it changed.
    pub(crate) ratio: f64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct FieldChurn {
    /// The leaves of the latest written status.
    previous: Vec<Leaf>,
    candidates: Vec<Candidate>,
    last_compared: Option<Nanos>,
}

impl FieldChurn {
    /// Compares the digest of a written status with the previous one. A path that
    /// changed may take the place of a followed path changing less than `keep_ratio`.
    pub(crate) fn record(&mut self, digest: &[String], time: Nanos, keep_ratio: f64) {
        let leaves: Vec<(&str, Leaf)> = digest
            .iter()
            .filter_map(|e| parse(e))
            .take(LEAVES)
            .collect();
        if !self.previous.is_empty() {
            for (path, leaf) in &leaves {
                let before = self.previous.iter().find(|old| old.path == leaf.path);
                if let Some(before) = before {
                    self.compare(path, leaf.path, before.value != leaf.value, keep_ratio);
                }
            }
            self.last_compared = self.last_compared.max(Some(time));
        }
        self.previous = leaves.into_iter().map(|(_, leaf)| leaf).collect();
    }

    /// The path that changed on at least `min_ratio` of the writes compared, with
    /// the latest comparison at or after `since`.
    pub(crate) fn churning(&self, min_ratio: f64, since: Nanos) -> Option<Churn<'_>> {
        if self.last_compared.is_none_or(|at| at < since) {
            return None;
        }
        self.candidates
            .iter()
            .filter(|c| c.compared >= MIN_COMPARISONS && c.ratio() >= min_ratio)
            .max_by(|a, b| {
                a.ratio()
                    .total_cmp(&b.ratio())
                    .then(a.compared.cmp(&b.compared))
            })
            .map(|c| Churn {
                path: &c.path,
                ratio: c.ratio(),
            })
    }

    fn compare(&mut self, path: &str, hash: u64, changed: bool, keep_ratio: f64) {
        if let Some(candidate) = self.candidates.iter_mut().find(|c| c.hash == hash) {
            candidate.count(changed);
        } else if changed {
            self.admit(path, hash, keep_ratio);
        }
    }

    fn admit(&mut self, path: &str, hash: u64, keep_ratio: f64) {
        let candidate = Candidate {
            path: bounded(path),
            hash,
            changed: 1,
            compared: 1,
        };
        if self.candidates.len() < CANDIDATES {
            self.candidates.push(candidate);
            return;
        }
        let weakest = self
            .candidates
            .iter_mut()
            .filter(|c| c.ratio() < keep_ratio)
            .min_by(|a, b| a.ratio().total_cmp(&b.ratio()));
        if let Some(weakest) = weakest {
            *weakest = candidate;
        }
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.previous.capacity() * std::mem::size_of::<Leaf>()
            + self.candidates.capacity() * std::mem::size_of::<Candidate>()
            + self
                .candidates
                .iter()
                .map(|c| c.path.capacity())
                .sum::<usize>()
    }
}

/// `status.lastSyncTime=0123abcd` → the path and the hashes of path and value;
/// paths may hold `=` themselves, so the value follows the last one.
fn parse(entry: &str) -> Option<(&str, Leaf)> {
    let (path, value) = entry.rsplit_once('=')?;
    let leaf = Leaf {
        path: hash_text(path),
        value: hash_text(value),
    };
    Some((path, leaf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(sync: u32, phase: &str) -> Vec<String> {
        vec![
            format!("status.conditions[type=Ready].status={phase}"),
            format!("status.lastSyncTime={sync:08x}"),
            "status.observedGeneration=0000000000000001".to_string(),
        ]
    }

    #[test]
    fn finds_the_field_changing_on_every_write() {
        let mut churn = FieldChurn::default();
        for n in 0..10 {
            churn.record(&digest(n, "True"), u64::from(n), 0.8);
        }
        assert_eq!(
            churn.churning(0.8, 0),
            Some(Churn {
                path: "status.lastSyncTime",
                ratio: 1.0
            })
        );
        assert_eq!(churn.churning(0.8, 10), None, "nothing compared since");
    }

    #[test]
    fn fields_changing_now_and_then_do_not_churn() {
        let mut churn = FieldChurn::default();
        for n in 0..10u32 {
            let phase = if n % 3 == 0 { "True" } else { "False" };
            churn.record(&digest(7, phase), u64::from(n), 0.8);
        }
        assert_eq!(churn.churning(0.8, 0), None);
    }

    #[test]
    fn follows_a_bounded_number_of_paths() {
        let mut churn = FieldChurn::default();
        for n in 0..50u32 {
            let leaves: Vec<String> = (0..40).map(|leaf| format!("status.f{leaf}={n}")).collect();
            churn.record(&leaves, u64::from(n), 0.8);
        }
        assert!(churn.previous.len() <= LEAVES);
        assert!(churn.candidates.len() <= CANDIDATES);
        assert!(churn.churning(0.8, 0).is_some());
    }
}
