//! What one line of input is: a CRI or docker json-file container log line, an
//! OTLP/JSON export request, or an operator log line in any format the tagger knows
//! (Kubernetes audit events among them, which the tagger recognises by their shape).

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;

use crate::receivers::filelog::cri::parse_container_line;

/// What one line of input is.
pub enum Line {
    /// A container log line: the stream's content, whether more pieces follow (`P`),
    /// and the runtime's timestamp.
    Container {
        content: String,
        partial: bool,
        time_unix_nano: u64,
    },
    Traces(ExportTraceServiceRequest),
    Logs(ExportLogsServiceRequest),
    Metrics(ExportMetricsServiceRequest),
    /// A line as the operator wrote it (including audit events, which the tagger
    /// recognises by their shape).
    Text(String),
}

/// Sorts one line; `Err` says why a line that looked like OTLP/JSON did not parse.
pub fn classify(line: &str) -> Result<Line, String> {
    if let Some(container) = parse_container_line(line) {
        return Ok(Line::Container {
            content: container.content.into_owned(),
            partial: container.partial,
            time_unix_nano: container.time_unix_nano,
        });
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('{')
        && let Some(otlp) = otlp_line(trimmed)
    {
        return otlp;
    }
    Ok(Line::Text(line.to_string()))
}

/// One export request per line, as the OpenTelemetry Collector's file exporter writes.
fn otlp_line(line: &str) -> Option<Result<Line, String>> {
    let head = line.get(..64).unwrap_or(line);
    let parse = |what: &str| format!("invalid OTLP/JSON {what} request");
    if head.contains("\"resourceSpans\"") {
        return Some(
            serde_json::from_str(line)
                .map(Line::Traces)
                .map_err(|e| format!("{}: {e}", parse("traces"))),
        );
    }
    if head.contains("\"resourceLogs\"") {
        return Some(
            serde_json::from_str(line)
                .map(Line::Logs)
                .map_err(|e| format!("{}: {e}", parse("logs"))),
        );
    }
    if head.contains("\"resourceMetrics\"") {
        return Some(
            serde_json::from_str(line)
                .map(Line::Metrics)
                .map_err(|e| format!("{}: {e}", parse("metrics"))),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_lines_from_containerd_and_cri_o() {
        let Ok(Line::Container {
            content,
            partial,
            time_unix_nano,
        }) = classify("2024-05-01T12:00:00.123456789Z stdout F {\"level\":\"info\"}")
        else {
            panic!("a CRI line");
        };
        assert_eq!(content, "{\"level\":\"info\"}");
        assert!(!partial);
        assert_eq!(time_unix_nano, 1_714_564_800_123_456_789);
        let Ok(Line::Container {
            partial,
            time_unix_nano,
            ..
        }) = classify("2024-05-01T14:00:00.1+02:00 stderr P first half")
        else {
            panic!("a CRI-O line with an offset");
        };
        assert!(partial);
        assert_eq!(time_unix_nano, 1_714_564_800_100_000_000);
    }

    #[test]
    fn docker_otlp_and_text_lines() {
        let docker = r#"{"log":"I0501 12:00:00.000000 1 main.go:1] hi\n","stream":"stderr","time":"2024-05-01T12:00:00.5Z"}"#;
        assert!(matches!(
            classify(docker),
            Ok(Line::Container { partial: false, .. })
        ));
        assert!(matches!(
            classify(r#"{"resourceSpans":[]}"#),
            Ok(Line::Traces(_))
        ));
        assert!(classify(r#"{"resourceLogs":[{"scopeLogs":5}]}"#).is_err());
        assert!(matches!(classify("plain words"), Ok(Line::Text(_))));
        assert!(matches!(
            classify(r#"{"level":"info","msg":"x"}"#),
            Ok(Line::Text(_))
        ));
    }
}
