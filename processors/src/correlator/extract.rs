//! Correlator events from tagged records: reads only the attributes the tagger
//! writes (see `semconv`), so records tagged by another opscope correlate the same.

use std::time::Duration;

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::KeyValue;
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, metric::Data, number_data_point,
};
use opscope_proto::otlp::trace::v1::status::StatusCode;

use super::events::{
    Counter, CounterEvent, Event, GaugeEvent, Nanos, ObjectEvent, ObjectEventKind, ObjectRef,
    ObjectState, OperatorRef, Outcome, Reconcile, Write,
};
use crate::attributes::{get_bool, get_f64, get_i64, get_str, get_strings};
use crate::semconv::*;
use crate::tagger::audit::operator_of_user;
use crate::timestamp::parse_rfc3339;

use super::leak_detector::watches;

const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete"];

/// A record reduced to what extraction needs, whatever its signal type.
struct Record<'a> {
    resource: &'a [KeyValue],
    attributes: &'a [KeyValue],
    time: Nanos,
    /// Span start and duration; `None` for log records.
    span: Option<(Nanos, Duration)>,
    trace_id: &'a [u8],
    span_id: &'a [u8],
    /// A span's error status message.
    failed: Option<&'a str>,
}

pub fn from_traces(request: &ExportTraceServiceRequest, out: &mut Vec<Event>) {
    for resource_spans in &request.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map_or(&[][..], |r| &r.attributes);
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
            let record = Record {
                resource,
                attributes: &span.attributes,
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
        let resource = resource_logs
            .resource
            .as_ref()
            .map_or(&[][..], |r| &r.attributes);
        for log in resource_logs.scope_logs.iter().flat_map(|s| &s.log_records) {
            let time = if log.time_unix_nano > 0 {
                log.time_unix_nano
            } else {
                log.observed_time_unix_nano
            };
            let record = Record {
                resource,
                attributes: &log.attributes,
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
        let operator = operator_of(resource, &[]);
        for metric in resource_metrics
            .scope_metrics
            .iter()
            .flat_map(|s| &s.metrics)
        {
            if watches(&metric.name) {
                gauge_events(metric, &operator, instance, out);
            } else if let Some(counter) = counter_of(&metric.name) {
                counter_events(metric, counter, &operator, instance, out);
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
    let Some(Data::Sum(sum)) = &metric.data else {
        return;
    };
    let cumulative = sum.aggregation_temporality != AggregationTemporality::Delta as i32;
    for point in &sum.data_points {
        let Some(value) = point_value(point) else {
            continue;
        };
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

fn point_value(point: &NumberDataPoint) -> Option<f64> {
    match point.value? {
        number_data_point::Value::AsDouble(value) => Some(value),
        number_data_point::Value::AsInt(value) => Some(value as f64),
    }
}

/// The operator: who made an API call when the record says (a service account
/// `system:serviceaccount:<namespace>:<name>` is that operator, any other user is
/// itself), else the tagger's `operator.name`.
fn operator_of(resource: &[KeyValue], attributes: &[KeyValue]) -> OperatorRef {
    if let Some(actor) = get_str(attributes, API_ACTOR) {
        return match operator_of_user(actor) {
            Some((namespace, name)) => OperatorRef { name, namespace },
            None => OperatorRef {
                name: actor.to_string(),
                namespace: String::new(),
            },
        };
    }
    let name = get_str(resource, OPERATOR_NAME).unwrap_or_default();
    let namespace = get_str(resource, K8S_NAMESPACE_NAME).unwrap_or_default();
    OperatorRef {
        name: name.to_string(),
        namespace: namespace.to_string(),
    }
}

fn object(attributes: &[KeyValue], keys: [&str; 5]) -> ObjectRef {
    let field = |key| get_str(attributes, key).unwrap_or_default().to_string();
    let [group, kind, resource, namespace, name] = keys;
    ObjectRef {
        group: field(group),
        kind: field(kind),
        resource: field(resource),
        namespace: field(namespace),
        name: field(name),
    }
}

impl Record<'_> {
    fn events(&self, out: &mut Vec<Event>) {
        if self.time == 0 {
            // A record with no time says nothing about rates or ages.
            return;
        }
        let attributes = self.attributes;
        let reconciled = object(
            attributes,
            [
                OBJECT_GROUP,
                OBJECT_KIND,
                OBJECT_RESOURCE,
                OBJECT_NAMESPACE,
                OBJECT_NAME,
            ],
        );
        let target = object(
            attributes,
            [API_GROUP, API_KIND, API_RESOURCE, API_NAMESPACE, API_NAME],
        );
        // What the record says, first; the operator and the evidence reference are
        // only worked out for records that say something.
        let mut said: Vec<(&ObjectRef, ObjectEventKind)> = Vec::new();
        let reconcile_id = get_str(attributes, RECONCILE_ID).unwrap_or_default();
        if !reconcile_id.is_empty() || get_str(attributes, OPSCOPE_RECORD) == Some(RECORD_RECONCILE)
        {
            said.push((
                &reconciled,
                ObjectEventKind::Reconcile(self.reconcile(reconcile_id)),
            ));
        }
        let subject = if target.is_known() {
            &target
        } else {
            &reconciled
        };
        if !is_heartbeat(subject) {
            if let Some(write) = self.write(reconcile_id) {
                said.push((subject, ObjectEventKind::Write(write)));
            }
            if let Some(state) = self.state() {
                said.push((subject, ObjectEventKind::State(state)));
            }
            if get_bool(attributes, OBJECT_GONE) == Some(true) {
                said.push((subject, ObjectEventKind::Gone));
            }
        }
        said.retain(|(object, _)| object.is_known());
        if said.is_empty() {
            return;
        }
        let operator = operator_of(self.resource, attributes);
        let evidence = self.evidence();
        for (object, kind) in said {
            out.push(Event::Object(ObjectEvent {
                time: self.time,
                object: object.clone(),
                operator: operator.clone(),
                kind,
                evidence: evidence.clone(),
            }));
        }
    }

    /// Where the record is (`path:line`, or `trace <id> span <id>`), and the
    /// reconcile it belongs to (`reconcile <id>`); see [`evidence_reference`].
    ///
    /// [`evidence_reference`]: crate::correlator::signal::evidence_reference
    fn evidence(&self) -> Option<String> {
        let location = get_str(self.attributes, LOG_SOURCE)
            .map(str::to_string)
            .or_else(|| {
                is_id(self.trace_id).then(|| match is_id(self.span_id) {
                    true => format!("trace {} span {}", hex(self.trace_id), hex(self.span_id)),
                    false => format!("trace {}", hex(self.trace_id)),
                })
            });
        let reconcile = get_str(self.attributes, RECONCILE_ID).map(|id| format!("reconcile {id}"));
        match (location, reconcile) {
            (Some(location), Some(reconcile)) => Some(format!("{location} {reconcile}")),
            (location, reconcile) => location.or(reconcile),
        }
    }

    fn reconcile(&self, reconcile_id: &str) -> Reconcile {
        let attributes = self.attributes;
        let root = get_str(attributes, OPSCOPE_RECORD) == Some(RECORD_RECONCILE);
        // Only the reconcile's own span says how it ended: a child span failing (a GET
        // answered 404 before a create) does not fail the reconcile.
        let failed = self.failed.filter(|_| root);
        let error = get_str(attributes, RECONCILE_ERROR).or(failed.filter(|m| !m.is_empty()));
        let outcome = match get_str(attributes, RECONCILE_RESULT) {
            Some("error") => Outcome::Error(error.unwrap_or("error").to_string()),
            Some("requeue") => Outcome::Requeue,
            Some("requeue_after") => {
                let seconds = get_f64(attributes, RECONCILE_REQUEUE_AFTER)
                    .unwrap_or(0.0)
                    .max(0.0);
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
            controller: get_str(attributes, CONTROLLER)
                .unwrap_or_default()
                .to_string(),
            instance: get_str(self.resource, K8S_POD_NAME)
                .unwrap_or_default()
                .to_string(),
            reconcile_id: reconcile_id.to_string(),
            trace_id: if self.trace_id.iter().any(|b| *b != 0) {
                hex(self.trace_id)
            } else {
                String::new()
            },
            start,
            duration,
            outcome,
            generation: get_i64(attributes, OBJECT_GENERATION),
        }
    }

    fn write(&self, reconcile_id: &str) -> Option<Write> {
        let attributes = self.attributes;
        let verb = get_str(attributes, API_VERB)?;
        if !WRITE_VERBS.contains(&verb) {
            return None;
        }
        let code = get_i64(attributes, HTTP_RESPONSE_STATUS_CODE)
            .or_else(|| get_i64(attributes, HTTP_STATUS_CODE_OLD));
        Some(Write {
            actor: get_str(attributes, API_ACTOR)
                .unwrap_or_default()
                .to_string(),
            instance: get_str(self.resource, K8S_POD_NAME)
                .unwrap_or_default()
                .to_string(),
            verb: verb.to_string(),
            subresource: get_str(attributes, API_SUBRESOURCE)
                .unwrap_or_default()
                .to_string(),
            code: code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
            reconcile_id: reconcile_id.to_string(),
            generation: get_i64(attributes, OBJECT_GENERATION),
            resource_version: get_str(attributes, OBJECT_RESOURCE_VERSION).map(str::to_string),
            status_digest: get_strings(attributes, OBJECT_STATUS_DIGEST),
        })
    }

    /// The object's state, from an audit body or from an instrumented operator's
    /// own `k8s.object.deletion_timestamp` / `finalizers` / `observed_generation`.
    fn state(&self) -> Option<ObjectState> {
        let attributes = self.attributes;
        let shows_state = get_str(attributes, OPSCOPE_RECORD) == Some(RECORD_OBJECT_STATE)
            || attributes.iter().any(|kv| {
                [
                    OBJECT_DELETION_TIMESTAMP,
                    OBJECT_FINALIZERS,
                    OBJECT_OBSERVED_GENERATION,
                ]
                .contains(&kv.key.as_str())
            });
        if !shows_state {
            return None;
        }
        let finalizers = attributes
            .iter()
            .any(|kv| kv.key == OBJECT_FINALIZERS)
            .then(|| get_strings(attributes, OBJECT_FINALIZERS));
        Some(ObjectState {
            generation: get_i64(attributes, OBJECT_GENERATION),
            observed_generation: get_i64(attributes, OBJECT_OBSERVED_GENERATION),
            resource_version: get_str(attributes, OBJECT_RESOURCE_VERSION).map(str::to_string),
            deletion_timestamp: get_str(attributes, OBJECT_DELETION_TIMESTAMP)
                .and_then(parse_rfc3339),
            finalizers,
        })
    }
}

/// Leases (leader election renews one every few seconds) and Events are written
/// on a schedule by design: their writes are not an object's reconciles.
fn is_heartbeat(object: &ObjectRef) -> bool {
    let resource = object.key().resource;
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
#[path = "extract_tests.rs"]
mod tests;
