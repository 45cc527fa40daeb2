//! The few latest evidence references of one detector about one object: where an
//! on-call engineer should look (trace ids, reconcile ids, log line positions).

use super::compact::boundary;
use super::signal::MAX_EVIDENCE;

#[derive(Debug, Clone, Default)]
pub(crate) struct Evidence {
    /// Oldest first; at most [`MAX_EVIDENCE`], so dropping the oldest is cheap.
    references: Vec<String>,
}

impl Evidence {
    /// Keeps `reference` as the newest, forgetting the oldest beyond [`MAX_EVIDENCE`].
    pub(crate) fn push(&mut self, reference: &str) {
        if reference.is_empty() {
            return;
        }
        // Compared before it is copied: most records repeat a reference kept already.
        let reference = reference.get(..boundary(reference)).unwrap_or_default();
        // Newest first: a repeated reference is most often the latest one.
        if self.references.iter().rev().any(|kept| kept == reference) {
            return;
        }
        if self.references.len() >= MAX_EVIDENCE {
            self.references.remove(0);
        }
        // Room for all at once: growing by doubling would leave three unused slots
        // in every tracked object's evidence.
        if self.references.capacity() == 0 {
            self.references.reserve_exact(MAX_EVIDENCE);
        }
        self.references.push(reference.to_string());
    }

    /// The references, oldest first.
    pub(crate) fn as_slice(&self) -> &[String] {
        &self.references
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
        assert_eq!(evidence.as_slice(), ["b", "c", "d", "e", "f"]);
        assert_eq!(evidence.references.capacity(), MAX_EVIDENCE);
    }
}
