//! Messages that tell of a write of the reconciled object's status (`Updating
//! zookeeper status`, `CR status updated`): from logs alone, the evidence that an
//! operator writes its status on every reconcile, the `self_triggered_status_write`
//! cause of a loop.

/// Words that say the status is (being) written.
const WRITE_VERBS: &[&str] = &[
    "updating", "updated", "update", "patching", "patched", "patch",
];
/// Words that say the write failed: a failed write is no evidence of a written status.
const FAILURE_WORDS: &[&str] = &["fail", "error", "unable", "could not", "cannot", "conflict"];
/// How far apart (in words) `status` and its verb may stand.
const MAX_DISTANCE: usize = 3;

/// Whether the message tells that the object's status was written.
pub fn tells_status_write(message: &str) -> bool {
    // Most messages do not say `status`: asked without lowercasing a copy.
    if !super::contains_ignore_case(message, "status") {
        return false;
    }
    let lower = message.to_ascii_lowercase();
    if FAILURE_WORDS.iter().any(|word| lower.contains(word)) {
        return false;
    }
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .take(64)
        .collect();
    words.iter().enumerate().any(|(at, word)| {
        *word == "status"
            && words
                .get(at.saturating_sub(MAX_DISTANCE)..(at + MAX_DISTANCE + 1).min(words.len()))
                .is_some_and(|near| near.iter().any(|near| WRITE_VERBS.contains(near)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_writes_told_in_messages() {
        // https://github.com/sieve-project/sieve (zookeeper-operator and nifikop logs)
        assert!(tells_status_write("Updating zookeeper status"));
        assert!(tells_status_write("CR status updated"));
        assert!(tells_status_write("Status updated for Widget ns/a"));
        assert!(!tells_status_write("failed to update status"));
        assert!(!tells_status_write("Updating StatefulSet"));
        assert!(!tells_status_write(
            "status: the server answered 200 after the cluster was updated long ago"
        ));
        assert!(!tells_status_write("Reconciling"));
    }
}
