//! Config reading: the embedded default, env expansion, and a table of bad configs
//! each reported at its path.

use super::*;

const BASE: &str = r#"
receivers:
  otlp:
    protocols:
      grpc:
      http:
        endpoint: 127.0.0.1:4318
processors:
  batch:
exporters:
  otlp/jaeger:
    endpoint: jaeger:4317
    tls: { insecure: true }
  debug:
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/jaeger, debug]
"#;

fn no_env(_: &str) -> Option<String> {
    None
}

fn errors_of(yaml: &str) -> Vec<String> {
    match Config::from_yaml(yaml, &no_env) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn embedded_default_is_valid_and_listens_on_localhost() {
    let config =
        Config::from_yaml(DEFAULT_CONFIG, &no_env).expect("the embedded default validates");
    let kinds: Vec<_> = config.pipelines().map(|p| p.kind).collect();
    // traces, logs, metrics and metrics/operator (fed by the operator_metrics connector).
    assert_eq!(kinds.len(), 4);
    let ReceiverConfig::Otlp(otlp) = &config.receivers["otlp"] else {
        panic!("an otlp receiver");
    };
    assert_eq!(
        otlp.protocols.grpc.as_ref().map(|g| g.endpoint.as_str()),
        Some("127.0.0.1:4317")
    );
    assert_eq!(
        otlp.protocols.http.as_ref().map(|h| h.endpoint.as_str()),
        Some("127.0.0.1:4318")
    );
    assert_eq!(config.service.telemetry.metrics.address, "127.0.0.1:8888");
    assert!(matches!(
        config.exporters["debug"],
        ExporterConfig::Debug(_)
    ));
}

#[test]
fn base_config_is_valid_with_collector_defaults() {
    let config = Config::from_yaml(BASE, &no_env).expect("valid");
    let ReceiverConfig::Otlp(otlp) = &config.receivers["otlp"] else {
        panic!("an otlp receiver");
    };
    let grpc = otlp
        .protocols
        .grpc
        .as_ref()
        .expect("an empty grpc: section enables gRPC");
    assert_eq!(grpc.max_message_bytes(), 4 * 1024 * 1024);
    let ExporterConfig::Otlp(jaeger) = &config.exporters["otlp/jaeger"] else {
        panic!("otlp/jaeger is an otlp exporter");
    };
    assert_eq!(jaeger.sending_queue.queue_size, 1000);
    assert_eq!(
        jaeger.retry_on_failure.max_elapsed_time,
        Duration::from_secs(300)
    );
    assert_eq!(config.service.shutdown_timeout, Duration::from_secs(10));
}

#[test]
fn env_references_are_expanded_before_typing() {
    let yaml = BASE.replace("jaeger:4317", "${env:JAEGER}").replace(
        "processors:\n  batch:",
        "processors:\n  batch:\n    send_batch_size: ${env:BATCH:-100}",
    );
    let lookup = |name: &str| (name == "JAEGER").then(|| "collector.example:4317".to_string());
    let config = Config::from_yaml(&yaml, &lookup).expect("valid");
    let ExporterConfig::Otlp(jaeger) = &config.exporters["otlp/jaeger"] else {
        panic!("otlp exporter");
    };
    assert_eq!(jaeger.endpoint, "collector.example:4317");
    let ProcessorConfig::Batch(batch) = &config.processors["batch"] else {
        panic!("batch processor");
    };
    assert_eq!(batch.send_batch_size, 100);
}

/// Each bad config, the text its error must start with.
const BAD: &[(&str, &str, &str)] = &[
    (
        "endpoint: jaeger:4317",
        "endpoint: htp://x",
        "exporters.otlp/jaeger.endpoint: invalid URL \"htp://x\"",
    ),
    (
        "tls: { insecure: true }",
        "tls: { insecure: true, bogus: 1 }",
        "exporters.otlp/jaeger.tls.bogus: unknown field `bogus`",
    ),
    (
        "  debug:\n",
        "  debug:\n  kafka:\n",
        "exporters.kafka: unknown exporter type \"kafka\"",
    ),
    (
        "  batch:\n",
        "  batch:\n    timeout: soon\n",
        "processors.batch.timeout: invalid duration \"soon\"",
    ),
    (
        "  batch:\n",
        "  batch:\n    send_batch_size: 10\n    send_batch_max_size: 5\n",
        "processors.batch.send_batch_max_size:",
    ),
    (
        "exporters: [otlp/jaeger, debug]",
        "exporters: [otlp/zipkin]",
        "service.pipelines.traces.exporters[0]: \"otlp/zipkin\" is not defined",
    ),
    (
        "receivers: [otlp]",
        "receivers: [filelog]",
        "service.pipelines.traces.receivers[0]: \"filelog\" is not defined",
    ),
    (
        "    traces:\n",
        "    profiles:\n",
        "service.pipelines.profiles: unknown pipeline type \"profiles\"",
    ),
    (
        "endpoint: 127.0.0.1:4318",
        "endpoint: 127.0.0.1",
        "receivers.otlp.protocols.http.endpoint: invalid address",
    ),
    (
        "      grpc:\n",
        "      grpc:\n        max_recv_msg_size_mb: 4\n",
        "receivers.otlp.protocols.grpc.max_recv_msg_size_mb: unknown field `max_recv_msg_size_mb`",
    ),
    (
        "endpoint: jaeger:4317",
        "endpoint: ${env:NOT_SET}",
        "exporters.otlp/jaeger.endpoint: environment variable NOT_SET is not set",
    ),
    (
        "tls: { insecure: true }",
        "tls: { insecure: true }\n    sending_queue: { queue_size: 0 }",
        "exporters.otlp/jaeger.sending_queue.queue_size: must be at least 1",
    ),
    (
        "tls: { insecure: true }",
        "tls: { insecure: true }\n    compression: lz4",
        "exporters.otlp/jaeger.compression: unknown variant `lz4`",
    ),
    (
        "tls: { insecure: true }",
        "tls: { insecure: true }\n    retry_on_failure: { max_elapsed_time: 5 }",
        "exporters.otlp/jaeger.retry_on_failure.max_elapsed_time: duration 5 has no unit",
    ),
    (
        "tls: { insecure: true }",
        "tls: { ca_file: /nonexistent/ca.pem }",
        "exporters.otlp/jaeger.tls.ca_file: cannot read /nonexistent/ca.pem",
    ),
    (
        "endpoint: jaeger:4317\n    tls: { insecure: true }",
        "endpoint: https://jaeger:4317\n    tls: { insecure_skip_verify: true }",
        "exporters.otlp/jaeger.tls.insecure_skip_verify: is not supported by the gRPC exporter",
    ),
    (
        "      grpc:\n",
        "      grpc:\n        tls: { cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem }\n",
        "receivers.otlp.protocols.grpc.tls.cert_file: cannot read /nonexistent/cert.pem: ",
    ),
    (
        "      grpc:\n",
        "      grpc:\n        tls: { key_file: /nonexistent/key.pem }\n",
        "receivers.otlp.protocols.grpc.tls.cert_file: is required",
    ),
    (
        "      grpc:\n",
        "      grpc:\n        tls: { cert_file: /nonexistent/cert.pem }\n",
        "receivers.otlp.protocols.grpc.tls.key_file: is required",
    ),
    (
        "      grpc:\n",
        "      grpc:\n        tls: { cert: /etc/cert.pem }\n",
        "receivers.otlp.protocols.grpc.tls.cert: unknown field `cert`",
    ),
    (
        "      grpc:\n",
        "      grpc:\n        tls: { cert_file: /c.pem, key_file: /k.pem, reload_interval: soon }\n",
        "receivers.otlp.protocols.grpc.tls.reload_interval: invalid duration \"soon\"",
    ),
    (
        "endpoint: 127.0.0.1:4318",
        "endpoint: 127.0.0.1:4318\n        auth: {}",
        "receivers.otlp.protocols.http.auth: name bearer_tokens, bearer_token_file or basic",
    ),
    (
        "endpoint: 127.0.0.1:4318",
        "endpoint: 127.0.0.1:4318\n        auth: { bearer_token_file: /nonexistent/tokens }",
        "receivers.otlp.protocols.http.auth.bearer_token_file: cannot read /nonexistent/tokens: ",
    ),
    (
        "endpoint: 127.0.0.1:4318",
        "endpoint: 127.0.0.1:4318\n        auth: { basic: { username: agent } }",
        "receivers.otlp.protocols.http.auth.basic.password: is required",
    ),
    (
        "endpoint: 127.0.0.1:4318",
        "endpoint: 127.0.0.1:4318\n        auth: { bearer_token: x }",
        "receivers.otlp.protocols.http.auth.bearer_token: unknown field `bearer_token`",
    ),
    (
        "  otlp:\n    protocols:",
        "  k8s_audit:\n    tls: { cert_file: /nonexistent/audit.pem, key_file: /nonexistent/audit-key.pem }\n  otlp:\n    protocols:",
        "receivers.k8s_audit.tls.cert_file: cannot read /nonexistent/audit.pem",
    ),
    (
        "  otlp:\n    protocols:",
        "  k8s_audit:\n    auth: { bearer_tokens: [\"\"] }\n  otlp:\n    protocols:",
        "receivers.k8s_audit.auth.bearer_tokens[0]: is empty",
    ),
    (
        "  batch:\n",
        "  batch:\n  memory_limiter:\n    check_interval: 1s\n",
        "processors.memory_limiter.limit_mib: set limit_mib or limit_percentage",
    ),
    (
        "  batch:\n",
        "  batch:\n  memory_limiter:\n    limit_mib: 100\n    limit_percentage: 50\n",
        "processors.memory_limiter.limit_percentage: set limit_mib or limit_percentage, not both",
    ),
    (
        "  batch:\n",
        "  batch:\n  memory_limiter:\n    limit_mib: 100\n    spike_limit_mib: 150\n",
        "processors.memory_limiter.spike_limit_mib: 150 is not below limit_mib 100",
    ),
    (
        "  otlp:\n    protocols:",
        "  otlp:\n    limits: { max_attributes: 0 }\n    protocols:",
        "receivers.otlp.limits.max_attributes: must be at least 1",
    ),
    (
        "  otlp:\n    protocols:",
        "  otlp:\n    limits: { max_attrs: 10 }\n    protocols:",
        "receivers.otlp.limits.max_attrs: unknown field `max_attrs`",
    ),
    (
        "service:\n",
        "extras: 1\nservice:\n  extensions: [health_check]\n",
        "extras: unknown key",
    ),
    // Durations past a year are refused where they are read: 3×10¹¹ years passed once
    // and panicked the task that added them to an instant.
    (
        "  batch:\n",
        "  batch:\n    timeout: 300000000000years\n",
        "processors.batch.timeout: duration \"300000000000years\" is longer than any setting takes (at most 1year)",
    ),
    (
        "tls: { insecure: true }",
        "tls: { insecure: true }\n    timeout: 300000000000years",
        "exporters.otlp/jaeger.timeout: duration \"300000000000years\" is longer than any setting takes",
    ),
    (
        "service:\n",
        "service:\n  shutdown_timeout: 300000000000years\n",
        "service.shutdown_timeout: duration \"300000000000years\" is longer than any setting takes",
    ),
    (
        "  debug:\n",
        "  debug:\n  alertmanager:\n    endpoint: http://alertmanager:9093\n    resend_interval: 300000000000years\n",
        "exporters.alertmanager.resend_interval: duration \"300000000000years\" is longer than any setting takes",
    ),
    // Settings that validated and then burned CPU or failed every write.
    (
        "  batch:\n",
        "  batch:\n  memory_limiter:\n    check_interval: 1ns\n    limit_mib: 100\n",
        "processors.memory_limiter.check_interval: must be between 50ms and 1year, not 1ns",
    ),
    (
        "  otlp:\n    protocols:",
        "  prometheus_scrape:\n    targets: [\"127.0.0.1:9090\"]\n    interval: 1ns\n  otlp:\n    protocols:",
        "receivers.prometheus_scrape.interval: must be between 100ms and 1year, not 1ns",
    ),
    (
        "tls: { insecure: true }",
        "tls: { insecure: true }\n    sending_queue: { num_consumers: 1000000 }",
        "exporters.otlp/jaeger.sending_queue.num_consumers: must be between 1 and 1024, not 1000000",
    ),
    (
        "tls: { insecure: true }",
        "tls: { insecure: true }\n    sending_queue: { storage: /proc/self }",
        "exporters.otlp/jaeger.sending_queue.storage: /proc/self is under /proc",
    ),
    (
        "  batch:\n",
        "  batch:\n  correlator:\n    storage: { directory: /proc/self }\n",
        "processors.correlator.storage.directory: /proc/self is under /proc",
    ),
    (
        "  otlp:\n    protocols:",
        "  filelog:\n    storage: /sys/fs\n  otlp:\n    protocols:",
        "receivers.filelog.storage: /sys/fs is under /sys",
    ),
    (
        "service:\n",
        "service:\n  extensions: [health_check]\n",
        "service.extensions[0]: extension \"health_check\" is not defined",
    ),
];

#[test]
fn bad_configs_name_the_path_of_the_problem() {
    for (from, to, expected) in BAD {
        assert!(
            BASE.contains(from),
            "fixture {from:?} not in the base config"
        );
        let yaml = BASE.replacen(from, to, 1);
        let errors = errors_of(&yaml);
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "config with {to:?}: expected an error starting with {expected:?}, got {errors:?}"
        );
    }
}

