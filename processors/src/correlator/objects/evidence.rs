//! The few latest evidence references of one detector about one object: where an
//! on-call engineer should look (trace ids, reconcile ids, log line positions).

use std::cell::OnceCell;

use crate::correlator::compact::boundary;
use crate::correlator::intake::events::RecordPlace;
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

    /// Whether the record is a span: its reference names a trace and no other place.
    pub(crate) fn traced(&self) -> bool {
        self.place.source.is_none() && self.place.trace_id.is_some()
    }

    pub(crate) fn reconcile_id(&self) -> &str {
        self.reconcile_id
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

/// Traced references that [`Evidence::add_trace`] keeps of the five.
const MAX_TRACED: usize = 2;

/// Whether a reference leads to a trace.
fn leads_to_trace(reference: &str) -> bool {
    reference.starts_with("trace ") || reference.contains(" trace ")
}

/// Whether `kept` names reconcile `reconcile` and no trace: one a trace may join.
fn awaits_trace_of(kept: &str, reconcile: &str) -> bool {
    !leads_to_trace(kept)
        && kept
            .strip_suffix(reconcile)
            .is_some_and(|place| place.ends_with("reconcile "))
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
            // A reference that leads to a trace outlives the plain ones, which
            // keep coming while a loop fires, newest first and traceless (a
            // reconcile's spans reach the agent a batch after its log line).
            let oldest_untraced = self
                .references
                .iter()
                .position(|kept| !leads_to_trace(kept));
            self.references.remove(oldest_untraced.unwrap_or(0));
        }
        // Room for all at once: growing by doubling would leave three unused slots
        // in every tracked object's evidence.
        if self.references.capacity() == 0 {
            self.references.reserve_exact(MAX_EVIDENCE);
        }
        self.references.push(reference.to_string());
    }

    /// Whether a reference of reconcile `reconcile` is kept without its trace: asked
    /// before a span's reference is written, most spans join nothing.
    pub(crate) fn awaits_trace(&self, reconcile: &str) -> bool {
        !reconcile.is_empty()
            && (self.references.iter()).any(|kept| awaits_trace_of(kept, reconcile))
    }

    /// Adds the trace of a reconcile kept already from another of its records, most
    /// often its log line: `pod.log:12 reconcile R` and `trace T span S reconcile R`
    /// become `pod.log:12 trace T span S reconcile R`, a line to read and a trace to
    /// follow (the signal's span links to it). A log line written by a sampling
    /// logger may be missing; then the trace was kept as the reconcile's first record.
    pub(crate) fn add_trace(&mut self, traced: &str) {
        let Some((_, reconcile)) = traced.rsplit_once(" reconcile ") else {
            return;
        };
        if !traced.starts_with("trace ") {
            return;
        }
        let untraced = self
            .references
            .iter_mut()
            .find(|kept| awaits_trace_of(kept, reconcile));
        let Some(kept) = untraced else {
            return;
        };
        let place_end = kept.len() - reconcile.len() - "reconcile ".len();
        let merged = format!("{}{traced}", kept.get(..place_end).unwrap_or_default());
        *kept = merged
            .get(..boundary(&merged))
            .unwrap_or_default()
            .to_string();
        // The latest few traced references are enough to follow; the other places
        // stay for the freshest reconciles.
        if self
            .references
            .iter()
            .filter(|kept| leads_to_trace(kept))
            .count()
            > MAX_TRACED
            && let Some(oldest) = self.references.iter().position(|kept| leads_to_trace(kept))
        {
            self.references.remove(oldest);
        }
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

    #[test]
    fn traced_references_outlive_the_plain_ones_that_keep_coming() {
        let mut evidence = Evidence::default();
        for n in 0..5 {
            evidence.push(&format!("pod.log:{n} reconcile r{n}"));
        }
        for n in 0..3 {
            evidence.add_trace(&format!("trace t{n} span s{n} reconcile r{n}"));
        }
        for n in 5..9 {
            evidence.push(&format!("pod.log:{n} reconcile r{n}"));
        }
        assert_eq!(
            evidence.as_slice(),
            [
                "pod.log:1 trace t1 span s1 reconcile r1",
                "pod.log:2 trace t2 span s2 reconcile r2",
                "pod.log:6 reconcile r6",
                "pod.log:7 reconcile r7",
                "pod.log:8 reconcile r8"
            ]
        );
    }

    #[test]
    fn a_reconciles_trace_joins_its_log_line() {
        let mut evidence = Evidence::default();
        evidence.push("pod.log:12 reconcile r1");
        evidence.push("pod.log:13 reconcile r2");
        evidence.add_trace("trace 5b8e span eee1 reconcile r1");
        evidence.add_trace("trace 5b8e span eee2 reconcile r1");
        evidence.add_trace("trace 7f2c span aaa1 reconcile r3");
        evidence.add_trace("pod.log:14 reconcile r2");
        assert_eq!(
            evidence.as_slice(),
            [
                "pod.log:12 trace 5b8e span eee1 reconcile r1",
                "pod.log:13 reconcile r2"
            ]
        );
    }
}
