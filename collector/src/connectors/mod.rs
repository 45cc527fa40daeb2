//! Connectors: components that are an exporter of some pipelines and a receiver of
//! others. A connector is built once the pipelines it feeds are, from their inputs
//! (by the `build` its row of the connector table names, in its file here), and then
//! started as an exporter of the pipelines that list it.

pub mod operator_metrics;

use crate::config::ConnectorConfig;
use crate::config::components::connector_table;
use crate::receivers::Consumers;
use crate::sending::BuiltExporter;

/// Reads the connector table (`config/components.rs`) for the building: each row's
/// `build` names a function of a connector's file.
macro_rules! connector_builds {
    ($($type_name:literal => $variant:ident($config:ty) {
        takes: [$($taken:ident),+],
        feeds: [$($fed:ident),+],
        build: $build:path $(,)?
    })+) => {
        /// Builds the connector `id` of `config`, handing what it makes to `fed`: the
        /// inputs of the pipelines that list it as a receiver, by signal type.
        pub fn build(id: &str, config: &ConnectorConfig, fed: Consumers) -> BuiltExporter {
            match config {
                $(ConnectorConfig::$variant(config) => $build(id, config, fed),)+
            }
        }
    };
}

connector_table!(connector_builds);
