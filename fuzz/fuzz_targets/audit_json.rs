//! Kubernetes audit JSON: the input as one audit-log line (an `Event`, or an
//! `EventList`) read by the tagger's audit parser, and as a webhook body (an
//! `EventList`) split into events, filtered and turned into tagged log records.

#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope::fuzzing::{EventFilter, EventList, K8sAuditConfig, admitted_records};
use opscope_model::kubernetes::audit::{parse_audit, parse_audit_line};
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use serde_json::Value;

fn audit_line(line: &str) {
    let Ok(facts) = parse_audit_line(line) else {
        return;
    };
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return;
    };
    let most = match value.get("items") {
        Some(Value::Array(items)) if value.get("kind") == Some(&Value::from("EventList")) => {
            items.len()
        }
        _ => 1,
    };
    assert!(
        facts.len() <= most,
        "{} facts of {most} events",
        facts.len()
    );
    assert_eq!(facts, parse_audit(&value));
}

fn webhook_body(body: &[u8]) {
    let config = K8sAuditConfig::default();
    if let Ok(list) = EventList::parse(body, config.max_events_per_request)
        && let Ok(events) = list.events()
    {
        for event in &events {
            let document = event.body();
            assert!(
                serde_json::from_str::<Value>(&document).is_ok(),
                "{document}"
            );
            event.time_unix_nano();
            event.header.qualified_resource();
        }
    }
    let filter = EventFilter::new(&config);
    if let Ok(mut request) = admitted_records(body, &filter, config.max_events_per_request) {
        OperatorTagger::new(&TaggerConfig::default()).tag_logs(&mut request);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(line) = std::str::from_utf8(data) {
        audit_line(line);
    }
    webhook_body(data);
});
