//! Correlator events from tagged records: reads the attributes the tagger writes
//! (see `semconv`), so records tagged by another opscope correlate the same, and a
//! client span's HTTP attributes where its API call was not written.

use std::sync::Arc;
use std::time::Duration;

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, metric::Data, number_data_point,
};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::status::StatusCode;

use super::events::{
    ApiTraffic, ApiTrafficEvent, ConnectionOutcome, Counter, CounterEvent, Event, GaugeEvent,
    ObjectEvent, ObjectEventKind, ObjectState, Outcome, Reconcile, RecordPlace, Write, push_ids,
};

use opscope_model::kubernetes::{Name, ObjectRef, OperatorRef};

use opscope_model::attributes::{
    as_bool, as_f64, as_i64, as_str, as_strings, get_bool, get_i64, get_str,
};
use opscope_model::kubernetes::audit::operator_of_user;
use opscope_model::kubernetes::kinds::plural_of_kind;
use opscope_model::semconv::*;
use opscope_model::timestamp::Nanos;
use opscope_model::timestamp::parse_rfc3339;

use super::tagged::Tagged;
use crate::correlator::detectors::resource_leak::watches;
use opscope_model::kubernetes::api_call::{ApiCall, api_call_from_span};

const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete"];
/// The container a kernel probe's metrics count, when the runtime names it.
const CONTAINER_ID: &str = "container.id";

/// A record reduced to what extraction needs, whatever its signal type.
struct Record<'a> {
    source: &'a Source<'a>,
    tagged: Tagged<'a>,
    target: Target<'a>,
    time: Nanos,
    /// Span start and duration; `None` for log records.
    span: Option<(Nanos, Duration)>,
    trace_id: &'a [u8],
    span_id: &'a [u8],
    /// A span's error status message.
    failed: Option<&'a str>,
}

/// The API call a record shows, if any: the names of the object it addresses (group,
/// kind, resource, namespace, name), its verb and its subresource.
#[derive(Debug, Clone, Copy)]
struct Target<'a> {
    object: [Option<&'a str>; 5],
    verb: Option<&'a str>,
    subresource: Option<&'a str>,
}

impl<'a> Target<'a> {
    /// As the tagger wrote it (`k8s.api.*`).
    fn tagged(tagged: &Tagged<'a>) -> Self {
        Self {
            object: tagged.api.map(as_str),
            verb: as_str(tagged.verb),
            subresource: as_str(tagged.subresource),
        }
    }

    /// As a span's HTTP attributes show it; what the path leaves out is unknown, as
    /// the tagger leaves it unwritten.
    fn called(call: &'a ApiCall) -> Self {
        let path = &call.path;
        let known = |name: &'a str| (!name.is_empty()).then_some(name);
        Self {
            object: [
                known(&path.group),
                None,
                known(&path.resource),
                known(&path.namespace),
                known(&path.name),
            ],
            verb: Some(call.verb),
            subresource: known(&path.subresource),
        }
    }
}

/// What the resource of a batch's records says of all of them, read once.
struct Source<'a> {
    /// The operator by the tagger's `operator.name`, for records with no actor.
    operator: OperatorRef,
    /// The operator pod.
    instance: &'a str,
}

impl<'a> Source<'a> {
    fn of(resource: Option<&'a Resource>) -> Self {
        let resource = resource.map_or(&[][..], |r| &r.attributes);
        Self {
            operator: OperatorRef {
                name: get_str(resource, OPERATOR_NAME).unwrap_or_default().into(),
                namespace: get_str(resource, K8S_NAMESPACE_NAME)
                    .unwrap_or_default()
                    .into(),
            },
            instance: get_str(resource, K8S_POD_NAME).unwrap_or_default(),
        }
    }
}

/// A batch whose tagged records stand for correlator events.
pub trait CorrelatorEvents {
    /// Appends the events of the batch's records to `out`.
    fn correlator_events(&self, out: &mut Vec<Event>);

