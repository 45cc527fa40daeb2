//! The `debug` exporter: what passes through, on stdout. `basic` prints one summary
//! line per batch; `detailed` prints each batch as one line of OTLP/JSON.

use std::io::Write;

use opscope_processors::Telemetry;
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

/// Signal changes: a line for people with the hint (`basic`), or the signal as
/// JSON (`detailed`).
impl Exporter<SignalBatch> for DebugExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        let mut stdout = std::io::stdout().lock();
        for signal in &batch.0 {
            let line = match self.verbosity {
                Verbosity::Basic => {
                    format!(
                        "{} signal: {}\n    hint: {}",
                        self.name,
                        signal.summary(),
                        signal.hint
                    )
                }
                Verbosity::Detailed => signal.to_json().to_string(),
            };
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
