//! Property tests that throw malformed operator log lines at the tagger's format
//! recognition and stack-trace joining: fixture lines mutated, and arbitrary text.

use std::time::Duration;

use opscope_model::kubernetes::api_call::parse_api_path;
use opscope_processors::tagger::conflict::find_conflict;
use opscope_processors::tagger::formats::{
    LogFacts, is_continuation, parse_go_duration, recognize_line,
};
use opscope_processors::tagger::operator::deployment_of_pod;
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, any_value};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_testkit::mutate::{lines_of, mutated_text, token_soup};
use proptest::prelude::*;

const FIXTURES: &[&str] = &[
    include_str!("fixtures/logs/controller_runtime_json.log"),
    include_str!("fixtures/logs/controller_runtime_console.log"),
    include_str!("fixtures/logs/kube_rs.log"),
    include_str!("fixtures/logs/klog.log"),
    include_str!("fixtures/logs/logfmt.log"),
    include_str!("fixtures/logs/plain.log"),
];

fn fixture_line() -> impl Strategy<Value = String> {
    mutated_text(lines_of(FIXTURES))
}

/// Every text the facts hold comes from the line, so none is longer than it.
fn assert_bounded(facts: &LogFacts, line: &str) {
    let texts = [
        Some(&facts.message),
        facts.logger.as_ref(),
        facts.reconcile_id.as_ref(),
        facts.controller.as_ref(),
        facts.group.as_ref(),
        facts.kind.as_ref(),
        facts.namespace.as_ref(),
        facts.name.as_ref(),
        facts.error.as_ref(),
    ];
    for text in texts.into_iter().flatten() {
        assert!(
            text.len() <= line.len(),
            "{text:?} is longer than the line {line:?}"
        );
    }
}

fn log_record(body: &str) -> LogRecord {
    LogRecord {
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(body.to_string())),
        }),
        ..LogRecord::default()
    }
}

fn logs_request(bodies: &[String]) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: bodies.iter().map(|body| log_record(body)).collect(),
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

fn record_count(request: &ExportLogsServiceRequest) -> usize {
    request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum()
}

/// Go stack-trace lines as zap and the runtime print them.
fn go_frame() -> impl Strategy<Value = String> {
    let path = "[a-z]{1,8}(/[a-z_.]{1,8}){0,4}";
    prop_oneof![
        (path, 1..100_000u32, proptest::option::of(0..0xffffu32)).prop_map(
            |(path, line, offset)| match offset {
                Some(offset) => format!("\t/{path}.go:{line} +0x{offset:x}"),
                None => format!("\t/{path}.go:{line}"),
            }
        ),
        (1..10_000u32).prop_map(|id| format!("goroutine {id} [running]:")),
        path.prop_map(|path| format!("{path}/pkg.(*Controller).reconcileHandler")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn mutated_fixture_lines_are_read_without_panic(line in fixture_line()) {
        let facts = recognize_line(&line);
        assert_bounded(&facts, &line);
        is_continuation(&line);
    }

    #[test]
    fn arbitrary_text_is_read_without_panic(line in any::<String>()) {
        let facts = recognize_line(&line);
        assert_bounded(&facts, &line);
        is_continuation(&line);
    }

    #[test]
    fn token_soup_is_read_without_panic(line in token_soup()) {
        let facts = recognize_line(&line);
        assert_bounded(&facts, &line);
        is_continuation(&line);
    }

    /// The recognised facts do not depend on surrounding blanks or a colour code in
    /// front, which the recogniser strips before reading.
    #[test]
    fn blanks_and_a_leading_colour_do_not_change_the_facts(line in fixture_line()) {
        let facts = recognize_line(&line);
        prop_assert_eq!(&recognize_line(&format!("  {line} \t")), &facts);
        prop_assert_eq!(&recognize_line(&format!("\u{1b}[32m{}", line.trim_start())), &facts);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Joining stack-trace lines onto the record before them never makes records,
    /// and a batch of mutated lines is tagged without panic.
    #[test]
    fn joining_never_adds_records(
        lines in proptest::collection::vec(prop_oneof![3 => fixture_line(), 2 => go_frame()], 0..24)
    ) {
        let mut request = logs_request(&lines);
        let mut tagger = OperatorTagger::new(&TaggerConfig::default());
        tagger.tag_logs(&mut request);
        let joined = record_count(&request);
        prop_assert!(joined <= lines.len(), "{joined} records from {} lines", lines.len());
    }

    #[test]
    fn go_frames_are_continuations(frame in go_frame()) {
        prop_assert!(is_continuation(&frame), "{frame:?}");
    }

    #[test]
    fn go_durations_round_trip(hours in 0..1_000u64, minutes in 0..60u64, millis in 0..60_000u64) {
        let text = format!("{hours}h{minutes}m{}.{:03}s", millis / 1_000, millis % 1_000);
        let expected = Duration::from_secs(hours * 3_600 + minutes * 60) + Duration::from_millis(millis);
        prop_assert_eq!(parse_go_duration(&text), Some(expected));
    }

    #[test]
    fn go_durations_of_any_text_do_not_panic(text in prop_oneof![token_soup(), "[0-9.]{0,30}(ns|us|µs|ms|s|m|h){0,3}"]) {
        parse_go_duration(&text);
    }

    #[test]
    fn conflict_messages_in_any_text_do_not_panic(text in prop_oneof![
        token_soup(),
        mutated_text(vec![
            "Operation cannot be fulfilled on rayjobs.ray.io \"train\": the object has been modified; please apply your changes to the latest version and try again".to_string(),
            "Operation cannot be fulfilled on pods \"p\": Precondition failed: UID in precondition: 1, UID in object meta: 2".to_string(),
        ]),
    ]) {
        find_conflict(&text);
    }

    #[test]
    fn api_paths_of_any_text_do_not_panic(text in prop_oneof![
        token_soup(),
        mutated_text(vec![
            "https://10.96.0.1:443/apis/ray.io/v1/namespaces/ml/rayjobs/train/status?timeout=10s".to_string(),
            "/api/v1/watch/namespaces/default/pods?watch=true".to_string(),
            "/apis/apps/v1/deployments".to_string(),
        ]),
    ]) {
        parse_api_path(&text);
    }

    /// A namespaced object path gives back each of its segments.
    #[test]
    fn api_paths_round_trip(
        group in "[a-z]{1,8}(\\.[a-z]{1,8}){0,2}",
        version in "v[1-9](alpha[1-9]|beta[1-9])?",
        namespace in "[a-z0-9-]{1,20}",
        resource in "[a-z]{1,12}",
        name in "[a-z0-9.-]{1,20}",
        subresource in "(status|finalize|scale)?",
    ) {
        let mut url = format!("/apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}");
        if !subresource.is_empty() {
            url = format!("{url}/{subresource}");
        }
        let path = parse_api_path(&url);
        prop_assert!(path.is_some(), "{url}");
        let path = path.unwrap_or_default();
        prop_assert_eq!(
            [path.group, path.version, path.namespace, path.resource, path.name, path.subresource]
                .map(String::from),
            [group, version, namespace, resource, name, subresource]
        );
    }

    #[test]
    fn deployments_of_pod_names_are_prefixes(pod in prop_oneof![token_soup(), "[a-z-]{1,20}-[a-z0-9]{6,10}-[a-z0-9]{5}"]) {
        if let Some(deployment) = deployment_of_pod(&pod) {
            prop_assert!(pod.starts_with(deployment));
        }
    }
}
