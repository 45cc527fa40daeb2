//! The `prometheus` (scrape endpoint) and `prometheusremotewrite` exporters: one
//! series model fed by metrics and signals, with two outputs.
//!
//! * Metrics are converted from OTLP (the operator metrics among them, from the
//!   `operator_metrics` connector); signals give `opscope_signal_active` and
//!   `opscope_signals_total`.
//! * The pull endpoint serves the store as text 0.0.4 or OpenMetrics; remote write
//!   pushes the series each batch touched. Both hold their own store, so an agent
//!   can use either or both.
//!
//! Each exporter is made once per configured entry and shared (`Arc`) by the
//! pipelines that list it.

mod config;
mod model;
mod names;
mod openmetrics;
mod otlp;
mod pull;
mod remote_write;
mod server;
mod signals;
mod state;
mod store;
mod text;
mod write_request;

#[cfg(test)]
mod test_support;

pub use config::{PrometheusConfig, RemoteWriteConfig};
pub use pull::{PrometheusExporter, SeriesStats};
pub use remote_write::RemoteWriteExporter;
pub use server::Format;
pub use store::Refusals;
