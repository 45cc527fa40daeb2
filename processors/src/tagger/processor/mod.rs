//! The `operator_tagger` processor: runs the recognisers over every span and log
//! record and writes what they found as opscope's attributes (see `semconv`). Spans,
//! log records, audit records and the completion of what a record leaves out each
//! have a file of their own.

mod audit_records;
pub use audit_records::write_audit_call;
mod completion;
mod logs;
mod spans;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opscope_model::Telemetry;
use opscope_model::attributes::{get_str, insert, set, set_str, string_value};
use opscope_model::config::{FieldError, Validate, duration};
use opscope_model::kubernetes::api_call::ApiCall;
use opscope_model::semconv::{
    API_GROUP, API_KIND, API_NAME, API_NAMESPACE, API_RESOURCE, API_SUBRESOURCE, API_VERB,
    CONTROLLER, HTTP_RESPONSE_STATUS_CODE, OBJECT_GROUP, OBJECT_KIND, OBJECT_NAME,
    OBJECT_NAMESPACE, OPERATOR_NAME, OPSCOPE_RECORD, RECONCILE_ID, RECORD_API_CALL,
};
use opscope_model::timestamp::parse_utc_offset;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{KeyValue, any_value::Value};
use opscope_proto::otlp::resource::v1::Resource;
use serde::Deserialize;

use super::conflict::Conflict;
use super::controller_memory::ControllerMemory;
use super::formats::{LogFacts, LogFormatConfig, UserFormats};
use super::object_memory::ObjectMemory;
use super::operator::{OperatorMapping, OperatorResolver};
use super::reconcile_pairing::ReconcilePairing;
use super::trace_map::{CONTEXT_NAMES, TraceMap};
use crate::Processor;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaggerConfig {
    /// Pods (by namespace and pod-name glob) to operator names, tried before the
    /// resource's own names.
    pub operators: Vec<OperatorMapping>,
    /// Traces whose reconcile is remembered for their child spans and logs.
    pub max_traces: usize,
    #[serde(deserialize_with = "duration")]
    pub trace_ttl: Duration,
    /// Write what a client span's API call addresses (`k8s.api.*`, `opscope.record:
    /// api_call`) onto the span. The correlator reads the call from the span's HTTP
    /// attributes when they are not written; leaving them out makes tagging and export
    /// cheaper and the stored spans smaller, at the cost of searching by them.
    pub api_attributes: bool,
    /// Formats of operator log lines the built-in ones do not read, tried first.
    pub log_formats: Vec<LogFormatConfig>,
    /// The zone of log times written without one (log4j's default): `UTC` (the
    /// default) or a fixed offset such as `+02:00`.
    pub default_timezone: Option<String>,
}

impl Default for TaggerConfig {
    fn default() -> Self {
        Self {
            operators: Vec::new(),
            max_traces: 10_000,
            trace_ttl: Duration::from_secs(300),
            api_attributes: true,
            log_formats: Vec::new(),
            default_timezone: None,
        }
    }
}

impl Validate for TaggerConfig {
    fn validate(&self) -> Result<(), FieldError> {
        for (index, mapping) in self.operators.iter().enumerate() {
            mapping
                .validate()
                .map_err(|e| e.within(&format!("operators[{index}]")))?;
        }
        if self.max_traces == 0 {
            return Err(FieldError::new("max_traces", "must be at least 1"));
        }
        if let Some(zone) = &self.default_timezone
            && parse_utc_offset(zone).is_none()
        {
            return Err(FieldError::new(
                "default_timezone",
                format!("\"{zone}\" is not UTC or an offset such as +02:00"),
            ));
        }
        UserFormats::compile(&self.log_formats)
            .map_err(|e| FieldError::new(format!("log_formats{}", e.field), e.message))?;
        Ok(())
    }
}

/// Clones share the trace map, so one tagger listed in the traces and the logs
/// pipelines tags a reconcile's logs from its spans.
#[derive(Clone)]
pub struct OperatorTagger {
    operators: Arc<OperatorResolver>,
    traces: Arc<Mutex<TraceMap>>,
    controllers: Arc<Mutex<ControllerMemory>>,
    objects: Arc<Mutex<ObjectMemory>>,
    reconciles: Arc<Mutex<ReconcilePairing>>,
    formats: Arc<UserFormats>,
    /// Seconds east of UTC of zone-less log times.
    utc_offset: i64,
    api_attributes: bool,
}

impl OperatorTagger {
    pub fn new(config: &TaggerConfig) -> Self {
        Self {
            operators: Arc::new(OperatorResolver::new(&config.operators)),
            traces: Arc::new(Mutex::new(TraceMap::new(
                config.max_traces,
                config.trace_ttl.as_nanos().min(u64::MAX as u128) as u64,
            ))),
            controllers: Arc::default(),
            objects: Arc::default(),
            reconciles: Arc::default(),
            // Validated with the config; a format that does not compile reads nothing.
            formats: Arc::new(UserFormats::compile(&config.log_formats).unwrap_or_default()),
            utc_offset: config
                .default_timezone
                .as_deref()
                .and_then(parse_utc_offset)
                .unwrap_or(0),
            api_attributes: config.api_attributes,
        }
    }

