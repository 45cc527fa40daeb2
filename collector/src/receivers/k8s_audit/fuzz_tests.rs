//! Property tests of the audit webhook's payload handling: `EventList` bodies mutated
//! as bytes are refused or split into events whose documents stay valid JSON, and
//! what is admitted is tagged without panic.

use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::any_value::Value as AnyValueKind;
use opscope_proto::otlp::logs::v1::LogRecord;
use opscope_testkit::mutate::mutated_bytes;
use proptest::prelude::*;
use serde_json::Value;

use super::config::K8sAuditConfig;
use super::filter::EventFilter;
use super::webhook::admitted_records;
use opscope_model::kubernetes::audit::EventList;

const MAX_EVENTS: usize = 10_000;

const EVENT_LIST: &str =
    include_str!("../../../../processors/tests/fixtures/audit/event_list.json");

fn seeds() -> Vec<Vec<u8>> {
    let compact = serde_json::from_str::<Value>(EVENT_LIST)
        .map(|list| list.to_string())
        .unwrap_or_default();
    vec![
        EVENT_LIST.as_bytes().to_vec(),
        compact.into_bytes(),
        br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{ },{"kind":"Event"},{"apiVersion":"x"}]}"#.to_vec(),
        br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":null}"#.to_vec(),
    ]
}

fn log_records(request: &ExportLogsServiceRequest) -> impl Iterator<Item = &LogRecord> {
    request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| &s.log_records)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Every event of an accepted list is a JSON document of its own, and an object
    /// event names its kind and version (put back when the list left them out).
    #[test]
    fn mutated_event_lists_give_valid_event_documents(body in mutated_bytes(seeds())) {
        let Ok(list) = EventList::parse(&body, MAX_EVENTS) else {
            return Ok(());
        };
        let Ok(events) = list.events() else {
            return Ok(());
        };
        for event in &events {
            let document = event.body();
            let parsed = serde_json::from_str::<Value>(&document);
            prop_assert!(parsed.is_ok(), "{document}");
            if let Ok(Value::Object(members)) = parsed {
                prop_assert!(members.contains_key("kind") && members.contains_key("apiVersion"), "{document}");
            }
            event.time_unix_nano();
            event.header.qualified_resource();
        }
    }

    /// What the default filter admits becomes at most one record per event, and the
    /// tagger reads those records without panic.
    #[test]
    fn admitted_records_are_tagged_without_panic(body in mutated_bytes(seeds())) {
        let filter = EventFilter::new(&K8sAuditConfig::default());
        if let Ok(mut request) = admitted_records(&body, &filter, MAX_EVENTS) {
            let items = EventList::parse(&body, MAX_EVENTS).map_or(0, |list| list.events().map_or(0, |e| e.len()));
            let records = log_records(&request).count();
            prop_assert!(records <= items, "{records} records of {items} events");
            for record in log_records(&request) {
                let body = record.body.as_ref().and_then(|b| b.value.as_ref());
                prop_assert!(matches!(body, Some(AnyValueKind::StringValue(_))));
            }
            OperatorTagger::new(&TaggerConfig::default()).tag_logs(&mut request);
        }
    }
}