#[test]
fn a_memory_limiter_is_listed_first() {
    let with_limiter = BASE.replacen(
        "  batch:\n",
        "  batch:\n  memory_limiter: { limit_mib: 4096 }\n",
        1,
    );
    let listing =
        |processors: &str| errors_of(&with_limiter.replacen("processors: [batch]", processors, 1));
    assert_eq!(
        listing("processors: [memory_limiter, batch]"),
        Vec::<String>::new()
    );
    assert_eq!(
        listing("processors: [batch, memory_limiter]"),
        [
            "service.pipelines.traces.processors[1]: memory limiter \"memory_limiter\" must be listed first, where data enters the pipeline"
        ]
    );
}

#[test]
fn every_problem_is_reported_not_only_the_first() {
    let yaml = BASE
        .replace("endpoint: jaeger:4317", "endpoint: htp://x")
        .replace("receivers: [otlp]", "receivers: [nope]");
    assert_eq!(errors_of(&yaml).len(), 2, "{:?}", errors_of(&yaml));
}

#[test]
fn every_problem_of_one_component_is_reported() {
    let yaml = BASE.replace(
        "    endpoint: jaeger:4317\n    tls: { insecure: true }\n",
        "    endpoint: htp://x\n    tls: { insecure: true }\n    compresion: gzip\n    timeout: soon\n    sending_queue: { queue_sizee: 1 }\n",
    );
    let errors = errors_of(&yaml);
    let at = |path: &str| errors.iter().filter(|e| e.starts_with(path)).count();
    assert_eq!(
        at("exporters.otlp/jaeger.compresion: unknown field"),
        1,
        "{errors:?}"
    );
    assert_eq!(
        at("exporters.otlp/jaeger.timeout: invalid duration"),
        1,
        "{errors:?}"
    );
    assert_eq!(
        at("exporters.otlp/jaeger.sending_queue.queue_sizee: unknown field"),
        1,
        "{errors:?}"
    );
    assert_eq!(at("exporters.otlp/jaeger.endpoint:"), 1, "{errors:?}");
    assert_eq!(errors.len(), 4, "{errors:?}");
    // A required setting that is wrong is said once, not again as missing.
    let yaml = BASE.replace(
        "receivers: [otlp]",
        "receivers: [otlp]\n      procesors: []",
    );
    assert_eq!(errors_of(&yaml).len(), 1, "{:?}", errors_of(&yaml));
}

