//! Settings still read in an old form: each is rewritten into the form that replaces
//! it, with a deprecation naming that form.

use std::collections::BTreeMap;

use opscope_model::TelemetryKind;

use super::settings::component_type;
use super::{Config, ConnectorConfig, ExporterConfig, PipelineConfig};

impl Config {
    /// Until this release a `prometheus` or `prometheusremotewrite` exporter listed
    /// in a traces or logs pipeline derived the operator metrics itself. That config
    /// keeps working: each such exporter gets an `operator_metrics` connector of its
    /// own in those pipelines, feeding a metrics pipeline that exports to it, and a
    /// deprecation naming the new form.
    pub(super) fn connect_prometheus_exporters_of_traces_and_logs(&mut self) {
        let mut rewired: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (pipeline_id, pipeline) in &mut self.service.pipelines {
            let kind = TelemetryKind::parse(component_type(pipeline_id));
            if !matches!(kind, Some(TelemetryKind::Traces | TelemetryKind::Logs)) {
                continue;
            }
            for exporter in &mut pipeline.exporters {
                if !matches!(
                    self.exporters.get(exporter.as_str()),
                    Some(ExporterConfig::Prometheus(_) | ExporterConfig::RemoteWrite(_))
                ) {
                    continue;
                }
                let connector = format!("operator_metrics/{exporter}");
                rewired
                    .entry(exporter.clone())
                    .or_default()
                    .push(pipeline_id.clone());
                *exporter = connector;
            }
        }
        for (exporter, pipelines) in rewired {
            let connector = format!("operator_metrics/{exporter}");
            self.connectors.insert(
                connector.clone(),
                ConnectorConfig::OperatorMetrics(Default::default()),
            );
            self.service.pipelines.insert(
                format!("metrics/{connector}"),
                PipelineConfig {
                    receivers: vec![connector.clone()],
                    processors: Vec::new(),
                    exporters: vec![exporter.clone()],
                },
            );
            self.deprecations.push(format!(
                "exporter \"{exporter}\" is listed in the {} pipeline(s): a Prometheus exporter takes \
                 only metrics and signals now. Derive the operator metrics with the operator_metrics \
                 connector instead: `connectors: {{ operator_metrics: {{}} }}`, list \
                 operator_metrics in the exporters of those pipelines and add a metrics pipeline \
                 `{{ receivers: [operator_metrics], exporters: [{exporter}] }}`. This form is \
                 still read, for this release only.",
                pipelines.join(", ")
            ));
        }
    }
}
