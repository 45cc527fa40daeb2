//! Routing by object: each span or log record goes to the gateway that owns the
//! object it is about (`k8s.object.*`, as the tagger writes them), so that one
//! correlator sees all of an object's evidence; a record that names no object goes
//! by the operator pod that sent it. The object is keyed as the correlator keys it
//! (namespace, lowercase plural resource, name), so a record that names the Kind and
//! one that names the resource reach the same gateway.

use opscope_model::attributes::get_str;
use opscope_model::kubernetes::ObjectRef;
use opscope_model::semconv::{
    K8S_NAMESPACE_NAME, K8S_POD_NAME, OBJECT_KIND, OBJECT_NAME, OBJECT_NAMESPACE, OBJECT_RESOURCE,
};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::KeyValue;
use opscope_proto::otlp::resource::v1::Resource;

use super::ring::{Ring, key_hash};

/// The routing key hash of a record with these attributes, sent by `resource`.
pub fn record_key(attributes: &[KeyValue], resource: Option<&Resource>) -> u64 {
    let text = |key| get_str(attributes, key).unwrap_or_default();
    let object = ObjectRef {
        kind: text(OBJECT_KIND).into(),
        resource: text(OBJECT_RESOURCE).into(),
        namespace: text(OBJECT_NAMESPACE).into(),
        name: text(OBJECT_NAME).into(),
        ..ObjectRef::default()
    };
    if object.is_known() {
        let key = object.key();
        return key_hash(["object", &key.namespace, &key.resource, &key.name]);
    }
    let resource = resource.map_or(&[][..], |resource| &resource.attributes);
    let pod = |key| get_str(resource, key).unwrap_or_default();
    key_hash(["pod", pod(K8S_NAMESPACE_NAME), pod(K8S_POD_NAME)])
}

/// The request cut into one request per gateway of `ring` (by index; empty for a
/// gateway that owns none of its spans), each span keeping its resource and scope.
pub fn partition_traces(
    request: ExportTraceServiceRequest,
    ring: &Ring,
) -> Vec<ExportTraceServiceRequest> {
    split(
        request.resource_spans,
        ring,
        |resource| std::mem::take(&mut resource.scope_spans),
        |scope| std::mem::take(&mut scope.spans),
        |resource, span| record_key(&span.attributes, resource.resource.as_ref()),
        |resource, scopes| resource.scope_spans = scopes,
        |scope, spans| scope.spans = spans,
    )
    .into_iter()
    .map(|resource_spans| ExportTraceServiceRequest { resource_spans })
    .collect()
}

/// Like [`partition_traces`], for log records.
pub fn partition_logs(
    request: ExportLogsServiceRequest,
    ring: &Ring,
) -> Vec<ExportLogsServiceRequest> {
    split(
        request.resource_logs,
        ring,
        |resource| std::mem::take(&mut resource.scope_logs),
        |scope| std::mem::take(&mut scope.log_records),
        |resource, record| record_key(&record.attributes, resource.resource.as_ref()),
        |resource, scopes| resource.scope_logs = scopes,
        |scope, records| scope.log_records = records,
    )
    .into_iter()
    .map(|resource_logs| ExportLogsServiceRequest { resource_logs })
    .collect()
}

