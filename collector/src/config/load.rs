//! Reading a config document into the model: the YAML parsed, `${env:...}`
//! expanded, each section read into typed components, old forms rewritten, and the
//! whole checked, every problem reported at its path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use opscope_model::config::FieldError;
use serde_json::Value;

use super::settings::{self, check_id, component_type};
use super::{
    Config, ConfigErrors, ConnectorConfig, ExporterConfig, ExtensionConfig, ProcessorConfig,
    ReceiverConfig, ServiceConfig, env,
};

/// The configuration used when no `-c` is given.
pub const DEFAULT_CONFIG: &str = include_str!("../../../config/default.yaml");

impl Config {
    /// Reads the config file at `path`; `${env:NAME}` reads the process's environment.
    pub fn from_file(path: &Path) -> Result<Self, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            ConfigErrors(vec![FieldError::new(
                path.display().to_string(),
                format!("cannot read: {err}"),
            )])
        })?;
        Self::from_yaml(&text, &|name| std::env::var(name).ok())
    }

    /// Reads the embedded default config ([`DEFAULT_CONFIG`]).
    pub fn embedded_default() -> Result<Self, ConfigErrors> {
        Self::from_yaml(DEFAULT_CONFIG, &|name| std::env::var(name).ok())
    }

    /// Reads a config document; `lookup` resolves `${env:NAME}`.
    pub fn from_yaml(
        text: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigErrors> {
        let mut errors = Vec::new();
        let mut invalid = BTreeSet::new();
        let mut document: Value = serde_saphyr::from_str(text)
            .map_err(|err| ConfigErrors(vec![FieldError::new("(yaml)", err.to_string())]))?;
        env::expand(&mut document, "", lookup, &mut errors);
        let Value::Object(mut sections) = document else {
            return Err(ConfigErrors(vec![FieldError::new(
                "(root)",
                "the config must be a mapping",
            )]));
        };
        let mut section = |name: &str| sections.remove(name).unwrap_or(Value::Null);
        let receivers = read_section(
            section("receivers"),
            "receivers",
            &mut invalid,
            ReceiverConfig::parse,
            &mut errors,
        );
        let processors = read_section(
            section("processors"),
            "processors",
            &mut invalid,
            ProcessorConfig::parse,
            &mut errors,
        );
        let exporters = read_section(
            section("exporters"),
            "exporters",
            &mut invalid,
            ExporterConfig::parse,
            &mut errors,
        );
        let connectors = read_section(
            section("connectors"),
            "connectors",
            &mut invalid,
            ConnectorConfig::parse,
            &mut errors,
        );
        let extensions = read_section(
            section("extensions"),
            "extensions",
            &mut invalid,
            ExtensionConfig::parse,
            &mut errors,
        );
        let service = section("service");
        for unknown in sections.keys() {
            errors.push(FieldError::new(
                unknown,
                "unknown key (expected receivers, processors, exporters, connectors, extensions, service)",
            ));
        }
        let service: Option<ServiceConfig> = if service.is_null() {
            errors.push(FieldError::new("service", "is required"));
            None
        } else {
            settings::read(service, "service", |_: &ServiceConfig| Ok(()))
                .map_err(|problems| errors.extend(problems))
                .ok()
        };
        let Some(service) = service else {
            return Err(ConfigErrors(errors));
        };
        let mut config = Config {
            receivers,
            processors,
            exporters,
            connectors,
            extensions,
            service,
            deprecations: Vec::new(),
        };
        config.connect_prometheus_exporters_of_traces_and_logs();
        config.check_service(&invalid, &mut errors);
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(errors))
        }
    }
}

/// Reads one section (`receivers`, ...) into typed components keyed by id.
fn read_section<C>(
    section: Value,
    name: &str,
    invalid: &mut BTreeSet<String>,
    parse: fn(&str, Value, &str) -> Result<C, Vec<FieldError>>,
    errors: &mut Vec<FieldError>,
) -> BTreeMap<String, C> {
    let mut components = BTreeMap::new();
    let entries = match section {
        Value::Null => return components,
        Value::Object(entries) => entries,
        _ => {
            errors.push(FieldError::new(
                name,
                "must be a mapping of component ids to settings",
            ));
            return components;
        }
    };
    for (id, value) in entries {
        let path = format!("{name}.{id}");
        if let Err(message) = check_id(&id) {
            errors.push(FieldError::new(path, message));
            continue;
        }
        match parse(component_type(&id), value, &path) {
            Ok(component) => {
                components.insert(id, component);
            }
            Err(problems) => {
                errors.extend(problems);
                invalid.insert(path);
            }
        }
    }
    components
}
