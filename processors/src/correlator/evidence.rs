//! The few latest evidence references of one detector about one object: where an
//! on-call engineer should look (trace ids, reconcile ids, log line positions).

use std::cell::OnceCell;

use super::compact::boundary;
use super::events::RecordPlace;
use opscope_model::signal::MAX_EVIDENCE;

/// The evidence reference of one event, written the first time a detector keeps it:
/// most events are kept by none.
pub(crate) struct LazyReference<'a> {
    place: &'a RecordPlace,
    /// The reconcile's trace id in hex, for events that give no place.
    trace_id: &'a str,
    reconcile_id: &'a str,
    written: OnceCell<Option<String>>,
}

impl<'a> LazyReference<'a> {
    pub(crate) fn new(place: &'a RecordPlace, trace_id: &'a str, reconcile_id: &'a str) -> Self {
        Self {
            place,
            trace_id,
            reconcile_id,
            written: OnceCell::new(),
        }
    }

    /// The reference: where the record is and its reconcile, else the trace, else
    /// the reconcile alone.
    pub(crate) fn get(&self) -> Option<&str> {
        self.written
            .get_or_init(|| {
                let placed = self.place.source.is_some() || self.place.trace_id.is_some();
                if !placed && !self.trace_id.is_empty() {
                    return Some(format!("trace {}", self.trace_id));
                }
                self.place.reference(self.reconcile_id)
            })
            .as_deref()
    }
}

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
