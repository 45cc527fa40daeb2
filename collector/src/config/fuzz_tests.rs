//! Property tests of config reading: mutated YAML documents are read or refused with
//! errors, never a panic, and `${env:...}` expansion gives exactly what it names.

use opscope_testkit::mutate::{mutated_text, token_soup};
use proptest::prelude::*;
use serde_json::Value;

use super::{Config, DEFAULT_CONFIG, env};

const PIPELINES: &str = r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: ${env:GRPC_ENDPOINT:-127.0.0.1:4317}
      http:
        endpoint: 127.0.0.1:${env:HTTP_PORT}
  filelog:
    include: [/var/log/pods/*/*/*.log]
processors:
  batch:
    timeout: 200ms
  operator_tagger:
exporters:
  otlp/jaeger:
    endpoint: jaeger:4317
    tls: { insecure: true }
  loki:
    endpoint: http://loki:3100/loki/api/v1/push
    headers: { X-Scope-OrgID: "$$tenant" }
  debug:
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/jaeger, debug]
    logs:
      receivers: [otlp, filelog]
      processors: [operator_tagger, batch]
      exporters: [loki]
"#;

fn lookup(name: &str) -> Option<String> {
    match name {
        "HTTP_PORT" => Some("4318".to_string()),
        "EMPTY" => Some(String::new()),
        "BRACES" => Some("}${env:HTTP_PORT}$".to_string()),
        _ => None,
    }
}

/// A piece of a config value and what it expands to.
fn piece() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        "[^$]{0,8}".prop_map(|text| (text.clone(), text)),
        Just(("$$".to_string(), "$".to_string())),
        Just(("${env:HTTP_PORT}".to_string(), "4318".to_string())),
        Just((
            "${env:BRACES}".to_string(),
            "}${env:HTTP_PORT}$".to_string()
        )),
        Just(("${env:EMPTY:-unused}".to_string(), String::new())),
        "[^$}]{0,8}".prop_map(|default| (format!("${{env:UNSET_1:-{default}}}"), default)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn mutated_configs_are_read_or_refused_without_panic(text in mutated_text(vec![
        DEFAULT_CONFIG.to_string(),
        PIPELINES.to_string(),
    ])) {
        if let Err(errors) = Config::from_yaml(&text, &lookup) {
            prop_assert!(!errors.0.is_empty());
        }
    }

    #[test]
    fn any_value_expands_or_fails_without_panic(text in prop_oneof![token_soup(), any::<String>()]) {
        let mut value = Value::String(text.clone());
        let mut errors = Vec::new();
        env::expand(&mut value, "key", &lookup, &mut errors);
        if !text.contains('$') {
            prop_assert_eq!(value, Value::String(text));
        }
    }

    /// Expansion replaces each reference by its value once: a value that looks like a
    /// reference is not expanded again.
    #[test]
    fn references_expand_to_what_they_name(pieces in proptest::collection::vec(piece(), 0..8)) {
        // A leading literal keeps the value from being one whole reference (which
        // takes the type of its expansion).
        let text: String = std::iter::once("x").chain(pieces.iter().map(|(t, _)| t.as_str())).collect();
        let expected: String = std::iter::once("x").chain(pieces.iter().map(|(_, e)| e.as_str())).collect();
        let mut value = Value::String(text);
        let mut errors = Vec::new();
        env::expand(&mut value, "key", &lookup, &mut errors);
        prop_assert!(errors.is_empty(), "{:?}", errors.iter().map(|e| &e.message).collect::<Vec<_>>());
        prop_assert_eq!(value, Value::String(expected));
    }
}
