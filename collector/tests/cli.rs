//! The command line: `validate` on good and bad configs, `run` refusing settings past
//! their bounds, `--version`.

mod common;

use std::process::{Command, Output};

use common::{Opscope, Ports};

fn opscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(args)
        .output()
        .expect("run the opscope binary")
}

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), text).expect("write config");
    file
}

#[test]
fn validate_accepts_the_shipped_default_with_a_one_line_summary() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/default.yaml");
    let output = opscope(&["validate", "-c", path]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.contains(
            "valid; 1 receiver(s), 3 processor(s), 2 exporter(s), 1 connector(s), 5 pipeline(s)"
        ),
        "{stdout}"
    );
}

#[test]
fn validate_lists_every_error_with_its_path_and_exits_1() {
    let file = config_file(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
exporters:
  otlp/jaeger:
    endpoint: "htp://x"
  debug:
    verbosity: loud
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp/jaeger, zipkin]
"#,
    );
    let output = opscope(&["validate", "-c", &file.path().display().to_string()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "exporters.otlp/jaeger.endpoint: invalid URL \"htp://x\"",
        "exporters.debug.verbosity: unknown variant `loud`",
        "service.pipelines.traces.exporters[1]: \"zipkin\" is not defined under exporters",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}

#[test]
fn validate_reports_an_unreadable_file() {
    let output = opscope(&["validate", "-c", "/nonexistent/opscope.yaml"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("/nonexistent/opscope.yaml: cannot read")
    );
}

#[test]
fn version_is_printed() {
    let output = opscope(&["--version"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("opscope "));
}

#[test]
fn the_example_configs_of_the_readme_and_the_configuration_reference_are_valid() {
    for (name, text) in [
        ("README.md", include_str!("../../README.md")),
        (
            "docs/configuration.md",
            include_str!("../../docs/configuration.md"),
        ),
    ] {
        let start = text
            .find("```yaml\nreceivers:")
            .unwrap_or_else(|| panic!("{name} has a config example"))
            + "```yaml\n".len();
        let length = text[start..].find("```").expect("the example ends");
        let file = config_file(&text[start..start + length]);
        let output = Command::new(env!("CARGO_BIN_EXE_opscope"))
            .args(["validate", "-c", &file.path().display().to_string()])
            .env("LOKI_TOKEN", "token")
            .output()
            .expect("run opscope validate");
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn a_bad_worker_thread_count_is_an_error_that_names_it() {
    for value in ["abc", "0"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_opscope"))
            .env("TOKIO_WORKER_THREADS", value)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run the opscope binary");
        // A value taken would start the agent: it is stopped rather than waited for.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll opscope") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("opscope started with TOKIO_WORKER_THREADS={value}");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let output = child.wait_with_output().expect("opscope's stderr");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("TOKIO_WORKER_THREADS") && stderr.contains("at least 1"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Durations of 3×10¹¹ years validated once: the agent started, the first task to add
/// one to an instant panicked, and the agent kept answering 200 for data it no longer
/// carried. Now `run` refuses them at start, naming the setting.
#[test]
fn run_refuses_a_duration_past_a_year_naming_the_setting() {
    const HUGE: &str = "300000000000years";
    let base = Ports::ANY.config("debug", "{}");
    let alertmanager = Ports::ANY
        .config("debug", "{}")
        .replace(
            "exporters:\n",
            &format!(
                "exporters:\n  alertmanager: {{ endpoint: http://127.0.0.1:9, resend_interval: {HUGE} }}\n"
            ),
        )
        .replace(
            "  pipelines:\n",
            "  pipelines:\n    signals: { exporters: [alertmanager] }\n",
        );
    let cases = [
        (
            "processors.batch.timeout",
            base.replace("timeout: 50ms", &format!("timeout: {HUGE}")),
        ),
        (
            "exporters.otlp/next.timeout",
            Ports::ANY.config(
                "otlp/next",
                &format!("{{ endpoint: 127.0.0.1:9, tls: {{ insecure: true }}, timeout: {HUGE} }}"),
            ),
        ),
        (
            "service.shutdown_timeout",
            base.replace(
                "shutdown_timeout: 10s",
                &format!("shutdown_timeout: {HUGE}"),
            ),
        ),
        ("exporters.alertmanager.resend_interval", alertmanager),
    ];
    for (setting, config) in cases {
        assert!(config.contains(HUGE), "{setting}: the fixture sets it");
        let error = match Opscope::try_start(&config) {
            Ok(_) => panic!("{setting}: {HUGE} was taken and the agent started"),
            Err(error) => error,
        };
        let expected = format!(
            "{setting}: duration \"{HUGE}\" is longer than any setting takes (at most 1year)"
        );
        assert!(error.contains("exit status: 1"), "{setting}: {error}");
        assert!(error.contains(&expected), "{setting}: {error}");
    }
}
