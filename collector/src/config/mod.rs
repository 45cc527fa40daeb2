//! The agent's configuration: OpenTelemetry-Collector-shaped YAML, read into typed
//! component settings, with `${env:...}` expansion and errors that name the path of
//! every problem found.

mod component_types;
pub mod components;
pub mod env;
#[cfg(test)]
mod fuzz_tests;
mod settings;

use opscope_net::server_tls::ServerTlsConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use opscope_model::TelemetryKind;
use opscope_model::config::{FieldError, Validate, check_listen_address, duration};
use serde::Deserialize;
use serde_json::Value;

pub use crate::sending::Carried;
pub use components::{
    ConnectorConfig, ExporterConfig, ExtensionConfig, ProcessorConfig, ReceiverConfig,
};

/// The type of the pipelines that carry the correlator's signals to exporters.
pub const SIGNALS: &str = "signals";

/// The configuration used when no `-c` is given.
pub const DEFAULT_CONFIG: &str = include_str!("../../../config/default.yaml");

/// Every problem of a config, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<FieldError>);

#[derive(Debug, Clone)]
pub struct Config {
    pub receivers: BTreeMap<String, ReceiverConfig>,
    pub processors: BTreeMap<String, ProcessorConfig>,
    pub exporters: BTreeMap<String, ExporterConfig>,
    pub connectors: BTreeMap<String, ConnectorConfig>,
    pub extensions: BTreeMap<String, ExtensionConfig>,
    pub service: ServiceConfig,
    /// Settings still honoured in an old form, each with the form that replaces it.
    pub deprecations: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    #[serde(default)]
    pub extensions: Vec<String>,
    #[serde(default)]
    pub pipelines: BTreeMap<String, PipelineConfig>,
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// How long a shutdown may take to deliver what is queued.
    #[serde(default = "default_shutdown_timeout", deserialize_with = "duration")]
    pub shutdown_timeout: Duration,
}

fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(10)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    #[serde(default)]
    pub receivers: Vec<String>,
    #[serde(default)]
    pub processors: Vec<String>,
    /// None only for a pipeline whose data ends in its correlator (a gateway's).
    #[serde(default)]
    pub exporters: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    pub metrics: MetricsTelemetryConfig,
    pub logs: LogsTelemetryConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsTelemetryConfig {
    /// Where opscope serves its own metrics (`/metrics`).
    pub address: String,
    /// Serve them over TLS.
    pub tls: Option<ServerTlsConfig>,
}

impl Default for MetricsTelemetryConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8888".into(),
            tls: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogsTelemetryConfig {
    /// `error`, `warn`, `info`, `debug` or `trace`; `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for LogsTelemetryConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
        }
    }
}

/// A pipeline of the service, with its signal type resolved.
pub struct Pipeline<'a> {
    pub id: &'a str,
    pub kind: TelemetryKind,
    pub config: &'a PipelineConfig,
}