    fn traces(&self) -> MutexGuard<'_, TraceMap> {
        // The map holds hints, not invariants: a poisoned lock is still usable.
        self.traces
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn reconciles(&self) -> MutexGuard<'_, ReconcilePairing> {
        // Hints, as the memories are: a poisoned lock is still usable.
        self.reconciles
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn objects(&self) -> MutexGuard<'_, ObjectMemory> {
        // A memory of hints, as the controllers': a poisoned lock is still usable.
        self.objects
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn controllers(&self) -> MutexGuard<'_, ControllerMemory> {
        self.controllers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tag_resource(&self, resource: &mut Option<Resource>) {
        let resource = resource.get_or_insert_with(Resource::default);
        if let Some(operator) = self.operators.resolve(&resource.attributes) {
            insert(
                &mut resource.attributes,
                OPERATOR_NAME,
                string_value(operator),
            );
        }
    }

    pub fn tag_logs(&mut self, request: &mut ExportLogsServiceRequest) {
        for resource_logs in &mut request.resource_logs {
            self.tag_resource(&mut resource_logs.resource);
            for scope_logs in &mut resource_logs.scope_logs {
                let records = std::mem::take(&mut scope_logs.log_records);
                scope_logs.log_records = self.tag_log_records(records);
            }
        }
    }

    pub fn tag_metrics(&mut self, request: &mut ExportMetricsServiceRequest) {
        for resource_metrics in &mut request.resource_metrics {
            self.tag_resource(&mut resource_metrics.resource);
        }
    }
}

/// Attributes [`write_context`] writes at most.
const CONTEXT_ATTRIBUTES: usize = CONTEXT_NAMES;
/// Attributes [`write_api_call`] writes at most.
const API_CALL_ATTRIBUTES: usize = 8;

/// Writes a reconcile's identity (see
/// [`ReconcileContext::names`](super::trace_map::ReconcileContext::names)) where the
/// record does not say otherwise.
fn write_context(attributes: &mut Vec<KeyValue>, names: [&str; CONTEXT_ATTRIBUTES]) {
    let keys = [
        RECONCILE_ID,
        CONTROLLER,
        OBJECT_GROUP,
        OBJECT_KIND,
        OBJECT_NAMESPACE,
        OBJECT_NAME,
    ];
    for (key, value) in keys.into_iter().zip(names) {
        if !value.is_empty() {
            insert(attributes, key, string_value(value));
        }
    }
}

/// An API call a user format states (`code`, `verb`) about the record's object.
fn write_stated_api_call(attributes: &mut Vec<KeyValue>, facts: &LogFacts) {
    for (key, value) in [
        (API_GROUP, &facts.group),
        (API_KIND, &facts.kind),
        (API_NAMESPACE, &facts.namespace),
        (API_NAME, &facts.name),
    ] {
        if let Some(value) = value {
            set_str(attributes, key, value);
        }
    }
    // A status without a verb is most often a write's (a 409 is one).
    let verb = facts.api_verb.as_deref().unwrap_or("update");
    set_str(attributes, API_VERB, verb);
    insert(attributes, OPSCOPE_RECORD, string_value(RECORD_API_CALL));
    if let Some(code) = facts.api_code {
        insert(
            attributes,
            HTTP_RESPONSE_STATUS_CODE,
            Value::IntValue(i64::from(code)),
        );
    }
}

fn write_api_call(attributes: &mut Vec<KeyValue>, call: &ApiCall) {
    let path = &call.path;
    for (key, value) in [
        (API_GROUP, path.group.as_str()),
        (API_RESOURCE, path.resource.as_str()),
        (API_NAMESPACE, path.namespace.as_str()),
        (API_NAME, path.name.as_str()),
        (API_SUBRESOURCE, path.subresource.as_str()),
    ] {
        if !value.is_empty() {
            set_str(attributes, key, value);
        }
    }
    set_str(attributes, API_VERB, call.verb);
    insert(attributes, OPSCOPE_RECORD, string_value(RECORD_API_CALL));
    if let Some(code) = call.code {
        insert(
            attributes,
            HTTP_RESPONSE_STATUS_CODE,
            Value::IntValue(i64::from(code)),
        );
    }
}

/// A 409 names its object by resource and name only; the namespace is the one of the
/// object the record is about, which is where an operator's conflicting writes go.
fn write_conflict(attributes: &mut Vec<KeyValue>, conflict: &Conflict) {
    let namespace = get_str(attributes, API_NAMESPACE)
        .or_else(|| get_str(attributes, OBJECT_NAMESPACE))
        .unwrap_or_default()
        .to_string();
    set_str(attributes, API_RESOURCE, &conflict.resource);
    if !conflict.group.is_empty() {
        set_str(attributes, API_GROUP, &conflict.group);
    }
    set_str(attributes, API_NAME, &conflict.name);
    if !namespace.is_empty() {
        set_str(attributes, API_NAMESPACE, &namespace);
    }
    insert(attributes, API_VERB, string_value("update"));
    set(attributes, HTTP_RESPONSE_STATUS_CODE, Value::IntValue(409));
}

/// A batch the tagger reads: each signal type's records are tagged their own way.
pub trait Taggable: Telemetry {
    fn tag(&mut self, tagger: &mut OperatorTagger);
}

impl Taggable for ExportTraceServiceRequest {
    fn tag(&mut self, tagger: &mut OperatorTagger) {
        tagger.tag_traces(self);
    }
}

impl Taggable for ExportLogsServiceRequest {
    fn tag(&mut self, tagger: &mut OperatorTagger) {
        tagger.tag_logs(self);
    }
}

impl Taggable for ExportMetricsServiceRequest {
    fn tag(&mut self, tagger: &mut OperatorTagger) {
        tagger.tag_metrics(self);
    }
}

impl<T: Taggable> Processor<T> for OperatorTagger {
    fn process(&mut self, mut data: T, _: Instant, out: &mut Vec<T>) {
        data.tag(self);
        out.push(data);
    }
}

#[cfg(test)]
pub(crate) mod tests;
