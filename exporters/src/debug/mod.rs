//! The `debug` exporter: what passes through, on stdout. `basic` prints one summary
//! line per batch; `detailed` prints each batch as one line of OTLP/JSON. What comes
//! from the data is escaped, so that no value can start a line of its own.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write;

use opscope_model::Telemetry;
use opscope_model::signal::Signal;
use serde::Deserialize;

use crate::batch::SignalBatch;
use crate::exporter::{Delivery, ExportError, Exporter};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verbosity {
    #[default]
    Basic,
    Detailed,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DebugConfig {
    pub verbosity: Verbosity,
}

pub struct DebugExporter {
    name: String,
    verbosity: Verbosity,
}

impl DebugExporter {
    pub fn new(name: &str, config: &DebugConfig) -> Self {
        Self {
            name: name.to_string(),
            verbosity: config.verbosity,
        }
    }

    fn render<T: Telemetry>(&self, batch: &T) -> String {
        match self.verbosity {
            Verbosity::Basic => format!(
                "{} {}: {} resource(s), {} {}",
                self.name,
                T::KIND.name(),
                batch.resource_data().len(),
                batch.item_count(),
                T::KIND.item_name()
            ),
            Verbosity::Detailed => serde_json::to_string(batch).unwrap_or_else(|e| {
                format!("{} {}: not printable: {e}", self.name, T::KIND.name())
            }),
        }
    }
}

impl DebugExporter {
    fn render_signal(&self, signal: &Signal) -> String {
        match self.verbosity {
            Verbosity::Basic => format!(
                "{} signal: {}\n    hint: {}",
                self.name,
                escaped(&signal.summary()),
                escaped(&signal.hint)
            ),
            Verbosity::Detailed => signal.to_json().to_string(),
        }
    }
}

/// Signal changes: a line for people with the hint (`basic`), or the signal as
/// JSON (`detailed`).
impl Exporter<SignalBatch> for DebugExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        let mut stdout = std::io::stdout().lock();
        for signal in &batch.0 {
            let line = self.render_signal(signal);
            writeln!(stdout, "{line}")
                .map_err(|e| ExportError::retryable(format!("writing to stdout: {e}")))?;
        }
        Ok(Delivery::default())
    }
}

impl<T: Telemetry> Exporter<T> for DebugExporter {
    async fn export(&self, batch: &T) -> Result<Delivery, ExportError> {
        let line = self.render(batch);
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{line}")
            .map_err(|e| ExportError::retryable(format!("writing to stdout: {e}")))?;
        Ok(Delivery::default())
    }
}

/// `text` with control characters (newlines, carriage returns, terminal escapes)
/// and Unicode line separators written as escapes (`\n`, `\u{1b}`), and `\` as `\\`
/// so that an escape in the data cannot pass for one of these.
fn escaped(text: &str) -> Cow<'_, str> {
    let needs_escape = |c: char| c.is_control() || matches!(c, '\\' | '\u{2028}' | '\u{2029}');
    if !text.contains(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if needs_escape(c) => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
    use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};

    fn logs() -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord::default(); 2],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn basic_summarises_and_detailed_is_otlp_json() {
        let basic = DebugExporter::new("debug", &DebugConfig::default());
        assert_eq!(
            basic.render(&logs()),
            "debug logs: 1 resource(s), 2 log_records"
        );
        let detailed = DebugExporter::new(
            "debug",
            &DebugConfig {
                verbosity: Verbosity::Detailed,
            },
        );
        let json: serde_json::Value =
            serde_json::from_str(&detailed.render(&logs())).expect("json");
        assert_eq!(
            json["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }
}

#[cfg(test)]
mod escaping {
    use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
    use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
    use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};

    use super::*;
    use opscope_testkit::signals::loop_signal;

    const FORGED: &str = "train\ndebug signal: RESOLVED all is well\r\u{1b}[2K\u{2028}";

    fn exporter(verbosity: Verbosity) -> DebugExporter {
        DebugExporter::new("debug", &DebugConfig { verbosity })
    }

    #[test]
    fn a_signal_line_escapes_what_the_data_holds() {
        let mut signal = loop_signal();
        signal.object.name = FORGED.into();
        signal.hint = "tab\there, back\\slash".into();
        let text = exporter(Verbosity::Basic).render_signal(&signal);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.len(),
            2,
            "the summary line and the hint line: {text:?}"
        );
        assert!(
            lines[0].contains(r"train\ndebug signal: RESOLVED all is well\r\u{1b}[2K\u{2028}"),
            "{text:?}"
        );
        assert_eq!(lines[1], r"    hint: tab\there, back\\slash");
        assert!(!text.contains('\u{1b}') && !text.contains('\r'));
    }

    #[test]
    fn detailed_output_is_one_json_line_whatever_the_values() {
        let mut signal = loop_signal();
        signal.object.name = FORGED.into();
        let text = exporter(Verbosity::Detailed).render_signal(&signal);
        assert_eq!(text.lines().count(), 1, "{text:?}");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(json.to_string().contains("RESOLVED all is well"));

        let value = |text: &str| {
            Some(AnyValue {
                value: Some(Value::StringValue(text.into())),
            })
        };
        let logs = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord {
                        body: value(FORGED),
                        attributes: vec![KeyValue {
                            key: "k8s.pod.name\nforged".into(),
                            value: value(FORGED),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let text = exporter(Verbosity::Detailed).render(&logs);
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
    }
}