#[test]
fn yaml_syntax_errors_are_reported() {
    let errors = errors_of("receivers: [unclosed\n");
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with("(yaml):"), "{errors:?}");
}

#[test]
fn a_receiver_only_feeds_pipelines_of_what_it_produces() {
    let yaml = BASE
        .replace(
            "  otlp:\n    protocols:",
            "  k8s_audit: {}\n  otlp:\n    protocols:",
        )
        .replace("receivers: [otlp]", "receivers: [otlp, k8s_audit]");
    assert_eq!(
        errors_of(&yaml),
        ["service.pipelines.traces.receivers[1]: receiver \"k8s_audit\" produces no traces"]
    );
}

/// BASE with an `operator_metrics` connector between the traces pipeline and a
/// metrics pipeline exporting to Prometheus.
fn connected(traces_exporters: &str, metrics_receivers: &str) -> String {
    BASE.replace(
        "  debug:\nservice:",
        "  debug:\n  prometheus:\n    endpoint: 127.0.0.1:0\nconnectors:\n  operator_metrics:\nservice:",
    )
    .replace("exporters: [otlp/jaeger, debug]", traces_exporters)
        + &format!(
            "    metrics:\n      receivers: {metrics_receivers}\n      exporters: [prometheus]\n"
        )
}

#[test]
fn a_connector_is_an_exporter_of_traces_and_a_receiver_of_metrics() {
    let yaml = connected("exporters: [debug, operator_metrics]", "[operator_metrics]");
    let config = Config::from_yaml(&yaml, &no_env).expect("valid");
    assert!(matches!(
        config.connectors.get("operator_metrics"),
        Some(ConnectorConfig::OperatorMetrics(_))
    ));
    assert!(config.deprecations.is_empty());

    let unfed = connected("exporters: [debug]", "[operator_metrics]");
    assert_eq!(
        errors_of(&unfed),
        [
            "connectors.operator_metrics: no pipeline lists it as an exporter (list it in the \
          exporters of a traces or logs pipeline)"
        ]
    );
    let backwards = connected("exporters: [debug, operator_metrics]", "[otlp]").replace(
        "exporters: [prometheus]",
        "exporters: [prometheus, operator_metrics]",
    );
    assert_eq!(
        errors_of(&backwards),
        [
            "service.pipelines.metrics.exporters[1]: connector \"operator_metrics\" cannot carry metrics",
            "connectors.operator_metrics: no pipeline lists it as a receiver (list it in the \
             receivers of a metrics pipeline)",
        ]
    );
}

