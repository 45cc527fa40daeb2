//! The `operator_tagger` processor: runs the recognisers over every span and log
//! record and writes what they found as opscope's attributes (see `semconv`).

// Looked up once per span of a batch: foldhash, seeded per set.
use foldhash::HashSet;
use std::time::{Duration, Instant};

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use opscope_proto::otlp::logs::v1::{LogRecord, SeverityNumber};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::Span;
use opscope_proto::otlp::trace::v1::status::StatusCode;
use serde::Deserialize;

use super::api::{ApiCall, api_call_from_span, api_call_from_text};
use super::audit::{AuditFacts, parse_audit, parse_audit_line};
use super::conflict::{Conflict, find_conflict, namespace_in};
use super::controller_memory::{ControllerMemory, guess_from_controller};
use super::formats::{
    DeletionNote, LogFacts, LogFormatConfig, LogOutcome, OpenJson, UserFormats, is_continuation,
    joined_is_object, namespace_phrase, recognize_line_with,
};
use super::object_memory::ObjectMemory;
use super::operator::{OperatorMapping, OperatorResolver};
use super::otlp_fields::facts_from_attributes;
use crate::kinds::{plural_of_kind, singular_of_resource};
use crate::timestamp::{format_rfc3339, parse_utc_offset};
use std::sync::{Arc, Mutex, MutexGuard};

use super::trace_map::{CONTEXT_NAMES, ReconcileContext, TraceMap};
use crate::attributes::{array_value, get_str, insert, set, set_str, string_value};
use crate::config::{FieldError, duration};
use crate::semconv::*;
use crate::{Processor, Telemetry};

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