    /// Whether the batch is records another correlator hands over (its resources say
    /// [`HANDED_OVER`]): taken whatever their age.
    fn handed_over(&self) -> bool;

    /// Where handed-over records were first journaled, as the hand-over marks them.
    fn handover_origin(&self) -> Option<Origin> {
        None
    }
}

/// The journal that first took a handed-over batch, and the batch's sequence number
/// there ([`HANDED_OVER_JOURNAL`], [`HANDED_OVER_SEQUENCE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub journal: u64,
    pub sequence: u64,
}

impl Origin {
    /// The origin a resource is marked with.
    pub fn of(resource: &Resource) -> Option<Self> {
        let journal = get_str(&resource.attributes, HANDED_OVER_JOURNAL)?;
        let sequence = get_i64(&resource.attributes, HANDED_OVER_SEQUENCE)?;
        Some(Self {
            journal: u64::from_str_radix(journal, 16).ok()?,
            sequence: u64::try_from(sequence).ok()?,
        })
    }
}

fn origin_of<'a>(mut resources: impl Iterator<Item = Option<&'a Resource>>) -> Option<Origin> {
    resources.find_map(|resource| Origin::of(resource?))
}

fn marked_handed_over<'a>(mut resources: impl Iterator<Item = Option<&'a Resource>>) -> bool {
    resources.any(|resource| {
        resource.is_some_and(|resource| get_bool(&resource.attributes, HANDED_OVER) == Some(true))
    })
}

impl CorrelatorEvents for ExportTraceServiceRequest {
    fn correlator_events(&self, out: &mut Vec<Event>) {
        from_traces(self, out);
    }

    fn handed_over(&self) -> bool {
        marked_handed_over(self.resource_spans.iter().map(|r| r.resource.as_ref()))
    }

    fn handover_origin(&self) -> Option<Origin> {
        origin_of(self.resource_spans.iter().map(|r| r.resource.as_ref()))
    }
}

impl CorrelatorEvents for ExportLogsServiceRequest {
    fn correlator_events(&self, out: &mut Vec<Event>) {
        from_logs(self, out);
    }

    fn handed_over(&self) -> bool {
        marked_handed_over(self.resource_logs.iter().map(|r| r.resource.as_ref()))
    }

    fn handover_origin(&self) -> Option<Origin> {
        origin_of(self.resource_logs.iter().map(|r| r.resource.as_ref()))
    }
}

impl CorrelatorEvents for ExportMetricsServiceRequest {
    fn correlator_events(&self, out: &mut Vec<Event>) {
        from_metrics(self, out);
    }

    fn handed_over(&self) -> bool {
        false
    }
}

pub fn from_traces(request: &ExportTraceServiceRequest, out: &mut Vec<Event>) {
    for resource_spans in &request.resource_spans {
        let source = Source::of(resource_spans.resource.as_ref());
        for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
            let failed = span
                .status
                .as_ref()
                .filter(|status| status.code == StatusCode::Error as i32)
                .map(|status| status.message.as_str());
            let duration = Duration::from_nanos(
                span.end_time_unix_nano
                    .saturating_sub(span.start_time_unix_nano),
            );
            let tagged = Tagged::read(&span.attributes);
            // A span tagged without the call's `k8s.api.*` attributes (the tagger's
            // `api_attributes: false`, or another tagger) shows it by its HTTP ones.
            let call = tagged
                .verb
                .is_none()
                .then(|| api_call_from_span(&span.attributes))
                .flatten();
            let record = Record {
                source: &source,
                target: call
                    .as_ref()
                    .map_or_else(|| Target::tagged(&tagged), Target::called),
                tagged,
                time: span.end_time_unix_nano.max(span.start_time_unix_nano),
                span: Some((span.start_time_unix_nano, duration)),
                trace_id: &span.trace_id,
                span_id: &span.span_id,
                failed,
            };
            record.events(out);
        }
    }
}

