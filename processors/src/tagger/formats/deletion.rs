//! What log lines say of an object's deletion: that it is being deleted or its
//! finalizer or cleanup failed (a deletion in progress), or that its finalizer was
//! removed (the deletion can complete).

/// What a message says of the deletion of the object it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionNote {
    /// Being deleted, finalizing, or failing to remove its finalizer or clean up.
    InProgress,
    /// Its finalizer was removed.
    FinalizerRemoved,
}

/// Phrases (lowercase) of a deletion in progress.
const IN_PROGRESS: &[&str] = &[
    "being deleted",
    "marked for deletion",
    "deletion is in progress",
    "deletiontimestamp is set",
    "has deletion timestamp",
    "handling deletion",
    "running finalizer",
    "failed to remove finalizer",
    "error removing finalizer",
    "unable to remove finalizer",
    "failed to finalize",
    "cleanup failed",
    "failed to clean up",
    "failed to cleanup",
    "waiting for the following",
];

/// Phrases (lowercase) of a finalizer removed.
const REMOVED: &[&str] = &[
    "removed finalizer",
    "finalizer removed",
    "removing the finalizer succeeded",
];

impl DeletionNote {
    pub fn from_message(message: &str) -> Option<DeletionNote> {
        // The phrases open messages: a long message's head is enough.
        let mut end = message.len().min(4096);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let lowercase = message.get(..end).unwrap_or_default().to_ascii_lowercase();
        if REMOVED.iter().any(|phrase| lowercase.contains(phrase)) {
            return Some(DeletionNote::FinalizerRemoved);
        }
        IN_PROGRESS
            .iter()
            .any(|phrase| lowercase.contains(phrase))
            .then_some(DeletionNote::InProgress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletion_phrases() {
        for message in [
            "KafkaCluster is marked for deletion, checking for children",
            "unable to update instance: no new finalizers can be added if the object is being deleted",
            "reconcile failed: Finalizer Error: failed to remove finalizer",
            "Still waiting for the following topics to be deleted: [kafka/x]",
        ] {
            assert_eq!(
                DeletionNote::from_message(message),
                Some(DeletionNote::InProgress),
                "{message}"
            );
        }
        assert_eq!(
            DeletionNote::from_message("Removed finalizer example.com/cleanup"),
            Some(DeletionNote::FinalizerRemoved)
        );
        assert_eq!(DeletionNote::from_message("Reconciling"), None);
    }
}