#[test]
fn a_prometheus_exporter_of_traces_is_still_read_with_a_deprecation() {
    let yaml = connected("exporters: [debug, prometheus]", "[otlp]")
        .replace("connectors:\n  operator_metrics:\n", "");
    let config = Config::from_yaml(&yaml, &no_env).expect("the old form is still valid");
    assert_eq!(
        config.service.pipelines["traces"].exporters,
        ["debug", "operator_metrics/prometheus"]
    );
    let derived = &config.service.pipelines["metrics/operator_metrics/prometheus"];
    assert_eq!(derived.receivers, ["operator_metrics/prometheus"]);
    assert_eq!(derived.exporters, ["prometheus"]);
    let [deprecation] = config.deprecations.as_slice() else {
        panic!("one deprecation: {:?}", config.deprecations);
    };
    assert!(
        deprecation.contains("exporter \"prometheus\" is listed in the traces pipeline(s)")
            && deprecation.contains("connectors: { operator_metrics: {} }"),
        "{deprecation}"
    );
}

/// A gateway's pipelines end in the correlator: its agents sent the records to the
/// backends already. Any other pipeline without exporters would drop what it takes.
#[test]
fn only_a_pipeline_that_correlates_may_have_no_exporters() {
    let gateway = r#"
receivers:
  otlp:
    protocols: { grpc: { endpoint: 127.0.0.1:4317 } }
processors:
  correlator: {}
  batch: {}
exporters:
  debug: {}
service:
  pipelines:
    traces: { receivers: [otlp], processors: [correlator] }
    logs: { receivers: [otlp], processors: [batch] }
    signals: { exporters: [debug] }
"#;
    assert_eq!(
        errors_of(gateway),
        [
            "service.pipelines.logs.exporters: at least one is required, unless the pipeline ends in a correlator"
        ]
    );
}