pub fn from_logs(request: &ExportLogsServiceRequest, out: &mut Vec<Event>) {
    for resource_logs in &request.resource_logs {
        let source = Source::of(resource_logs.resource.as_ref());
        for log in resource_logs.scope_logs.iter().flat_map(|s| &s.log_records) {
            let time = if log.time_unix_nano > 0 {
                log.time_unix_nano
            } else {
                log.observed_time_unix_nano
            };
            let tagged = Tagged::read(&log.attributes);
            let record = Record {
                source: &source,
                target: Target::tagged(&tagged),
                tagged,
                time,
                span: None,
                trace_id: &log.trace_id,
                span_id: &log.span_id,
                failed: None,
            };
            record.events(out);
        }
    }
}

pub fn from_metrics(request: &ExportMetricsServiceRequest, out: &mut Vec<Event>) {
    for resource_metrics in &request.resource_metrics {
        let resource = resource_metrics
            .resource
            .as_ref()
            .map_or(&[][..], |r| &r.attributes);
        let instance =
            get_str(resource, K8S_POD_NAME).or_else(|| get_str(resource, "service.instance.id"));
        let Some(instance) = instance else { continue };
        let operator = Source::of(resource_metrics.resource.as_ref()).operator;
        let container = get_str(resource, CONTAINER_ID)
            .or_else(|| get_str(resource, K8S_CONTAINER_NAME))
            .unwrap_or_default();
        let pod = PodContainer {
            operator: &operator,
            instance,
            container,
        };
        for metric in resource_metrics
            .scope_metrics
            .iter()
            .flat_map(|s| &s.metrics)
        {
            if watches(&metric.name) {
                gauge_events(metric, &operator, instance, out);
            } else if let Some(counter) = counter_of(&metric.name) {
                counter_events(metric, counter, &operator, instance, out);
            } else if let Some(measure) = api_traffic_of(&metric.name) {
                api_traffic_events(metric, measure, &pod, out);
            }
        }
    }
}

fn gauge_events(metric: &Metric, operator: &OperatorRef, instance: &str, out: &mut Vec<Event>) {
    let points = match &metric.data {
        Some(Data::Gauge(gauge)) => &gauge.data_points,
        Some(Data::Sum(sum)) => &sum.data_points,
        _ => return,
    };
    for point in points {
        let Some(value) = point_value(point) else {
            continue;
        };
        // One series per work queue, labelled `name` by controller-runtime, or
        // `controller` by newer versions.
        let queue =
            get_str(&point.attributes, "name").or_else(|| get_str(&point.attributes, "controller"));
        let name = match queue {
            Some(queue) if metric.name == "workqueue_depth" => {
                format!("workqueue_depth{{{queue}}}")
            }
            _ => metric.name.clone(),
        };
        out.push(Event::Gauge(GaugeEvent {
            time: point.time_unix_nano,
            operator: operator.clone(),
            instance: instance.to_string(),
            name,
            value,
        }));
    }
}

/// The counter a metric is, by its Prometheus name (an OTLP SDK may drop `_total`).
fn counter_of(metric: &str) -> Option<Counter> {
    match metric.strip_suffix("_total").unwrap_or(metric) {
        "controller_runtime_reconcile" => Some(Counter::Reconciles),
        "controller_runtime_reconcile_errors" => Some(Counter::ReconcileErrors),
        "workqueue_retries" => Some(Counter::Retries),
        "rest_client_requests" => Some(Counter::ApiRequests),
        _ => None,
    }
}

fn counter_events(
    metric: &Metric,
    counter: Counter,
    operator: &OperatorRef,
    instance: &str,
    out: &mut Vec<Event>,
) {
    let Some((cumulative, points)) = sum_points(metric) else {
        return;
    };
    for (point, value) in points {
        let labels = &point.attributes;
        // Work-queue series name their queue `name` (older controller-runtime) or
        // `controller` (newer, which keeps `name` too); the queue is the controller's.
        let controller = get_str(labels, "controller")
            .or_else(|| get_str(labels, "name"))
            .unwrap_or_default();
        let series: Vec<String> = labels
            .iter()
            .filter(|kv| kv.key != "controller" && kv.key != "name")
            .map(|kv| {
                format!(
                    "{}={}",
                    kv.key,
                    get_str(labels, &kv.key).unwrap_or_default()
                )
            })
            .collect();
        let event = CounterEvent {
            time: point.time_unix_nano,
            operator: operator.clone(),
            instance: instance.to_string(),
            counter,
            controller: controller.to_string(),
            series: series.join(","),
            value,
            cumulative,
        };
        let conflict = counter == Counter::ApiRequests
            && get_str(labels, "code").is_some_and(|code| code == "409");
        if conflict {
            out.push(Event::Counter(CounterEvent {
                counter: Counter::ApiConflicts,
                ..event.clone()
            }));
        }
        out.push(Event::Counter(event));
    }
}

