//! Property tests of the audit event parser: fixture events and event lists mutated
//! as bytes, and as JSON (a field replaced by a value of another type or size).

use opscope_model::kubernetes::audit::{parse_audit, parse_audit_line};
use opscope_testkit::mutate::{lines_of, mutated_text, token_soup};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::Value;

const JSONL_FIXTURES: &[&str] = &[
    include_str!("fixtures/audit/conflict_409.jsonl"),
    include_str!("fixtures/audit/delete_with_finalizers.jsonl"),
    include_str!("fixtures/audit/malformed.jsonl"),
    include_str!("fixtures/audit/metadata_level.jsonl"),
    include_str!("fixtures/audit/patch_finalizer.jsonl"),
    include_str!("fixtures/audit/status_update_request_response.jsonl"),
];
const EVENT_LIST: &str = include_str!("fixtures/audit/event_list.json");

/// Every fixture event on one line, and the event list compacted onto one.
fn seeds() -> Vec<String> {
    let mut seeds = lines_of(JSONL_FIXTURES);
    if let Ok(list) = serde_json::from_str::<Value>(EVENT_LIST) {
        seeds.push(list.to_string());
    }
    seeds
}

fn seed_values() -> Vec<Value> {
    seeds()
        .iter()
        .filter_map(|seed| serde_json::from_str(seed).ok())
        .collect()
}

/// At most one fact per event: one for an `Event`, one per item of an `EventList`.
fn most_facts(value: &Value) -> usize {
    match value.get("items") {
        Some(Value::Array(items)) if value.get("kind") == Some(&Value::from("EventList")) => {
            items.len()
        }
        _ => 1,
    }
}

/// JSON values of the wrong type or at the edges of their type.
fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        token_soup().prop_map(Value::from),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,12})?(Z|[+-][0-9]{2}:[0-9]{2})?"
            .prop_map(Value::from),
        Just(Value::Array(Vec::new())),
        Just(Value::Object(serde_json::Map::new())),
        Just(Value::from(vec![Value::from("a"), Value::Null])),
    ]
}

/// The JSON pointers of every node of `value`.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                pointers(child, format!("{at}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                pointers(child, format!("{at}/{index}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// A fixture event with up to four of its nodes replaced.
fn mutated_value() -> impl Strategy<Value = Value> {
    let replacements = proptest::collection::vec((any::<Index>(), odd_value()), 1..4);
    (proptest::sample::select(seed_values()), replacements).prop_map(|(mut value, replacements)| {
        for (index, replacement) in replacements {
            let mut all = Vec::new();
            pointers(&value, String::new(), &mut all);
            let pointer = index.get(&all).clone();
            if let Some(node) = value.pointer_mut(&pointer) {
                *node = replacement;
            }
        }
        value
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn mutated_audit_lines_are_read_without_panic(line in mutated_text(seeds())) {
        if let Ok(facts) = parse_audit_line(&line) {
            let most = serde_json::from_str::<Value>(&line).map_or(1, |value| most_facts(&value));
            prop_assert!(facts.len() <= most, "{} facts from {most} events", facts.len());
        }
    }

    #[test]
    fn arbitrary_text_is_not_an_audit_event(line in any::<String>()) {
        // Arbitrary text is all but never a valid audit event; it must only not panic.
        let _ = parse_audit_line(&line);
    }

    #[test]
    fn audit_events_with_odd_fields_are_read_without_panic(value in mutated_value()) {
        let facts = parse_audit(&value);
        prop_assert!(facts.len() <= most_facts(&value));
        // Compared with the document as read back from its text: serde_json may
        // read a printed float back one unit in the last place off.
        let line = value.to_string();
        let read_back: Value = serde_json::from_str(&line).unwrap_or_default();
        if let Ok(from_line) = parse_audit_line(&line) {
            prop_assert_eq!(from_line, parse_audit(&read_back));
        }
    }
}