/// Cuts resource containers (`R`) of scope containers (`S`) of records (`I`) into one
/// list per gateway. Headers (resource, scope) are copied into each part that has
/// records under them; the records are moved, in their order.
#[allow(clippy::too_many_arguments)]
fn split<R: Clone, S: Clone, I>(
    resources: Vec<R>,
    ring: &Ring,
    take_scopes: impl Fn(&mut R) -> Vec<S>,
    take_items: impl Fn(&mut S) -> Vec<I>,
    key_of: impl Fn(&R, &I) -> u64,
    put_scopes: impl Fn(&mut R, Vec<S>),
    put_items: impl Fn(&mut S, Vec<I>),
) -> Vec<Vec<R>> {
    let gateways = ring.len().max(1);
    let mut parts: Vec<Vec<R>> = (0..gateways).map(|_| Vec::new()).collect();
    for mut resource in resources {
        let scopes = take_scopes(&mut resource);
        let mut scopes_of: Vec<Vec<S>> = (0..gateways).map(|_| Vec::new()).collect();
        for mut scope in scopes {
            let items = take_items(&mut scope);
            let mut items_of: Vec<Vec<I>> = (0..gateways).map(|_| Vec::new()).collect();
            for item in items {
                let owner = ring.owner(key_of(&resource, &item)).unwrap_or(0);
                if let Some(owned) = items_of.get_mut(owner) {
                    owned.push(item);
                }
            }
            for (owner, items) in items_of.into_iter().enumerate() {
                if items.is_empty() {
                    continue;
                }
                let mut part = scope.clone();
                put_items(&mut part, items);
                if let Some(scopes) = scopes_of.get_mut(owner) {
                    scopes.push(part);
                }
            }
        }
        for (owner, scopes) in scopes_of.into_iter().enumerate() {
            if scopes.is_empty() {
                continue;
            }
            let mut part = resource.clone();
            put_scopes(&mut part, scopes);
            if let Some(resources) = parts.get_mut(owner) {
                resources.push(part);
            }
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use opscope_model::attributes::set_str;
    use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};

    use super::*;

    fn ring() -> Ring {
        Ring::new(&["10.0.0.5:4317", "10.0.0.6:4317", "10.0.0.7:4317"])
    }

    fn span(kind: &str, resource: &str, name: &str) -> Span {
        let mut attributes = Vec::new();
        if !kind.is_empty() {
            set_str(&mut attributes, OBJECT_KIND, kind);
        }
        if !resource.is_empty() {
            set_str(&mut attributes, OBJECT_RESOURCE, resource);
        }
        if !name.is_empty() {
            set_str(&mut attributes, OBJECT_NAMESPACE, "shop");
            set_str(&mut attributes, OBJECT_NAME, name);
        }
        Span {
            name: format!("{kind}{resource}/{name}"),
            attributes,
            ..Span::default()
        }
    }

    fn pod(name: &str) -> Resource {
        let mut attributes = Vec::new();
        set_str(&mut attributes, K8S_NAMESPACE_NAME, "operators");
        set_str(&mut attributes, K8S_POD_NAME, name);
        Resource {
            attributes,
            ..Resource::default()
        }
    }

    #[test]
    fn a_kind_and_its_resource_route_alike_and_object_less_records_go_by_pod() {
        let by_kind = record_key(&span("Widget", "", "w1").attributes, None);
        let by_resource = record_key(&span("", "widgets", "w1").attributes, None);
        assert_eq!(by_kind, by_resource);
        assert_ne!(
            by_kind,
            record_key(&span("Widget", "", "w2").attributes, None)
        );
        let pod_a = pod("widget-operator-0");
        let unnamed = span("", "", "");
        assert_eq!(
            record_key(&unnamed.attributes, Some(&pod_a)),
            record_key(&[], Some(&pod_a))
        );
        assert_ne!(
            record_key(&unnamed.attributes, Some(&pod_a)),
            record_key(&unnamed.attributes, Some(&pod("widget-operator-1")))
        );
    }

    #[test]
    fn every_span_reaches_its_owner_once_with_its_resource_and_scope() {
        let names: Vec<String> = (0..60).map(|i| format!("w{i}")).collect();
        let spans: Vec<Span> = names
            .iter()
            .map(|name| span("Widget", "", name))
            .chain([span("", "", "")])
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(pod("widget-operator-0")),
                scope_spans: vec![ScopeSpans {
                    spans,
                    schema_url: "scope-schema".into(),
                    ..ScopeSpans::default()
                }],
                schema_url: "resource-schema".into(),
            }],
        };
        let ring = ring();
        let parts = partition_traces(request, &ring);
        assert_eq!(parts.len(), 3);
        let mut seen = 0;
        for (owner, part) in parts.iter().enumerate() {
            assert!(
                !part.resource_spans.is_empty(),
                "60 objects reach every gateway"
            );
            for resource_spans in &part.resource_spans {
                assert_eq!(resource_spans.resource, Some(pod("widget-operator-0")));
                assert_eq!(resource_spans.schema_url, "resource-schema");
                for scope_spans in &resource_spans.scope_spans {
                    assert_eq!(scope_spans.schema_url, "scope-schema");
                    for span in &scope_spans.spans {
                        let key = record_key(&span.attributes, resource_spans.resource.as_ref());
                        assert_eq!(ring.owner(key), Some(owner), "{}", span.name);
                        seen += 1;
                    }
                }
            }
        }
        assert_eq!(seen, 61);
    }

    #[test]
    fn log_records_are_cut_the_same_way() {
        let record = |name: &str| LogRecord {
            attributes: span("Widget", "", name).attributes,
            ..LogRecord::default()
        };
        let request = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(pod("widget-operator-0")),
                scope_logs: vec![ScopeLogs {
                    log_records: (0..30).map(|i| record(&format!("w{i}"))).collect(),
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            }],
        };
        let ring = ring();
        let total: usize = partition_logs(request.clone(), &ring)
            .iter()
            .flat_map(|part| &part.resource_logs)
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum();
        assert_eq!(total, 30);
        let one = Ring::new(&["10.0.0.5:4317"]);
        assert_eq!(partition_logs(request.clone(), &one), vec![request]);
    }
}