#[test]
fn a_hand_over_follows_a_loadbalancing_exporter_and_needs_a_journal() {
    let config = |correlator: &str| {
        format!(
            r#"
receivers:
  otlp:
    protocols: {{ grpc: {{ endpoint: 127.0.0.1:4317 }} }}
    accept_handover: true
processors:
  correlator: {correlator}
exporters:
  debug: {{}}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [correlator] }}
    signals: {{ exporters: [debug] }}
"#
        )
    };
    assert_eq!(
        errors_of(&config(
            "{ storage: { directory: /tmp/j }, handover: { exporter: debug, endpoint: \"10.0.0.5:4317\" } }"
        )),
        [
            "processors.correlator.handover.exporter: \"debug\" is not a loadbalancing exporter of this config"
        ]
    );
    assert_eq!(
        errors_of(&config(
            "{ handover: { exporter: debug, endpoint: \"10.0.0.5:4317\" } }"
        )),
        ["processors.correlator.handover: needs storage: what is handed over is the journal"]
    );
    let refusing = config("{ storage: { directory: /tmp/j }, handover: { exporter: debug, endpoint: \"10.0.0.5:4317\" } }")
        .replace("    accept_handover: true\n", "");
    assert!(
        errors_of(&refusing).contains(
            &"processors.correlator.handover: needs an otlp receiver with accept_handover: true, where the other gateways' hand-overs arrive".to_string()
        ),
        "{:?}",
        errors_of(&refusing)
    );
}
