use super::*;
use opscope_proto::otlp::common::v1::any_value;

fn workload(config: WorkloadConfig) -> OperatorWorkload {
    OperatorWorkload::new(config, 1_700_000_000_000_000_000).expect("valid config")
}

fn string_attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
    })
}

#[test]
fn the_shares_of_misbehaving_objects_are_as_configured() {
    let generated = workload(WorkloadConfig {
        objects: 1000,
        loop_fraction: 0.02,
        conflict_fraction: 0.01,
        leak_fraction: 0.005,
        ..WorkloadConfig::default()
    });
    assert_eq!(
        generated.behaviour_counts(),
        [
            (Behaviour::Healthy, 965),
            (Behaviour::Looping, 20),
            (Behaviour::Conflicting, 10),
            (Behaviour::Leaking, 5)
        ]
    );
}

#[test]
fn a_traces_request_holds_whole_reconciles_of_two_to_six_calls() {
    let mut generated = workload(WorkloadConfig::default());
    let (request, count) = generated.traces(500, 42);
    let spans: Vec<&Span> = request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect();
    assert_eq!(spans.len(), count);
    assert!((500..500 + 7).contains(&count), "{count}");
    let roots: Vec<&&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert!(
        roots
            .iter()
            .all(|s| s.name == "reconcile" && s.end_time_unix_nano == 42)
    );
    let calls = count - roots.len();
    assert!(calls >= roots.len() * 2 && calls <= roots.len() * 6);
    assert!(
        roots
            .iter()
            .all(|s| string_attribute(&s.attributes, "k8s.object.name").is_some())
    );
}

#[test]
fn conflicting_objects_meet_409s_and_leaking_ones_are_deleted() {
    let mut generated = workload(WorkloadConfig {
        objects: 10,
        pods: 1,
        loop_fraction: 0.0,
        conflict_fraction: 0.5,
        leak_fraction: 0.5,
        ..WorkloadConfig::default()
    });
    let (request, _) = generated.traces(200, 42);
    let spans: Vec<&Span> = request.resource_spans[0].scope_spans[0]
        .spans
        .iter()
        .collect();
    let conflicted = spans
        .iter()
        .filter(|s| {
            s.status.as_ref().is_some_and(|s| {
                s.message.contains("\"gadget-")
                    || s.message.contains("\"widget-")
                    || s.message.contains("\"bucket-")
            })
        })
        .count();
    assert!(conflicted > 0, "409 messages name the object");
    let deleted = spans
        .iter()
        .filter(|s| {
            s.attributes
                .iter()
                .any(|kv| kv.key == "k8s.object.deletion_timestamp")
        })
        .count();
    assert!(deleted > 0);
}

#[test]
fn log_records_are_controller_runtime_json_with_a_reconcile_id() {
    let mut generated = workload(WorkloadConfig::default());
    let (request, count) = generated.logs(100, 1_700_000_000_123_456_789);
    let records: Vec<&LogRecord> = request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| &s.log_records)
        .collect();
    assert_eq!(records.len(), count);
    assert!(count >= 100);
    for record in records {
        let Some(any_value::Value::StringValue(body)) =
            record.body.as_ref().and_then(|b| b.value.as_ref())
        else {
            panic!("a string body");
        };
        assert!(body.starts_with(r#"{"level":""#), "{body}");
        assert!(body.contains(r#""ts":1700000000.123456,"#), "{body}");
        assert!(body.contains(r#""reconcileID":""#), "{body}");
        assert!(body.ends_with('}'));
    }
}

#[test]
fn a_metrics_request_has_exactly_the_points_asked_for() {
    let mut generated = workload(WorkloadConfig::default());
    for wanted in [1, 9, 10, 100] {
        let (request, count) = generated.metrics(wanted, 5);
        let points: usize = request
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(controller_metrics::point_count)
            .sum();
        assert_eq!((count, points), (wanted, wanted));
    }
}

#[test]
fn the_default_settings_are_valid() {
    assert!(WorkloadConfig::default().check().is_ok());
}

#[test]
fn bad_settings_are_refused() {
    let refused = |config| OperatorWorkload::new(config, 0).err();
    assert_eq!(
        refused(WorkloadConfig {
            objects: 0,
            ..WorkloadConfig::default()
        }),
        Some(WorkloadConfigError::Empty {
            objects: 0,
            pods: 10
        })
    );
    assert_eq!(
        refused(WorkloadConfig {
            loop_fraction: 0.7,
            leak_fraction: 0.7,
            ..WorkloadConfig::default()
        }),
        Some(WorkloadConfigError::Fractions)
    );
    assert_eq!(
        refused(WorkloadConfig {
            min_calls: 3,
            max_calls: 2,
            ..WorkloadConfig::default()
        }),
        Some(WorkloadConfigError::Calls { min: 3, max: 2 })
    );
}
