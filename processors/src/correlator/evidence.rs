//! The few latest evidence references of one detector about one object: where an
//! on-call engineer should look (trace ids, reconcile ids, log line positions).

use std::collections::VecDeque;

use super::compact::bounded;
use super::signal::MAX_EVIDENCE;

#[derive(Debug, Clone, Default)]
pub(crate) struct Evidence {
    references: VecDeque<String>,
}

impl Evidence {
    /// Keeps `reference` as the newest, forgetting the oldest beyond [`MAX_EVIDENCE`].
    pub(crate) fn push(&mut self, reference: &str) {
        if reference.is_empty() {
            return;
        }
        let reference = bounded(reference);
        if self.references.contains(&reference) {
            return;
        }
        if self.references.len() >= MAX_EVIDENCE {
            self.references.pop_front();
        }
        self.references.push_back(reference);
    }

    /// The references, oldest first.
    pub(crate) fn to_vec(&self) -> Vec<String> {
        self.references.iter().cloned().collect()
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.references.capacity() * std::mem::size_of::<String>()
            + self.references.iter().map(String::capacity).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_distinct_references() {
        let mut evidence = Evidence::default();
        for reference in ["a", "b", "b", "c", "d", "e", "f", ""] {
            evidence.push(reference);
        }
        assert_eq!(evidence.to_vec(), ["b", "c", "d", "e", "f"]);
    }
}
