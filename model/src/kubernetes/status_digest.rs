//! A digest of an object's status: one `path=hash` entry per leaf, so the
//! correlator can tell which status field changes from one write to the next.

use serde_json::{Map, Value};

use crate::hash::fnv1a;

/// At most this many entries per object.
pub const MAX_ENTRIES: usize = 32;
/// Values deeper than this below `status` are digested whole.
pub const MAX_DEPTH: usize = 6;

/// Lists keyed by an item field instead of their index, so reordering them is no change.
const KEYED_LISTS: &[(&str, &str)] = &[("conditions", "type")];

/// `status.lastSyncTime=0123456789abcdef`, …: the leaves of an object's `status`
/// member, each with a stable 64-bit FNV-1a hash of its JSON text, sorted. Empty
/// without a status. Paths may contain `=` (`conditions[type=Ready]`): split an
/// entry at its last `=`.
pub fn status_digest(status: Option<&Value>) -> Vec<String> {
    let mut entries = Vec::new();
    match status {
        None | Some(Value::Null) => {}
        Some(status) => visit(status, "status".to_string(), 0, &mut entries),
    }
    entries.sort();
    entries
}

/// Adds the leaves of `value` at `path`, stopping once the cap is reached.
fn visit(value: &Value, path: String, depth: usize, entries: &mut Vec<String>) {
    if entries.len() >= MAX_ENTRIES {
        return;
    }
    let children = match value {
        _ if depth >= MAX_DEPTH => Vec::new(),
        Value::Object(fields) => object_children(fields, &path),
        Value::Array(items) => array_children(items, &path),
        _ => Vec::new(),
    };
    if children.is_empty() {
        entries.push(format!(
            "{path}={:016x}",
            fnv1a(value.to_string().as_bytes())
        ));
        return;
    }
    for (child_path, child) in children {
        visit(child, child_path, depth + 1, entries);
    }
}

/// Fields sorted by key, whatever order the map keeps them in.
fn object_children<'a>(fields: &'a Map<String, Value>, path: &str) -> Vec<(String, &'a Value)> {
    let mut children: Vec<_> = fields
        .iter()
        .map(|(key, value)| (format!("{path}.{key}"), value))
        .collect();
    children.sort_by(|a, b| a.0.cmp(&b.0));
    children
}

/// Items by index, or by their key field in keyed lists, in path order.
fn array_children<'a>(items: &'a [Value], path: &str) -> Vec<(String, &'a Value)> {
    let list_name = path.rsplit_once('.').map(|(_, last)| last);
    let key_field = KEYED_LISTS
        .iter()
        .find(|(list, _)| list_name == Some(*list))
        .map(|(_, field)| *field);
    let mut children: Vec<_> = items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            (
                format!("{path}[{}]", item_key(item, index, key_field)),
                item,
            )
        })
        .collect();
    children.sort_by(|a, b| a.0.cmp(&b.0));
    children
}

/// `type=Ready` for a keyed item that has its key, else the index.
fn item_key(item: &Value, index: usize, key_field: Option<&str>) -> String {
    let key = key_field.and_then(|field| Some((field, item.get(field)?.as_str()?)));
    match key {
        Some((field, value)) => format!("{field}={value}"),
        None => index.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(digest: &[String]) -> Vec<&str> {
        digest
            .iter()
            .filter_map(|entry| entry.rsplit_once('=').map(|(path, _)| path))
            .collect()
    }

    /// The digest of an object's status.
    fn digest_of(object: &Value) -> Vec<String> {
        status_digest(object.get("status"))
    }

    #[test]
    fn leaves_are_hashed_and_sorted() {
        let object = json!({
            "spec": {"replicas": 3},
            "status": {
                "lastSyncTime": "2024-05-01T12:00:00Z",
                "observedGeneration": 4,
                "jobStatus": "RUNNING",
            }
        });
        let digest = digest_of(&object);
        assert_eq!(
            paths(&digest),
            [
                "status.jobStatus",
                "status.lastSyncTime",
                "status.observedGeneration"
            ]
        );
        let expected = format!("{:016x}", fnv1a(b"\"2024-05-01T12:00:00Z\""));
        assert_eq!(digest[1], format!("status.lastSyncTime={expected}"));
    }

    #[test]
    fn a_changed_leaf_changes_only_its_entry() {
        let before =
            json!({"status": {"lastSyncTime": "2024-05-01T12:00:00Z", "phase": "Running"}});
        let after = json!({"status": {"lastSyncTime": "2024-05-01T12:00:05Z", "phase": "Running"}});
        let (before, after) = (digest_of(&before), digest_of(&after));
        assert_ne!(before[0], after[0]);
        assert_eq!(before[1], after[1]);
    }

    #[test]
    fn conditions_are_keyed_by_type() {
        let ready = json!({"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T12:00:00Z"});
        let synced = json!({"type": "Synced", "status": "True"});
        let one = json!({"status": {"conditions": [ready, synced]}});
        let other = json!({"status": {"conditions": [synced, ready]}});
        assert_eq!(digest_of(&one), digest_of(&other));
        assert!(
            paths(&digest_of(&one)).contains(&"status.conditions[type=Ready].lastTransitionTime")
        );
    }

    #[test]
    fn other_arrays_by_index() {
        let object = json!({"status": {"endpoints": ["10.0.0.1", "10.0.0.2"], "conditions": [{"status": "True"}]}});
        assert_eq!(
            paths(&digest_of(&object)),
            [
                "status.conditions[0].status",
                "status.endpoints[0]",
                "status.endpoints[1]"
            ]
        );
    }

    #[test]
    fn no_status_no_digest() {
        assert!(digest_of(&json!({"spec": {}})).is_empty());
        assert!(digest_of(&json!({"status": null})).is_empty());
        assert!(digest_of(&json!([1, 2])).is_empty());
        assert!(digest_of(&json!("status")).is_empty());
        assert_eq!(paths(&digest_of(&json!({"status": "Failure"}))), ["status"]);
        assert_eq!(paths(&digest_of(&json!({"status": {}}))), ["status"]);
    }

    #[test]
    fn bounded_in_entries_and_depth() {
        let wide: serde_json::Map<String, Value> =
            (0..1000).map(|i| (format!("f{i:04}"), json!(i))).collect();
        let digest = digest_of(&json!({"status": wide}));
        assert_eq!(digest.len(), MAX_ENTRIES);
        assert_eq!(paths(&digest)[0], "status.f0000");

        let deep = json!({"status": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}}});
        assert_eq!(paths(&digest_of(&deep)), ["status.a.b.c.d.e.f"]);
    }
}
