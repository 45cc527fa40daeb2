//! The checks of a config across its sections: every pipeline's receivers,
//! processors and exporters exist and take what it carries, connectors are listed
//! on both sides, and the service's own settings are sound.

use std::collections::BTreeSet;

use opscope_model::TelemetryKind;
use opscope_model::config::{FieldError, Validate, check_listen_address};

use super::settings::{check_id, component_type};
use super::{Config, ExporterConfig, PipelineConfig, ProcessorConfig, ReceiverConfig, SIGNALS};
use crate::sending::Carried;

impl Config {
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
            let accepted = self.receivers.values().any(
                |receiver| matches!(receiver, ReceiverConfig::Otlp(otlp) if otlp.accept_handover),
            );
            if !accepted {
                errors.push(FieldError::new(
                    format!("processors.{id}.handover"),
                    "needs an otlp receiver with accept_handover: true, where the other gateways' hand-overs arrive",
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
    pub(super) fn check_service(&self, invalid: &BTreeSet<String>, errors: &mut Vec<FieldError>) {
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
            if let Err(message) = check_id(id) {
                errors.push(FieldError::new(&path, message));
            }
            let kind = component_type(id);
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