impl Config {
    pub fn from_file(path: &Path) -> Result<Self, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            ConfigErrors(vec![FieldError::new(
                path.display().to_string(),
                format!("cannot read: {err}"),
            )])
        })?;
        Self::from_yaml(&text, &|name| std::env::var(name).ok())
    }

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

    /// The service's pipelines with their signal types (after validation).
    /// The exporters of the `signals` pipelines, which carry the correlator's signals.
    pub fn signal_exporters(&self) -> impl Iterator<Item = (&str, &str)> {
        self.service
            .pipelines
            .iter()
            .filter(|(id, _)| settings::component_type(id) == SIGNALS)
            .flat_map(move |(id, pipeline)| {
                pipeline
                    .exporters
                    .iter()
                    .map(move |e| (id.as_str(), e.as_str()))
            })
    }

    pub fn pipelines(&self) -> impl Iterator<Item = Pipeline<'_>> {
        self.service.pipelines.iter().filter_map(|(id, config)| {
            let kind = TelemetryKind::parse(settings::component_type(id))?;
            Some(Pipeline { id, kind, config })
        })
    }

    /// A one-line description for `opscope validate`.
    pub fn summary(&self) -> String {
        format!(
            "{} receiver(s), {} processor(s), {} exporter(s), {} connector(s), {} pipeline(s): {}",
            self.receivers.len(),
            self.processors.len(),
            self.exporters.len(),
            self.connectors.len(),
            self.service.pipelines.len(),
            self.service
                .pipelines
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    }

    /// A correlator's hand-over follows the ring of a `loadbalancing` exporter.
    fn check_handovers(&self, errors: &mut Vec<FieldError>) {
        for (id, processor) in &self.processors {
            let ProcessorConfig::Correlator(settings) = processor else {
                continue;
            };
            let Some(handover) = &settings.handover else {
                continue;
            };
            if !matches!(
                self.exporters.get(&handover.exporter),
                Some(ExporterConfig::LoadBalancing(_))
            ) {
                errors.push(FieldError::new(
                    format!("processors.{id}.handover.exporter"),
                    format!(
                        "\"{}\" is not a loadbalancing exporter of this config",
                        handover.exporter
                    ),
                ));
            }
        }
    }

    /// A pipeline without exporters is only for data that ends in a correlator, as
    /// on a gateway whose agents sent the records to the backends already; any other
    /// would drop everything it takes.
    fn check_has_an_end(
        &self,
        path: &str,
        pipeline: &PipelineConfig,
        errors: &mut Vec<FieldError>,
    ) {
        let correlates = pipeline.processors.iter().any(|id| {
            matches!(
                self.processors.get(id),
                Some(ProcessorConfig::Correlator(_))
            )
        });
        if pipeline.exporters.is_empty() && !correlates {
            errors.push(FieldError::new(
                format!("{path}.exporters"),
                "at least one is required, unless the pipeline ends in a correlator",
            ));
        }
    }

    /// A `signals` pipeline lists only exporters: its data comes from the correlators.
    fn check_signals_pipeline(
        &self,
        path: &str,
        pipeline: &PipelineConfig,
        errors: &mut Vec<FieldError>,
    ) {
        for (list, ids) in [
            ("receivers", &pipeline.receivers),
            ("processors", &pipeline.processors),
        ] {
            if !ids.is_empty() {
                errors.push(FieldError::new(
                    format!("{path}.{list}"),
                    "a signals pipeline has none: signals come from the correlator processors",
                ));
            }
        }
        if pipeline.exporters.is_empty() {
            errors.push(FieldError::new(
                format!("{path}.exporters"),
                "at least one is required",
            ));
        }
        self.check_carried(path, pipeline, Carried::Signals, errors);
    }

    /// Receivers that exist but do not produce what the pipeline carries.
    fn check_fed(
        &self,
        path: &str,
        pipeline: &PipelineConfig,
        kind: TelemetryKind,
        errors: &mut Vec<FieldError>,
    ) {
        for (index, id) in pipeline.receivers.iter().enumerate() {
            let produces = match (self.receivers.get(id), self.connectors.get(id)) {
                (Some(receiver), _) => Some(("receiver", receiver.feeds(kind))),
                (None, Some(connector)) => Some(("connector", connector.feeds(kind))),
                (None, None) => None,
            };
            if let Some((what, false)) = produces {
                errors.push(FieldError::new(
                    format!("{path}.receivers[{index}]"),
                    format!("{what} \"{id}\" produces no {}", kind.name()),
                ));
            }
        }
    }

    /// Exporters that exist but cannot carry what the pipeline carries.
    fn check_carried(
        &self,
        path: &str,
        pipeline: &PipelineConfig,
        carried: Carried,
        errors: &mut Vec<FieldError>,
    ) {
        for (index, id) in pipeline.exporters.iter().enumerate() {
            let takes = match (self.exporters.get(id), self.connectors.get(id), carried) {
                (Some(exporter), _, _) => Some(("exporter", exporter.carries(carried))),
                (None, Some(connector), Carried::Telemetry(kind)) => {
                    Some(("connector", connector.takes(kind)))
                }
                (None, Some(_), Carried::Signals) => Some(("connector", false)),
                (None, None, _) => None,
            };
            if let Some((what, false)) = takes {
                errors.push(FieldError::new(
                    format!("{path}.exporters[{index}]"),
                    format!("{what} \"{id}\" cannot carry {}", carried.name()),
                ));
            }
        }
    }

    /// A memory limiter decides what enters a pipeline, so it comes first, as in the
    /// OpenTelemetry Collector (and one is enough).
    fn check_memory_limiter_first(
        &self,
        path: &str,
        pipeline: &PipelineConfig,
        errors: &mut Vec<FieldError>,
    ) {
        for (index, id) in pipeline.processors.iter().enumerate().skip(1) {
            if let Some(ProcessorConfig::MemoryLimiter(_)) = self.processors.get(id) {
                errors.push(FieldError::new(
                    format!("{path}.processors[{index}]"),
                    format!("memory limiter \"{id}\" must be listed first, where data enters the pipeline"),
                ));
            }
        }
    }

    /// Checks the service section; references to components that exist but are
    /// invalid (`invalid`, as `section.id`) were reported already.
    fn check_service(&self, invalid: &BTreeSet<String>, errors: &mut Vec<FieldError>) {
        let defined_but_invalid =
            |section: &str, id: &str| invalid.contains(&format!("{section}.{id}"));
        if self.service.pipelines.is_empty() {
            errors.push(FieldError::new(
                "service.pipelines",
                "at least one pipeline is required",
            ));
        }
        for (id, pipeline) in &self.service.pipelines {
            let path = format!("service.pipelines.{id}");
            if let Err(message) = settings::check_id(id) {
                errors.push(FieldError::new(&path, message));
            }
            let kind = settings::component_type(id);
            if kind == SIGNALS {
                self.check_signals_pipeline(&path, pipeline, errors);
                continue;
            }
            match TelemetryKind::parse(kind) {
                Some(kind) => {
                    self.check_carried(&path, pipeline, Carried::Telemetry(kind), errors);
                    self.check_fed(&path, pipeline, kind, errors);
                }
                None => errors.push(FieldError::new(
                    &path,
                    format!(
                        "unknown pipeline type \"{kind}\" (known: traces, logs, metrics, signals)"
                    ),
                )),
            }
            check_references(
                &path,
                "receivers",
                &pipeline.receivers,
                |r| {
                    self.receivers.contains_key(r)
                        || self.connectors.contains_key(r)
                        || defined_but_invalid("receivers", r)
                        || defined_but_invalid("connectors", r)
                },
                errors,
            );
            check_references(
                &path,
                "processors",
                &pipeline.processors,
                |p| self.processors.contains_key(p) || defined_but_invalid("processors", p),
                errors,
            );
            self.check_memory_limiter_first(&path, pipeline, errors);
            // An invalid processor may be the correlator it ends in: reported already.
            if !pipeline
                .processors
                .iter()
                .any(|p| defined_but_invalid("processors", p))
            {
                self.check_has_an_end(&path, pipeline, errors);
            }
            check_references(
                &path,
                "exporters",
                &pipeline.exporters,
                |e| {
                    self.exporters.contains_key(e)
                        || self.connectors.contains_key(e)
                        || defined_but_invalid("exporters", e)
                        || defined_but_invalid("connectors", e)
                },
                errors,
            );
        }
        self.check_connectors(errors);
        self.check_handovers(errors);
        for (index, id) in self.service.extensions.iter().enumerate() {
            if !self.extensions.contains_key(id) && !defined_but_invalid("extensions", id) {
                errors.push(FieldError::new(
                    format!("service.extensions[{index}]"),
                    format!("extension \"{id}\" is not defined under extensions"),
                ));
            }
        }
        let address = &self.service.telemetry.metrics.address;
        if let Err(message) = check_listen_address(address) {
            errors.push(FieldError::new(
                "service.telemetry.metrics.address",
                message,
            ));
        }
        if let Some(Err(error)) = self
            .service
            .telemetry
            .metrics
            .tls
            .as_ref()
            .map(|tls| tls.validate())
        {
            errors.push(error.within("service.telemetry.metrics"));
        }
        if tracing_subscriber::EnvFilter::try_new(&self.service.telemetry.logs.level).is_err() {
            errors.push(FieldError::new(
                "service.telemetry.logs.level",
                format!("invalid level \"{}\"", self.service.telemetry.logs.level),
            ));
        }
    }
}

