//! Connectors: components that are an exporter of some pipelines and a receiver of
//! others. A connector is built once the pipelines it feeds are, from their inputs,
//! and then started as an exporter of the pipelines that list it.

pub mod operator_metrics;

use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;

use crate::config::ConnectorConfig;
use crate::consumer::Consumer;
use crate::exporters::Built;

/// Builds the connector `id` of `config`, handing what it makes to `metrics`: the
/// inputs of the metrics pipelines that list it as a receiver.
pub fn build(
    id: &str,
    config: &ConnectorConfig,
    metrics: Consumer<ExportMetricsServiceRequest>,
) -> Built {
    match config {
        ConnectorConfig::OperatorMetrics(_) => Built::OperatorMetrics(std::sync::Arc::new(
            operator_metrics::OperatorMetricsConnector::new(id, metrics),
        )),
    }
}
