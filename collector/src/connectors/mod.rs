//! Connectors: components that are an exporter of some pipelines and a receiver of
//! others. A connector is built once the pipelines it feeds are, from their inputs
//! (see `exporters::build_connector`), and then started as an exporter of the
//! pipelines that list it.

pub mod operator_metrics;