impl Config {
    /// A connector is an exporter of some pipelines and a receiver of others, and
    /// its id names nothing else.
    fn check_connectors(&self, errors: &mut Vec<FieldError>) {
        let pipelines = &self.service.pipelines;
        for (id, connector) in &self.connectors {
            let path = format!("connectors.{id}");
            if self.receivers.contains_key(id) || self.exporters.contains_key(id) {
                errors.push(FieldError::new(
                    &path,
                    "a receiver or exporter has the same id; give the connector its own",
                ));
            }
            if !pipelines.values().any(|p| p.exporters.contains(id)) {
                errors.push(FieldError::new(
                    &path,
                    format!(
                        "no pipeline lists it as an exporter (list it in the exporters of a {} pipeline)",
                        kind_names(connector.kinds_taken())
                    ),
                ));
            }
            if !pipelines.values().any(|p| p.receivers.contains(id)) {
                errors.push(FieldError::new(
                    &path,
                    format!(
                        "no pipeline lists it as a receiver (list it in the receivers of a {} pipeline)",
                        kind_names(connector.kinds_fed())
                    ),
                ));
            }
        }
    }

    /// Until this release a `prometheus` or `prometheusremotewrite` exporter listed
    /// in a traces or logs pipeline derived the operator metrics itself. That config
    /// keeps working: each such exporter gets an `operator_metrics` connector of its
    /// own in those pipelines, feeding a metrics pipeline that exports to it, and a
    /// deprecation naming the new form.
    fn connect_prometheus_exporters_of_traces_and_logs(&mut self) {
        let mut rewired: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (pipeline_id, pipeline) in &mut self.service.pipelines {
            let kind = TelemetryKind::parse(settings::component_type(pipeline_id));
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

fn check_references(
    path: &str,
    list: &str,
    ids: &[String],
    defined: impl Fn(&str) -> bool,
    errors: &mut Vec<FieldError>,
) {
    // Processors may be none, exporters are checked by `check_has_an_end`.
    if ids.is_empty() && list == "receivers" {
        errors.push(FieldError::new(
            format!("{path}.{list}"),
            "at least one is required",
        ));
    }
    for (index, id) in ids.iter().enumerate() {
        if !defined(id) {
            errors.push(FieldError::new(
                format!("{path}.{list}[{index}]"),
                format!("\"{id}\" is not defined under {list}"),
            ));
        }
        if ids.iter().take(index).any(|earlier| earlier == id) {
            errors.push(FieldError::new(
                format!("{path}.{list}[{index}]"),
                format!("\"{id}\" is listed twice"),
            ));
        }
    }
}

/// Signal types as a config names them: `traces or logs`.
fn kind_names(kinds: &[TelemetryKind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|kind| kind.name()).collect();
    names.join(" or ")
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
        if let Err(message) = settings::check_id(&id) {
            errors.push(FieldError::new(path, message));
            continue;
        }
        match parse(settings::component_type(&id), value, &path) {
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

#[cfg(test)]
mod tests;