/// Whose traffic a kernel probe's metric counts: one container of an operator pod.
struct PodContainer<'a> {
    operator: &'a OperatorRef,
    instance: &'a str,
    container: &'a str,
}

/// What a kernel probe's metric counts of the traffic to the API server, by its OTLP
/// name; a connection's outcome is read from each point.
fn api_traffic_of(metric: &str) -> Option<ApiTraffic> {
    match metric {
        "opscope.ebpf.api_server.send_calls" => Some(ApiTraffic::SendCalls),
        "opscope.ebpf.api_server.sent_bytes" => Some(ApiTraffic::SentBytes),
        "opscope.ebpf.api_server.connections" => {
            Some(ApiTraffic::Connections(ConnectionOutcome::Established))
        }
        _ => None,
    }
}

fn api_traffic_events(
    metric: &Metric,
    measure: ApiTraffic,
    pod: &PodContainer<'_>,
    out: &mut Vec<Event>,
) {
    let Some((cumulative, points)) = sum_points(metric) else {
        return;
    };
    for (point, value) in points {
        let measure = match measure {
            ApiTraffic::Connections(_) => {
                let outcome =
                    get_str(&point.attributes, "outcome").and_then(ConnectionOutcome::of_attribute);
                let Some(outcome) = outcome else { continue };
                ApiTraffic::Connections(outcome)
            }
            other => other,
        };
        out.push(Event::ApiTraffic(ApiTrafficEvent {
            time: point.time_unix_nano,
            operator: pod.operator.clone(),
            instance: pod.instance.to_string(),
            container: pod.container.to_string(),
            measure,
            start: point.start_time_unix_nano,
            value,
            cumulative,
        }));
    }
}

/// The valued points of a sum, and whether they are running totals (anything but
/// delta); `None` for another kind of metric.
fn sum_points(metric: &Metric) -> Option<(bool, impl Iterator<Item = (&NumberDataPoint, f64)>)> {
    let Some(Data::Sum(sum)) = &metric.data else {
        return None;
    };
    let cumulative = sum.aggregation_temporality != AggregationTemporality::Delta as i32;
    let points = sum
        .data_points
        .iter()
        .filter_map(|point| Some((point, point_value(point)?)));
    Some((cumulative, points))
}

fn point_value(point: &NumberDataPoint) -> Option<f64> {
    match point.value? {
        number_data_point::Value::AsDouble(value) => Some(value),
        number_data_point::Value::AsInt(value) => Some(value as f64),
    }
}

/// The operator that made an API call: a service account
/// `system:serviceaccount:<namespace>:<name>` is that operator, any other user is
/// itself.
fn actor_operator(actor: &str) -> OperatorRef {
    match operator_of_user(actor) {
        Some((namespace, name)) => OperatorRef {
            name: name.into(),
            namespace: namespace.into(),
        },
        None => OperatorRef {
            name: actor.into(),
            namespace: Name::default(),
        },
    }
}

/// An object from the five values of a record's object or API attributes.
fn object(fields: &[Option<&str>; 5]) -> ObjectRef {
    let [group, kind, resource, namespace, name] =
        fields.map(|value| Name::from(value.unwrap_or_default()));
    ObjectRef {
        group,
        kind,
        resource,
        namespace,
        name,
    }
}

