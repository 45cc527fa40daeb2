//! Spans: reconcile roots and the spans of their traces, API calls of client and
//! API-server spans, and the 409s they report.

// Looked up once per span of a batch: foldhash, seeded per set.
use foldhash::HashSet;
use opscope_model::attributes::{get_str, insert, set_str, string_value};
use opscope_model::kubernetes::api_call::{ApiCall, api_call_from_span};
use opscope_model::semconv::{
    CONTROLLER, OBJECT_GROUP, OBJECT_KIND, OBJECT_NAME, OBJECT_NAMESPACE, OPSCOPE_RECORD,
    RECONCILE_ERROR, RECONCILE_ID, RECONCILE_RESULT, RECORD_RECONCILE,
};
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{KeyValue, any_value::Value};
use opscope_proto::otlp::trace::v1::Span;
use opscope_proto::otlp::trace::v1::status::StatusCode;

use super::{
    API_CALL_ATTRIBUTES, CONTEXT_ATTRIBUTES, OperatorTagger, write_api_call, write_conflict,
    write_context,
};
use crate::tagger::conflict::find_conflict;
use crate::tagger::formats::LogFacts;
use crate::tagger::otlp_fields::facts_from_attributes;
use crate::tagger::trace_map::ReconcileContext;

impl OperatorTagger {
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
}

pub(super) fn spans(request: &ExportTraceServiceRequest) -> impl Iterator<Item = &Span> {
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
}

pub(super) fn spans_mut(
    request: &mut ExportTraceServiceRequest,
) -> impl Iterator<Item = &mut Span> {
    request
        .resource_spans
        .iter_mut()
        .flat_map(|r| &mut r.scope_spans)
        .flat_map(|s| &mut s.spans)
}

/// For each span, whether its parent is a root of its trace in the batch: a root
/// nested in another (kube-rs's `reconcile` function span inside its `reconciling
/// object`) is part of that reconcile, not one of its own.
pub(super) fn nested_roots(
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
pub(super) fn reconcile_root(span: &Span) -> Option<ReconcileContext> {
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
    pub(super) fn found_or<'a>(
        found: &'a Option<String>,
        attributes: &'a [KeyValue],
        key: &str,
    ) -> &'a str {
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

pub(super) fn write_span_outcome(span: &mut Span) {
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
pub(super) fn traces_with_conflicting_calls(
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
pub(super) fn tag_api_call(
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
