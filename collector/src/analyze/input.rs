//! Reading captured files for `opscope analyze`: directories walked, `.gz` inflated,
//! and each line sorted into what it is — a CRI or docker json-file container log
//! line, a Kubernetes audit event, an OTLP/JSON export request, or an operator log
//! line in any format the tagger knows.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;

use crate::receivers::filelog::cri::parse_container_line;

/// Longest line read; longer lines are cut there (and counted as malformed).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {source}")]
    ReadFailed {
        path: String,
        line: usize,
        source: std::io::Error,
    },
}

/// Every file under the given paths, in a stable order.
pub fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    let mut files = Vec::new();
    for path in paths {
        walk(path, &mut files)?;
    }
    Ok(files)
}

fn walk(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), InputError> {
    let unreadable = |source| InputError::Unreadable {
        path: path.display().to_string(),
        source,
    };
    let metadata = std::fs::metadata(path).map_err(unreadable)?;
    if metadata.is_file() {
        files.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(unreadable)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        walk(&entry, files)?;
    }
    Ok(())
}

/// Largest `.json` file read as one document (an audit `EventList` as the webhook
/// posts it, pretty-printed); larger ones are read line by line.
pub const MAX_DOCUMENT_BYTES: u64 = 64 * 1024 * 1024;

fn open(path: &Path) -> Result<Box<dyn Read>, InputError> {
    let file = File::open(path).map_err(|source| InputError::Unreadable {
        path: path.display().to_string(),
        source,
    })?;
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    })
}

/// A `.json` file holding one JSON document, as one compact line.
fn json_document(path: &Path) -> Result<Option<String>, InputError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    if !name.trim_end_matches(".gz").ends_with(".json") {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    open(path)?
        .take(MAX_DOCUMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::ReadFailed {
            path: path.display().to_string(),
            line: 1,
            source,
        })?;
    Ok(serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(serde_json::Value::is_object)
        .map(|document| document.to_string()))
}

/// Lines of a file, inflated when it ends in `.gz`, each cut at [`MAX_LINE_BYTES`];
/// a `.json` file that is one document is one line.
pub fn read_lines(path: &Path, mut each: impl FnMut(usize, &str, bool)) -> Result<(), InputError> {
    if let Some(document) = json_document(path)? {
        each(1, &document, false);
        return Ok(());
    }
    let name = path.display().to_string();
    let mut reader = BufReader::new(open(path)?);
    let mut buffer = Vec::new();
    let mut number = 0;
    loop {
        buffer.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buffer)
            .map_err(|source| InputError::ReadFailed {
                path: name.clone(),
                line: number + 1,
                source,
            })?;
        if read == 0 {
            return Ok(());
        }
        let cut = buffer.last() != Some(&b'\n') && buffer.len() > MAX_LINE_BYTES;
        if cut {
            skip_rest_of_line(&mut reader).map_err(|source| InputError::ReadFailed {
                path: name.clone(),
                line: number + 1,
                source,
            })?;
            buffer.truncate(MAX_LINE_BYTES);
        }
        number += 1;
        let text = String::from_utf8_lossy(&buffer);
        each(number, text.trim_end_matches(['\n', '\r']), cut);
    }
}

fn skip_rest_of_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(());
        }
        match available.iter().position(|b| *b == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(());
            }
            None => {
                let len = available.len();
                reader.consume(len);
            }
        }
    }
}

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