/// Whether the values name an object: a name, and a kind or a resource (as
/// [`ObjectRef::is_known`] says of the object they make).
fn names_object(fields: &[Option<&str>; 5]) -> bool {
    let [_, kind, resource, _, name] = fields.map(|value| value.is_some());
    name && (kind || resource)
}

impl Record<'_> {
    fn events(&self, out: &mut Vec<Event>) {
        if self.time == 0 {
            // A record with no time says nothing about rates or ages.
            return;
        }
        let tagged = &self.tagged;
        let reconcile_id = as_str(tagged.reconcile_id).unwrap_or_default();
        let reconciles = !reconcile_id.is_empty() || tagged.record() == Some(RECORD_RECONCILE);
        let reconciled_fields = tagged.object.map(as_str);
        let reconciled = names_object(&reconciled_fields);
        let targeted = names_object(&self.target.object);
        // The object a write or a state is about: the API call's, else the reconciled one.
        let subject_known = targeted || reconciled;
        let subject_fields = if targeted {
            &self.target.object
        } else {
            &reconciled_fields
        };
        // What the record says, each with whether it is about the subject: at most one
        // event of each kind, kept on the stack rather than in a vector per record.
        let about_subject = subject_known && !is_heartbeat(subject_fields);
        let said = [
            (reconciles && reconciled).then(|| {
                (
                    false,
                    ObjectEventKind::Reconcile(self.reconcile(reconcile_id)),
                )
            }),
            about_subject
                .then(|| self.write(reconcile_id))
                .flatten()
                .map(|write| (true, ObjectEventKind::Write(write))),
            about_subject
                .then(|| self.state())
                .flatten()
                .map(|state| (true, ObjectEventKind::State(state))),
            (about_subject && as_bool(tagged.gone) == Some(true))
                .then_some((true, ObjectEventKind::Gone)),
        ];
        if said.iter().all(Option::is_none) {
            return;
        }
        // The objects, the operator and the evidence reference are only made for
        // records that say something.
        let mut reconciled = reconciled.then(|| object(&reconciled_fields));
        let mut subject = targeted.then(|| object(&self.target.object));
        let mut operator = self.operator();
        let place = self.place();
        let mut said = said.into_iter().flatten().peekable();
        while let Some((about_subject, kind)) = said.next() {
            let object = match (about_subject, subject.is_some(), reconciled.is_some()) {
                (true, true, _) | (_, true, false) => &mut subject,
                (_, _, true) => &mut reconciled,
                (_, false, false) => continue,
            };
            // The last event takes the names, the others copy them.
            let last = said.peek().is_none();
            let (object, operator) = if last {
                (object.take(), std::mem::take(&mut operator))
            } else {
                (object.clone(), operator.clone())
            };
            let Some(object) = object else {
                continue;
            };
            out.push(Event::Object(ObjectEvent {
                time: self.time,
                object,
                operator,
                kind,
                place: place.clone(),
            }));
        }
    }

    /// Who made the call when the record says (see [`actor_operator`]), else the
    /// operator the resource names.
    fn operator(&self) -> OperatorRef {
        match as_str(self.tagged.actor) {
            Some(actor) => actor_operator(actor),
            None => self.source.operator.clone(),
        }
    }

    /// Where the record is: its log position, else its trace and span ids. Ids of
    /// other lengths than OTLP's are written out at once, as the place's source.
    fn place(&self) -> RecordPlace {
        if let Some(source) = as_str(self.tagged.log_source) {
            return RecordPlace {
                source: Some(Arc::from(source)),
                ..RecordPlace::default()
            };
        }
        if !is_id(self.trace_id) {
            return RecordPlace::default();
        }
        let span = is_id(self.span_id).then_some(self.span_id);
        let trace_id = <[u8; 16]>::try_from(self.trace_id).ok();
        let span_id = span.map(<[u8; 8]>::try_from).transpose().ok();
        match (trace_id, span_id) {
            (Some(trace_id), Some(span_id)) => RecordPlace {
                source: None,
                trace_id: Some(trace_id),
                span_id,
            },
            _ => {
                let mut source = String::new();
                push_ids(&mut source, self.trace_id, span);
                RecordPlace {
                    source: Some(Arc::from(source)),
                    ..RecordPlace::default()
                }
            }
        }
    }

    fn reconcile(&self, reconcile_id: &str) -> Reconcile {
        let tagged = &self.tagged;
        let root = tagged.record() == Some(RECORD_RECONCILE);
        // Only the reconcile's own span says how it ended: a child span failing (a GET
        // answered 404 before a create) does not fail the reconcile.
        let failed = self.failed.filter(|_| root);
        let error = as_str(tagged.error).or(failed.filter(|m| !m.is_empty()));
        let outcome = match as_str(tagged.result) {
            Some("error") => Outcome::Error(error.unwrap_or("error").to_string()),
            Some("requeue") => Outcome::Requeue,
            Some("requeue_after") => {
                let seconds = as_f64(tagged.requeue_after).unwrap_or(0.0).max(0.0);
                Outcome::RequeueAfter(Duration::from_secs_f64(seconds.min(1e9)))
            }
            Some("ok") => Outcome::Ok,
            _ if failed.is_some() => Outcome::Error(error.unwrap_or("error").to_string()),
            _ if self.span.is_some() && root => Outcome::Ok,
            _ => Outcome::Unknown,
        };
        let (start, duration) = match self.span {
            Some((start, duration)) if root => (Some(start), Some(duration)),
            _ => (None, None),
        };
        Reconcile {
            controller: as_str(tagged.controller).unwrap_or_default().into(),
            instance: self.source.instance.into(),
            reconcile_id: reconcile_id.to_string(),
            trace_id: if is_id(self.trace_id) {
                hex(self.trace_id)
            } else {
                String::new()
            },
            start,
            duration,
            outcome,
            generation: as_i64(tagged.generation),
        }
    }

    fn write(&self, reconcile_id: &str) -> Option<Write> {
        let tagged = &self.tagged;
        let verb = self.target.verb?;
        if !WRITE_VERBS.contains(&verb) {
            return None;
        }
        let code = as_i64(tagged.code).or_else(|| as_i64(tagged.code_old));
        Some(Write {
            actor: as_str(tagged.actor).unwrap_or_default().into(),
            instance: self.source.instance.into(),
            verb: verb.into(),
            subresource: self.target.subresource.unwrap_or_default().into(),
            code: code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
            reconcile_id: reconcile_id.to_string(),
            generation: as_i64(tagged.generation),
            resource_version: as_str(tagged.resource_version).map(str::to_string),
            status_digest: as_strings(tagged.status_digest),
        })
    }

    /// The object's state, from an audit body or from an instrumented operator's
    /// own `k8s.object.deletion_timestamp` / `finalizers` / `observed_generation`.
    fn state(&self) -> Option<ObjectState> {
        let tagged = &self.tagged;
        if !tagged.shows_state() {
            return None;
        }
        Some(ObjectState {
            generation: as_i64(tagged.generation),
            observed_generation: as_i64(tagged.observed_generation),
            resource_version: as_str(tagged.resource_version).map(str::to_string),
            deletion_timestamp: as_str(tagged.deletion_timestamp).and_then(parse_rfc3339),
            finalizers: tagged.finalizers.map(as_strings),
        })
    }
}

/// Leases (leader election renews one every few seconds) and Events are written
/// on a schedule by design: their writes are not an object's reconciles.
fn is_heartbeat(fields: &[Option<&str>; 5]) -> bool {
    let [_, kind, resource, _, _] = *fields;
    let resource = match resource {
        Some(resource) => resource.to_ascii_lowercase(),
        None => plural_of_kind(kind.unwrap_or_default()),
    };
    resource == "leases" || resource == "events"
}

/// A trace or span id that is set (not empty, not all zeros).
fn is_id(bytes: &[u8]) -> bool {
    bytes.iter().any(|b| *b != 0)
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

#[cfg(test)]
#[path = "extract_tests/mod.rs"]
mod tests;