impl TaggerConfig {
    pub fn validate(&self) -> Result<(), FieldError> {
        for (index, mapping) in self.operators.iter().enumerate() {
            mapping.validate().map_err(|e| {
                FieldError::new(format!("operators[{index}].{}", e.field), e.message)
            })?;
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

/// The parts of a record's object, borrowed from its facts for completion.
struct PartialObject<'a> {
    kind: &'a mut Option<String>,
    namespace: &'a mut Option<String>,
    name: &'a str,
    message: &'a str,
}

/// Clones share the trace map, so one tagger listed in the traces and the logs
/// pipelines tags a reconcile's logs from its spans.
#[derive(Clone)]
pub struct OperatorTagger {
    operators: Arc<OperatorResolver>,
    traces: Arc<Mutex<TraceMap>>,
    controllers: Arc<Mutex<ControllerMemory>>,
    objects: Arc<Mutex<ObjectMemory>>,
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

    /// Fills in what a record leaves out from the other records of its controller:
    /// the Kind of an object named without one (from a 409 about the same name, the
    /// records that named the same object whole, what the controller's other records
    /// name, or the controller's own name), the namespace of an object named without
    /// one, and whether a start line stands for a reconcile.
    fn complete_from_controller(&self, facts: &mut LogFacts, conflict: Option<&Conflict>) {
        let says_something = facts.kind.is_some()
            || facts.name.is_some()
            || facts.outcome.is_some()
            || facts.starts_reconcile;
        if !says_something {
            return;
        }
        // Borrowed field by field, so that the Kind can be set while the names are read.
        let controller = facts
            .controller
            .as_deref()
            .or(facts.logger.as_deref())
            .unwrap_or_default();
        let mut memory = self.controllers();
        // The Kind a controller reconciles is the one its reconcile lines name; its
        // other lines also name the children it writes.
        if let Some(kind) = &facts.kind
            && !controller.is_empty()
            && (facts.outcome.is_some() || facts.starts_reconcile || facts.reconcile_id.is_some())
        {
            memory.remember_kind(controller, kind);
        }
        // A Kind that only begins with the resource a 409 about the same object names
        // is a controller's name (cert-manager's `CertificateReadiness`).
        if let (Some(kind), Some(conflict)) = (
            &facts.kind,
            conflict.filter(|conflict| facts.name.as_ref() == Some(&conflict.name)),
        ) {
            let singular = singular_of_resource(&conflict.resource);
            if kind.len() > singular.len() && kind.to_ascii_lowercase().starts_with(&singular) {
                facts.kind = Some(singular);
            }
        }
        if facts.name.is_some() {
            // What the controller says, for an object named without a Kind.
            let controller_kind = facts.kind.is_none().then(|| {
                memory.kind_of(controller).map(str::to_string).or_else(|| {
                    match guess_from_controller(controller)? {
                        // A logger's lowercase word is a package (`manifestival`,
                        // `kopf.objects`), where a controller's is its Kind.
                        (Some(kind), _)
                            if facts.controller.is_some()
                                || kind.starts_with(|c: char| c.is_ascii_uppercase())
                                || names_a_controller(controller) =>
                        {
                            Some(kind.to_string())
                        }
                        (Some(_), _) => None,
                        (None, resource) => resource.map(singular_of_resource),
                    }
                })
            });
            if let Some(name) = &facts.name {
                let object = PartialObject {
                    kind: &mut facts.kind,
                    namespace: &mut facts.namespace,
                    name,
                    message: &facts.message,
                };
                self.complete_object(object, conflict, controller_kind.flatten());
            }
        }
        // Start and end lines of one controller may come from different loggers: the
        // Kind ties them too.
        let kind = facts.kind.as_deref().unwrap_or_default();
        let keys = [controller, kind];
        if facts.outcome.is_some() {
            for key in keys.into_iter().filter(|key| !key.is_empty()) {
                memory.remember_end(key);
            }
        } else if facts.starts_reconcile && !keys.iter().all(|key| memory.start_counts(key)) {
            facts.starts_reconcile = false;
        }
    }

    /// The namespace of the object a 409 names, when the call did not give it: from
    /// the record's text (`ns/name`, `in namespace ns`) or from earlier records about
    /// the same object, which are told of it in turn.
    fn complete_conflict(
        &self,
        attributes: &mut Vec<KeyValue>,
        conflict: &Conflict,
        body: Option<&str>,
        message: &str,
    ) {
        let kind = singular_of_resource(&conflict.resource);
        let mut objects = self.objects();
        let namespace = get_str(attributes, API_NAMESPACE)
            .or_else(|| body.and_then(|text| namespace_in(text, &conflict.name)))
            .or_else(|| namespace_in(message, &conflict.name))
            .or_else(|| namespace_phrase(message))
            .or_else(|| objects.namespace_of(&kind, &conflict.name))
            .map(str::to_string);
        objects.remember(Some(&kind), namespace.as_deref(), &conflict.name);
        if let Some(namespace) = namespace {
            set_str(attributes, API_NAMESPACE, &namespace);
        }
    }

    /// Completes the object a record names in part from what earlier records said of
    /// it: a Kind written as its initials, the Kind (from a 409 about the same name,
    /// the records that named it whole, else what its controller says), the namespace. What
    /// the record states, and what it learned from 409s and other records, is
    /// remembered for the records after it.
    fn complete_object(
        &self,
        object: PartialObject<'_>,
        conflict: Option<&Conflict>,
        controller_kind: Option<String>,
    ) {
        let PartialObject {
            kind,
            namespace,
            name,
            message,
        } = object;
        let mut objects = self.objects();
        if let Some(short) = kind.as_deref().filter(|kind| is_abbreviation(kind))
            && let Some(full) = kind_with_initials(message, short)
                .or_else(|| objects.kind_abbreviated(namespace.as_deref(), name, short))
        {
            *kind = Some(full.to_string());
        }
        objects.remember(kind.as_deref(), namespace.as_deref(), name);
        let mut learned = false;
        if kind.is_none() {
            let from_others = conflict
                .filter(|conflict| conflict.name == name)
                .map(|conflict| singular_of_resource(&conflict.resource))
                .or_else(|| {
                    objects
                        .kind_of(namespace.as_deref(), name, message)
                        .map(str::to_string)
                });
            learned = from_others.is_some();
            *kind = from_others.or(controller_kind);
        }
        if namespace.is_none()
            && let Some(kind) = kind.as_deref()
            && let Some(known) = objects.namespace_of(kind, name)
        {
            *namespace = Some(known.to_string());
            learned = true;
        }
        if learned {
            objects.remember(kind.as_deref(), namespace.as_deref(), name);
        }
    }

    /// The deletion a record's words tell of: a deletion timestamp (the first time
    /// the logs said so) with a finalizer holding the object, or no finalizer left.
    /// Logs do not name the finalizer: it is written as `unknown`.
    fn deletion_state(&self, facts: &LogFacts, time: u64) -> Option<(Option<u64>, Vec<String>)> {
        let note = facts.deletion?;
        let (kind, name) = (facts.kind.as_deref()?, facts.name.as_deref()?);
        if time == 0 {
            return None;
        }
        let object = format!(
            "{}/{}/{name}",
            plural_of_kind(kind),
            facts.namespace.as_deref().unwrap_or_default()
        );
        let mut memory = self.controllers();
        match note {
            DeletionNote::InProgress => {
                let first = memory.deletion_seen(&object, time)?;
                Some((Some(first), vec!["unknown".to_string()]))
            }
            DeletionNote::FinalizerRemoved => {
                memory.deletion_done(&object);
                Some((None, Vec::new()))
            }
        }
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

    pub fn tag_traces(&mut self, request: &mut ExportTraceServiceRequest) {
        for resource_spans in &mut request.resource_spans {
            self.tag_resource(&mut resource_spans.resource);
        }
        // Roots first, over the whole batch, so children earlier in it (also under
        // another resource, such as the API server's) find their reconcile.
        let roots: Vec<Option<ReconcileContext>> = spans(request).map(reconcile_root).collect();
        let nested = nested_roots(request, &roots);
        let mut traces = self.traces();
        for ((span, root), nested) in spans_mut(request).zip(roots).zip(nested) {
            if let Some(context) = root
                && !nested
            {
                write_context(&mut span.attributes, context.names());
                set_str(&mut span.attributes, OPSCOPE_RECORD, RECORD_RECONCILE);
                write_span_outcome(span);
                traces.insert(&span.trace_id, context, span.start_time_unix_nano);
            }
        }
        let calls: Vec<Option<ApiCall>> = spans(request)
            .map(|span| api_call_from_span(&span.attributes))
            .collect();
        let conflicted = traces_with_conflicting_calls(request, &calls);
        for (span, call) in spans_mut(request).zip(calls) {
            let context = traces.get(&span.trace_id);
            // Room for what is written below, at once rather than by doubling.
            let adds = context.map_or(0, |_| CONTEXT_ATTRIBUTES)
                + call
                    .as_ref()
                    .filter(|_| self.api_attributes)
                    .map_or(0, |_| API_CALL_ATTRIBUTES);
            span.attributes.reserve(adds);
            if let Some(context) = context {
                write_context(&mut span.attributes, context.names());
            }
            let reported = conflicted.contains(span.trace_id.as_slice());
            tag_api_call(span, call, reported, self.api_attributes);
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

    /// Tags each record; joins stack-trace lines to the record they follow and
    /// splits audit event lists into one record per event.
    fn tag_log_records(&mut self, records: Vec<LogRecord>) -> Vec<LogRecord> {
        let mut tagged: Vec<LogRecord> = Vec::with_capacity(records.len());
        // The records of a JSON object still open, with their text so far.
        let mut open: Option<(Vec<LogRecord>, String, OpenJson)> = None;
        for mut record in records {
            let body = body_text(&record).map(str::to_string);
            if let Some((parts, joined, json)) = &mut open
                && let Some(text) = &body
                && !json.ends_before(text, joined.len())
            {
                joined.push_str(text);
                parts.push(record);
                if json.feed(text)
                    && let Some((parts, joined, _)) = open.take()
                {
                    self.tag_joined(parts, joined, &mut tagged);
                }
                continue;
            }
            if let Some((parts, joined, _)) = open.take() {
                self.tag_joined(parts, joined, &mut tagged);
            }
            if let Some(text) = &body
                && let Some(json) = OpenJson::opened_by(text)
            {
                open = Some((vec![record], text.clone(), json));
                continue;
            }
            if let Some(text) = &body {
                if is_continuation(text)
                    && let Some(previous) = tagged.last_mut().filter(|p| joins(p))
                    && append_line(previous, text)
                {
                    // A Java exception's message may name the failed call and its 409.
                    if get_str(&previous.attributes, API_NAME).is_none() {
                        if let Some(call) = api_call_from_text(text) {
                            write_api_call(&mut previous.attributes, &call);
                        }
                        if let Some(conflict) = find_conflict(text) {
                            self.complete_conflict(
                                &mut previous.attributes,
                                &conflict,
                                Some(text),
                                "",
                            );
                            write_conflict(&mut previous.attributes, &conflict);
                        }
                    }
                    continue;
                }
                if text.contains("\"auditID\"")
                    && let Some(events) = audit_events(text)
                {
                    // Each event has a body of its own: the list's is not copied to each.
                    record.body = None;
                    tagged.extend(
                        events
                            .into_iter()
                            .map(|(body, facts)| audit_record(&record, body, facts.as_ref())),
                    );
                    continue;
                }
            }
            self.tag_log_record(&mut record, body.as_deref());
            tagged.push(record);
        }
        if let Some((parts, joined, _)) = open.take() {
            self.tag_joined(parts, joined, &mut tagged);
        }
        // The records of one batch inform each other: an object named in part early
        // in it takes what later records said of it whole.
        for record in &mut tagged {
            self.complete_from_batch(record);
        }
        tagged
    }

    /// Fills the Kind or namespace a tagged record's object still lacks from the
    /// objects remembered since it was tagged.
    fn complete_from_batch(&self, record: &mut LogRecord) {
        let attributes = &record.attributes;
        let Some(name) = get_str(attributes, OBJECT_NAME) else {
            return;
        };
        let kind = get_str(attributes, OBJECT_KIND);
        let namespace = get_str(attributes, OBJECT_NAMESPACE);
        if kind.is_some() && namespace.is_some() {
            return;
        }
        let objects = self.objects();
        let message = body_text(record).unwrap_or_default();
        let found_kind = match kind {
            Some(_) => None,
            None => objects.kind_of(namespace, name, message),
        };
        let found_namespace = match namespace {
            Some(_) => None,
            None => kind
                .or(found_kind)
                .and_then(|kind| objects.namespace_of(kind, name)),
        };
        let found = [
            (OBJECT_KIND, found_kind.map(str::to_string)),
            (OBJECT_NAMESPACE, found_namespace.map(str::to_string)),
        ];
        drop(objects);
        for (key, value) in found {
            if let Some(value) = value {
                set_str(&mut record.attributes, key, &value);
            }
        }
    }

    /// Tags the records of a JSON object cut across lines (see [`OpenJson`]) as one
    /// when their text joins into an object, else each as it is.
    fn tag_joined(
        &mut self,
        mut parts: Vec<LogRecord>,
        joined: String,
        tagged: &mut Vec<LogRecord>,
    ) {
        if parts.len() > 1 && joined_is_object(&joined) {
            parts.truncate(1);
            if let Some(mut record) = parts.pop() {
                self.tag_log_record(&mut record, Some(&joined));
                record.body = Some(AnyValue {
                    value: Some(Value::StringValue(joined)),
                });
                tagged.push(record);
            }
            return;
        }
        for mut record in parts {
            let body = body_text(&record).map(str::to_string);
            self.tag_log_record(&mut record, body.as_deref());
            tagged.push(record);
        }
    }

    fn tag_log_record(&mut self, record: &mut LogRecord, body: Option<&str>) {
        let mut facts = body
            .map(|text| recognize_line_with(text, &self.formats))
            .unwrap_or_default();
        if facts.zoneless_time
            && self.utc_offset != 0
            && let Some(time) = facts.time_unix_nano
        {
            let shift = self.utc_offset.unsigned_abs().saturating_mul(1_000_000_000);
            facts.time_unix_nano = Some(if self.utc_offset > 0 {
                time.saturating_sub(shift)
            } else {
                time.saturating_add(shift)
            });
        }
        facts_from_attributes(&record.attributes, &mut facts);
        if record.time_unix_nano == 0 {
            record.time_unix_nano = facts.time_unix_nano.unwrap_or(0);
        }
        if record.severity_number == 0
            && let Some(level) = facts.level
        {
            record.severity_number = level.severity_number();
            record.severity_text = level.name().to_string();
        }
        let conflict = facts
            .error
            .as_deref()
            .and_then(find_conflict)
            .or_else(|| find_conflict(&facts.message))
            // klog's unkeyed values, a console line's cut context.
            .or_else(|| body.and_then(find_conflict));
        self.complete_from_controller(&mut facts, conflict.as_ref());
        let time = facts.time_unix_nano.unwrap_or(record.time_unix_nano);
        let deletion = self.deletion_state(&facts, time);
        let attributes = &mut record.attributes;
        if let Some((deleted_at, finalizers)) = deletion {
            if let Some(deleted_at) = deleted_at {
                insert(
                    attributes,
                    OBJECT_DELETION_TIMESTAMP,
                    string_value(format_rfc3339(deleted_at).as_str()),
                );
            }
            insert(attributes, OBJECT_FINALIZERS, array_value(finalizers));
        }
        if let Some(context) = self.traces().get(&record.trace_id) {
            write_context(attributes, context.names());
        }
        write_log_facts(attributes, &facts);
        // client-go and kube-apiserver request lines are API calls, with their object.
        if let Some(call) = body.and_then(api_call_from_text) {
            write_api_call(attributes, &call);
        } else if facts.api_code.is_some() || facts.api_verb.is_some() {
            write_stated_api_call(attributes, &facts);
        }
        if let Some(conflict) = conflict {
            self.complete_conflict(attributes, &conflict, body, &facts.message);
            write_conflict(attributes, &conflict);
        }
    }
}

/// A Kind written short: in lowercase letters, as its initials (`dspa_name`) or its
/// last word (Strimzi's `topic` for `KafkaTopic`).
fn is_abbreviation(kind: &str) -> bool {
    kind.len() >= 2 && kind.bytes().all(|b| b.is_ascii_lowercase())
}

/// The CamelCase word of a message that `short` stands for
/// (`DataSciencePipelinesApplication` for `dspa`).
fn kind_with_initials<'a>(message: &'a str, short: &str) -> Option<&'a str> {
    message
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|word| is_short_for(word, short))
}

/// Whether `short` stands for the CamelCase Kind `word`: its capitals, lowercased
/// (`dspa`), or its last word (`topic` for `KafkaTopic`), but not all of it.
pub(super) fn is_short_for(word: &str, short: &str) -> bool {
    if !word.starts_with(|c: char| c.is_ascii_uppercase()) || word.len() <= short.len() {
        return false;
    }
    let initials = word
        .bytes()
        .filter(u8::is_ascii_uppercase)
        .map(|b| b.to_ascii_lowercase())
        .eq(short.bytes());
    let tail_at = word.len() - short.len();
    let last_word = word.is_char_boundary(tail_at)
        && word
            .as_bytes()
            .get(tail_at)
            .is_some_and(u8::is_ascii_uppercase)
        && word
            .get(tail_at..)
            .is_some_and(|tail| tail.eq_ignore_ascii_case(short));
    initials || last_word
}

/// Whether a logger's name says it is a controller's (`subscription-controller`).
fn names_a_controller(logger: &str) -> bool {
    let lower = logger.to_ascii_lowercase();
    lower.contains("controller") || lower.contains("reconciler")
}

fn spans(request: &ExportTraceServiceRequest) -> impl Iterator<Item = &Span> {
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
}

fn spans_mut(request: &mut ExportTraceServiceRequest) -> impl Iterator<Item = &mut Span> {
    request
        .resource_spans
        .iter_mut()
        .flat_map(|r| &mut r.scope_spans)
        .flat_map(|s| &mut s.spans)
}

/// For each span, whether its parent is a root of its trace in the batch: a root
/// nested in another (kube-rs's `reconcile` function span inside its `reconciling
/// object`) is part of that reconcile, not one of its own.
fn nested_roots(
    request: &ExportTraceServiceRequest,
    roots: &[Option<ReconcileContext>],
) -> Vec<bool> {
    let root_spans: HashSet<(&[u8], &[u8])> = spans(request)
        .zip(roots)
        .filter(|(_, root)| root.is_some())
        .map(|(span, _)| (span.trace_id.as_slice(), span.span_id.as_slice()))
        .collect();
    spans(request)
        .map(|span| {
            !span.parent_span_id.is_empty()
                && root_spans.contains(&(span.trace_id.as_slice(), span.parent_span_id.as_slice()))
        })
        .collect()
}

/// The reconcile a span stands for, if it is a reconcile's root: a span named
/// `reconcile`/`Reconcile`, kube-rs's `reconciling object`, or one that carries
/// reconcile attributes itself.
fn reconcile_root(span: &Span) -> Option<ReconcileContext> {
    let named = matches!(
        span.name.as_str(),
        "reconcile" | "Reconcile" | "reconciling object"
    );
    // A span opscope tagged before (upstream) is a root only if it was one there: its
    // children carry the reconcile id written from the trace.
    let recorded = get_str(&span.attributes, OPSCOPE_RECORD);
    // Most spans are API calls with no reconcile id: they are ruled out before their
    // attributes are read into facts.
    let may_carry = match recorded {
        None => span.attributes.iter().any(|kv| {
            matches!(
                kv.key.as_str(),
                RECONCILE_ID | "reconcile_id" | "reconcileID"
            )
        }),
        Some(record) => record == RECORD_RECONCILE,
    };
    if !named && !may_carry {
        return None;
    }
    let mut facts = LogFacts::default();
    facts_from_attributes(&span.attributes, &mut facts);
    let carries = match recorded {
        None => facts.reconcile_id.is_some(),
        Some(record) => record == RECORD_RECONCILE,
    };
    if !named && !carries {
        return None;
    }
    // What the facts found, else what opscope wrote upstream.
    fn found_or<'a>(found: &'a Option<String>, attributes: &'a [KeyValue], key: &str) -> &'a str {
        found
            .as_deref()
            .or_else(|| get_str(attributes, key))
            .unwrap_or_default()
    }
    let found_or_written = |found, key| found_or(found, &span.attributes, key);
    let span_id;
    // An empty id is no id: the reconcile is then known by its span's id.
    let reconcile_id = match found_or_written(&facts.reconcile_id, RECONCILE_ID) {
        "" => {
            span_id = hex::encode(&span.span_id);
            span_id.as_str()
        }
        id => id,
    };
    Some(ReconcileContext::new([
        reconcile_id,
        found_or_written(&facts.controller, CONTROLLER),
        found_or_written(&facts.group, OBJECT_GROUP),
        found_or_written(&facts.kind, OBJECT_KIND),
        found_or_written(&facts.namespace, OBJECT_NAMESPACE),
        found_or_written(&facts.name, OBJECT_NAME),
    ]))
}

/// Attributes [`write_context`] writes at most.
const CONTEXT_ATTRIBUTES: usize = CONTEXT_NAMES;
/// Attributes [`write_api_call`] writes at most.
const API_CALL_ATTRIBUTES: usize = 8;

/// Writes a reconcile's identity (see [`ReconcileContext::names`]) where the record
/// does not say otherwise.
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

fn write_span_outcome(span: &mut Span) {
    let failed = span
        .status
        .as_ref()
        .filter(|s| s.code == StatusCode::Error as i32)
        .map(|s| s.message.clone());
    let attributes = &mut span.attributes;
    match failed {
        Some(message) => {
            insert(attributes, RECONCILE_RESULT, string_value("error"));
            if !message.is_empty() {
                insert(attributes, RECONCILE_ERROR, string_value(message.as_str()));
            }
        }
        None => insert(attributes, RECONCILE_RESULT, string_value("ok")),
    }
}

/// Traces of the batch in which a client span reports a 409 itself, given the API
/// call of each span.
fn traces_with_conflicting_calls(
    request: &ExportTraceServiceRequest,
    calls: &[Option<ApiCall>],
) -> HashSet<Vec<u8>> {
    spans(request)
        .zip(calls)
        .filter(|(_, call)| call.as_ref().is_some_and(|call| call.code == Some(409)))
        .map(|(span, _)| span.trace_id.clone())
        .collect()
}

/// Client HTTP spans to the API server (`call`, read from the span before it was
/// tagged), and 409 messages in a span's status or events. A span that only repeats
/// the 409 of a client span of its trace (the reconcile failing with the conflict's
/// text) is not a second conflict.
fn tag_api_call(
    span: &mut Span,
    call: Option<ApiCall>,
    conflict_reported_in_trace: bool,
    write_call: bool,
) {
    if let Some(call) = call.as_ref().filter(|_| write_call) {
        write_api_call(&mut span.attributes, call);
    }
    if call.is_none() && conflict_reported_in_trace {
        return;
    }
    let status_message = span
        .status
        .as_ref()
        .map(|s| s.message.as_str())
        .unwrap_or_default();
    let event_messages = span
        .events
        .iter()
        .flat_map(|e| &e.attributes)
        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) if kv.key == "exception.message" => Some(s.as_str()),
            _ => None,
        });
    let conflict = std::iter::once(status_message)
        .chain(event_messages)
        .find_map(find_conflict);
    if let Some(conflict) = conflict {
        write_conflict(&mut span.attributes, &conflict);
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

fn write_log_facts(attributes: &mut Vec<KeyValue>, facts: &LogFacts) {
    write_context(
        attributes,
        [
            &facts.reconcile_id,
            &facts.controller,
            &facts.group,
            &facts.kind,
            &facts.namespace,
            &facts.name,
        ]
        .map(|found| found.as_deref().unwrap_or_default()),
    );
    let has_object = get_str(attributes, OBJECT_NAME).is_some();
    if let Some(outcome) = &facts.outcome {
        let (result, after) = match outcome {
            LogOutcome::Ok => ("ok", None),
            LogOutcome::Error => ("error", None),
            LogOutcome::Requeue => ("requeue", None),
            LogOutcome::RequeueAfter(delay) => ("requeue_after", Some(delay.as_secs_f64())),
        };
        set_str(attributes, RECONCILE_RESULT, result);
        if let Some(seconds) = after {
            set(
                attributes,
                RECONCILE_REQUEUE_AFTER,
                Value::DoubleValue(seconds),
            );
        }
        if has_object {
            insert(attributes, OPSCOPE_RECORD, string_value(RECORD_RECONCILE));
        }
    }
    // A start line stands for its reconcile when the controller logs no end lines.
    if facts.starts_reconcile && has_object {
        insert(attributes, OPSCOPE_RECORD, string_value(RECORD_RECONCILE));
    }
    if let Some(error) = &facts.error {
        insert(attributes, RECONCILE_ERROR, string_value(error.as_str()));
    }
}

/// The events of an audit body, each with the body of its record and its facts
/// (`None` for a stage that does not count, such as `RequestReceived`: passed on
/// untagged, not dropped). An `EventList` is split into one `Event` per item, so that
/// a record tagged again downstream is not split again. `None` for no audit body.
fn audit_events(text: &str) -> Option<Vec<(String, Option<AuditFacts>)>> {
    // Whether the body is audit at all, and the facts of a single event.
    let facts = parse_audit_line(text).ok()?;
    let Some(items) = event_list_items(text) else {
        return Some(vec![(text.to_string(), facts.into_iter().next())]);
    };
    let events = items.into_iter().map(|event| {
        let facts = parse_audit(&event).into_iter().next();
        (event.to_string(), facts)
    });
    Some(events.collect())
}

/// The items of an audit `EventList`, each made an `Event` of its own.
fn event_list_items(text: &str) -> Option<Vec<serde_json::Value>> {
    let serde_json::Value::Object(mut list) = serde_json::from_str(text).ok()? else {
        return None;
    };
    if list.get("kind")?.as_str()? != "EventList" {
        return None;
    }
    let api_version = list.remove("apiVersion")?;
    let serde_json::Value::Array(items) = list.remove("items")? else {
        return None;
    };
    let events = items.into_iter().map(|mut item| {
        if let Some(event) = item.as_object_mut() {
            event.insert("kind".into(), "Event".into());
            event.insert("apiVersion".into(), api_version.clone());
        }
        item
    });
    Some(events.collect())
}

/// The record of one audit event with its own body, keeping the source record's
/// resource-level context; tagged when the event counts.
fn audit_record(source: &LogRecord, body: String, event: Option<&AuditFacts>) -> LogRecord {
    let mut record = LogRecord {
        body: Some(AnyValue {
            value: Some(string_value(body)),
        }),
        ..source.clone()
    };
    let Some(event) = event else {
        return record;
    };
    record.time_unix_nano = event.time_unix_nano;
    let attributes = &mut record.attributes;
    set_str(attributes, API_ACTOR, &event.user);
    set_str(attributes, API_VERB, &event.verb);
    for (api_key, object_key, value) in [
        (API_GROUP, OBJECT_GROUP, &event.group),
        (API_RESOURCE, OBJECT_RESOURCE, &event.resource),
        (API_NAMESPACE, OBJECT_NAMESPACE, &event.namespace),
        (API_NAME, OBJECT_NAME, &event.name),
        (API_KIND, OBJECT_KIND, &event.kind),
    ] {
        if !value.is_empty() {
            set_str(attributes, api_key, value);
            set_str(attributes, object_key, value);
        }
    }
    if !event.subresource.is_empty() {
        set_str(attributes, API_SUBRESOURCE, &event.subresource);
    }
    if let Some(code) = event.code {
        set(
            attributes,
            HTTP_RESPONSE_STATUS_CODE,
            Value::IntValue(i64::from(code)),
        );
    }
    write_audit_state(attributes, event);
    if let Some(conflict) = event.conflict_message.as_deref().and_then(find_conflict) {
        write_conflict(attributes, &conflict);
    }
    record
}

fn write_audit_state(attributes: &mut Vec<KeyValue>, event: &AuditFacts) {
    let mut shows_state = false;
    for (key, value) in [
        (OBJECT_GENERATION, event.generation),
        (OBJECT_OBSERVED_GENERATION, event.observed_generation),
    ] {
        if let Some(value) = value {
            set(attributes, key, Value::IntValue(value));
            shows_state = true;
        }
    }
    if let Some(version) = &event.resource_version {
        set_str(attributes, OBJECT_RESOURCE_VERSION, version);
    }
    if let Some(deleted) = &event.deletion_timestamp {
        set_str(attributes, OBJECT_DELETION_TIMESTAMP, deleted);
        shows_state = true;
    }
    if let Some(finalizers) = &event.finalizers {
        set(
            attributes,
            OBJECT_FINALIZERS,
            array_value(finalizers.iter().cloned()),
        );
        shows_state = true;
    }
    if !event.status_digest.is_empty() {
        set(
            attributes,
            OBJECT_STATUS_DIGEST,
            array_value(event.status_digest.iter().cloned()),
        );
    }
    if shows_state {
        set_str(attributes, OPSCOPE_RECORD, RECORD_OBJECT_STATE);
    } else {
        set_str(attributes, OPSCOPE_RECORD, RECORD_API_CALL);
    }
    // Gone only when the response shows the object without finalizers: an event that
    // shows no object (Metadata level, a `Status` body) does not say, and the object
    // may still be waiting on its finalizers.
    let deleted = event.verb == "delete" && event.code.is_some_and(|c| (200..300).contains(&c));
    if deleted && event.finalizers.as_ref().is_some_and(Vec::is_empty) {
        set(attributes, OBJECT_GONE, Value::BoolValue(true));
    }
}

fn body_text(record: &LogRecord) -> Option<&str> {
    match record.body.as_ref()?.value.as_ref()? {
        Value::StringValue(text) => Some(text),
        _ => None,
    }
}

/// Stack-trace lines belong to the error record they follow.
fn joins(previous: &LogRecord) -> bool {
    previous.severity_number >= SeverityNumber::Error as i32
}

/// Longest record a joined stack trace may grow to.
const MAX_JOINED_BYTES: usize = 64 * 1024;

/// Appends a line to a record's body; a line that would make it too long is left
/// to stand as a record of its own.
fn append_line(record: &mut LogRecord, line: &str) -> bool {
    match record.body.as_mut().and_then(|b| b.value.as_mut()) {
        Some(Value::StringValue(body)) if body.len() + line.len() < MAX_JOINED_BYTES => {
            body.push('\n');
            body.push_str(line);
            true
        }
        _ => false,
    }
}

impl<T: Telemetry> Processor<T> for OperatorTagger {
    fn process(&mut self, mut data: T, _: Instant, out: &mut Vec<T>) {
        data.tag(self);
        out.push(data);
    }
}

#[cfg(test)]
#[path = "processor_tests.rs"]
pub(crate) mod tests;
