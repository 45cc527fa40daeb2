//! The API server's 409 conflict message, found wherever it appears: span status,
//! log `error` fields, audit responses, also with its quotes escaped inside JSON text.

use opscope_model::kubernetes::kinds::split_qualified_resource;

const PREFIX: &str = "Operation cannot be fulfilled on ";
const OBJECT_MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";
const STORAGE_ERROR: &str = "StorageError: invalid object";
const UID_PRECONDITION: &str = "Precondition failed: UID in precondition";
/// Longest `resource.group` plus name worth scanning: names are at most 253
/// characters, so a scan never runs far past a false start (linear overall).
const MAX_REFERENCE_LEN: usize = 640;

/// An object a write could not be applied to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Lowercase plural: `rayjobs`.
    pub resource: String,
    /// Empty for the core group.
    pub group: String,
    pub name: String,
    pub reason: ConflictReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictReason {
    /// The write carried a stale resourceVersion: someone wrote the object first.
    ObjectModified,
    /// The write named a UID the object no longer has: it was deleted and recreated.
    UidPrecondition,
}

/// The first conflict message in `text`, if any.
pub fn find_conflict(text: &str) -> Option<Conflict> {
    // Most messages are empty or short (every span's status is asked): the substring
    // searcher is not set up for those.
    if text.len() < PREFIX.len() {
        return None;
    }
    let mut rest = text;
    while let Some(start) = rest.find(PREFIX) {
        rest = rest.get(start + PREFIX.len()..)?;
        if let Some(conflict) = conflict_at(rest) {
            return Some(conflict);
        }
    }
    None
}

/// The namespace of `name` where the text writes the object as `namespace/name`
/// (`sync {"update" "pmem-csi/sub-1"} failed: Operation cannot be fulfilled on …
/// "sub-1"`): the namespace a 409 names no namespace for.
pub fn namespace_in<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let is_name_byte =
        |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.';
    let needle = format!("/{name}");
    text.match_indices(needle.as_str()).find_map(|(at, _)| {
        let after = text.as_bytes().get(at + needle.len());
        if after.is_some_and(|b| is_name_byte(*b)) {
            return None;
        }
        let before = text.get(..at)?;
        let start = before
            .bytes()
            .rposition(|b| !is_name_byte(b))
            .map_or(0, |at| at + 1);
        // A path segment (`…/deployments/web`) is a URL's, not `namespace/name`.
        if start > 0 && before.as_bytes().get(start - 1) == Some(&b'/') {
            return None;
        }
        let namespace = before.get(start..)?;
        (!namespace.is_empty() && namespace.len() <= 63).then_some(namespace)
    })
}

/// Reads `<resource>[.<group>] "<name>": <reason>` at the start of `text`.
fn conflict_at(text: &str) -> Option<Conflict> {
    let window = head(text, MAX_REFERENCE_LEN);
    let (qualified, after_resource) = window.split_once(' ')?;
    if qualified.is_empty() || !qualified.chars().all(is_resource_char) {
        return None;
    }
    let (name, after_name) = quoted_name(after_resource)?;
    let consumed = window.len() - after_name.len();
    let reason_text = text.get(consumed..)?.strip_prefix(": ")?;
    let reason = reason_of(reason_text)?;
    let (resource, group) = split_qualified_resource(qualified);
    Some(Conflict {
        resource,
        group,
        name: name.to_string(),
        reason,
    })
}

/// `"name"` or `\"name\"` (any number of escaping backslashes), and what follows it.
fn quoted_name(text: &str) -> Option<(&str, &str)> {
    let opened = text.trim_start_matches('\\').strip_prefix('"')?;
    let end = opened.find(['"', '\\'])?;
    let name = opened.get(..end)?;
    if name.is_empty() {
        return None;
    }
    let closed = opened
        .get(end..)?
        .trim_start_matches('\\')
        .strip_prefix('"')?;
    Some((name, closed))
}

fn reason_of(text: &str) -> Option<ConflictReason> {
    if text.starts_with(OBJECT_MODIFIED) {
        return Some(ConflictReason::ObjectModified);
    }
    let storage_error = text.starts_with(STORAGE_ERROR)
        && head(text, MAX_REFERENCE_LEN * 2).contains(UID_PRECONDITION);
    storage_error.then_some(ConflictReason::UidPrecondition)
}

/// Resource and group names: lowercase DNS labels joined by dots.
fn is_resource_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn head(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_written_with_the_name() {
        let text = r#"sync {"update" "pmem-csi/sub-1"} failed: Operation cannot be fulfilled on subscriptions.operators.coreos.com "sub-1""#;
        assert_eq!(namespace_in(text, "sub-1"), Some("pmem-csi"));
        assert_eq!(namespace_in("a/sub-10", "sub-1"), None);
        assert_eq!(namespace_in("https://x/sub-1", "sub-1"), None);
        assert_eq!(
            namespace_in(
                "PUT at: https://h/apis/apps/v1/namespaces/ns/deployments/web",
                "web"
            ),
            None
        );
        assert_eq!(namespace_in("no namespace", "sub-1"), None);
    }

    const PLAIN: &str = r#"Operation cannot be fulfilled on rayjobs.ray.io "train": the object has been modified; please apply your changes to the latest version and try again"#;

    fn modified(resource: &str, group: &str, name: &str) -> Option<Conflict> {
        Some(Conflict {
            resource: resource.into(),
            group: group.into(),
            name: name.into(),
            reason: ConflictReason::ObjectModified,
        })
    }

    #[test]
    fn the_plain_message() {
        assert_eq!(find_conflict(PLAIN), modified("rayjobs", "ray.io", "train"));
    }

    #[test]
    fn core_resources_have_no_group() {
        let text = r#"Operation cannot be fulfilled on configmaps "train-config": the object has been modified; please apply your changes to the latest version and try again"#;
        assert_eq!(
            find_conflict(text),
            modified("configmaps", "", "train-config")
        );
    }

    #[test]
    fn wrapped_by_an_operator_error() {
        let text = format!("failed to update status: {PLAIN}");
        assert_eq!(find_conflict(&text), modified("rayjobs", "ray.io", "train"));
    }

    #[test]
    fn escaped_inside_json() {
        let line = r#"{"level":"error","ts":"2024-05-01T12:00:00.123Z","msg":"Reconciler error","controller":"rayjob","error":"failed to update status: Operation cannot be fulfilled on rayjobs.ray.io \"train\": the object has been modified; please apply your changes to the latest version and try again"}"#;
        assert_eq!(find_conflict(line), modified("rayjobs", "ray.io", "train"));
        let twice = r#"{"body":"{\"error\":\"Operation cannot be fulfilled on leases.coordination.k8s.io \\\"ray-operator-lock\\\": the object has been modified; please apply your changes to the latest version and try again\"}"}"#;
        assert_eq!(
            find_conflict(twice),
            modified("leases", "coordination.k8s.io", "ray-operator-lock")
        );
    }

    #[test]
    fn uid_precondition_storage_error() {
        let text = r#"Operation cannot be fulfilled on pods "train-head-0": StorageError: invalid object, Code: 4, Key: /registry/pods/ml/train-head-0, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: 6a1c0c4e-2f3b-4d5e-8a9b-0c1d2e3f4a5b, UID in object meta: 7b2d1d5f-3a4c-4e6f-9bac-1d2e3f4a5b6c"#;
        assert_eq!(
            find_conflict(text),
            Some(Conflict {
                resource: "pods".into(),
                group: String::new(),
                name: "train-head-0".into(),
                reason: ConflictReason::UidPrecondition,
            })
        );
    }

    #[test]
    fn other_409_messages_are_not_write_conflicts() {
        for text in [
            r#"Operation cannot be fulfilled on namespaces "ml": The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system."#,
            r#"rayjobs.ray.io "train" already exists"#,
            "Operation cannot be fulfilled on ",
            r#"Operation cannot be fulfilled on rayjobs.ray.io "train"#,
            r#"Operation cannot be fulfilled on rayjobs.ray.io "": the object has been modified; please apply your changes to the latest version and try again"#,
            r#"Operation cannot be fulfilled on Ray Jobs "train": the object has been modified; please apply your changes to the latest version and try again"#,
            "",
        ] {
            assert_eq!(find_conflict(text), None, "{text}");
        }
    }

    #[test]
    fn a_false_start_does_not_hide_a_later_message() {
        let text = format!("Operation cannot be fulfilled on something else; then {PLAIN}");
        assert_eq!(find_conflict(&text), modified("rayjobs", "ray.io", "train"));
    }

    #[test]
    fn huge_and_odd_input_is_handled() {
        let many_starts = PREFIX.repeat(20_000);
        assert_eq!(find_conflict(&many_starts), None);
        let long_name = format!(
            "Operation cannot be fulfilled on pods \"{}\": the object has been modified",
            "x".repeat(100_000)
        );
        assert_eq!(find_conflict(&long_name), None);
        let multibyte = format!("{PREFIX}{}", "é".repeat(1000));
        assert_eq!(find_conflict(&multibyte), None);
    }
}
