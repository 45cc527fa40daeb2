//! Routing by object: each span or log record goes to the gateway that owns the
//! object it is about (`k8s.object.*`, as the tagger writes them), so that one
//! correlator sees all of an object's evidence; a record that names no object goes
//! by the operator pod that sent it. The object is keyed as the correlator keys it
//! (namespace, lowercase plural resource, name), so a record that names the Kind and
//! one that names the resource reach the same gateway.

use opscope_model::Telemetry;
use opscope_model::attributes::get_str;
use opscope_model::kubernetes::{ObjectKey, ObjectRef};
use opscope_model::semconv::{
    K8S_NAMESPACE_NAME, K8S_POD_NAME, OBJECT_KIND, OBJECT_NAME, OBJECT_NAMESPACE, OBJECT_RESOURCE,
};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::common::v1::{InstrumentationScope, KeyValue};
use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opscope_proto::otlp::resource::v1::Resource;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
use opscope_proto::otlp_encode::{EncodeOnce, Fields, Pass};

use super::ring::{Ring, key_hash};
use crate::batch::Encoded;

/// The routing key hash of a record with these attributes, sent by `resource`.
pub fn record_key(attributes: &[KeyValue], resource: Option<&Resource>) -> u64 {
    let text = |key| get_str(attributes, key).unwrap_or_default();
    let resource = resource.map_or(&[][..], |resource| &resource.attributes);
    let pod = |key| get_str(resource, key).unwrap_or_default();
    key_of(
        [
            text(OBJECT_KIND),
            text(OBJECT_RESOURCE),
            text(OBJECT_NAMESPACE),
            text(OBJECT_NAME),
        ],
        [pod(K8S_NAMESPACE_NAME), pod(K8S_POD_NAME)],
    )
}

/// The routing key hash of a record naming `[kind, resource, namespace, name]`, sent
/// by the pod `[namespace, name]`: its object's, or its pod's when it names none.
pub(crate) fn key_of(object: [&str; 4], pod: [&str; 2]) -> u64 {
    let [kind, resource, namespace, name] = object;
    let object = ObjectRef {
        kind: kind.into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..ObjectRef::default()
    };
    if object.is_known() {
        return object_key_hash(&object.key());
    }
    let [pod_namespace, pod_name] = pod;
    key_hash(["pod", pod_namespace, pod_name])
}

/// The routing key hash of an object, as the correlator keys it.
pub fn object_key_hash(key: &ObjectKey) -> u64 {
    key_hash(["object", &key.namespace, &key.resource, &key.name])
}

/// The request encoded as one request per gateway of `ring` (by index; empty for a
/// gateway that owns none of its spans), each span under its own resource and scope.
pub fn encode_traces(
    request: &ExportTraceServiceRequest,
    ring: &Ring,
) -> Vec<Encoded<ExportTraceServiceRequest>> {
    encode_parts(&request.resource_spans, ring, &|_| true)
}

/// Like [`encode_traces`], for log records.
pub fn encode_logs(
    request: &ExportLogsServiceRequest,
    ring: &Ring,
) -> Vec<Encoded<ExportLogsServiceRequest>> {
    encode_parts(&request.resource_logs, ring, &|_| true)
}

/// A resource container of OTLP (`ResourceSpans`, `ResourceLogs`): a resource, scope
/// containers, a schema URL, in fields 1, 2 and 3 of both.
pub trait ResourceContainer: 'static {
    type Scope: ScopeContainer;
    fn resource(&self) -> Option<&Resource>;
    fn scopes(&self) -> &[Self::Scope];
    fn schema_url(&self) -> &str;
}

/// A scope container (`ScopeSpans`, `ScopeLogs`): a scope, records, a schema URL, in
/// fields 1, 2 and 3 of both.
pub trait ScopeContainer: 'static {
    type Record: Fields;
    fn scope(&self) -> Option<&InstrumentationScope>;
    fn records(&self) -> &[Self::Record];
    fn schema_url(&self) -> &str;
    fn attributes(record: &Self::Record) -> &[KeyValue];
}

impl ResourceContainer for ResourceSpans {
    type Scope = ScopeSpans;
    fn resource(&self) -> Option<&Resource> {
        self.resource.as_ref()
    }
    fn scopes(&self) -> &[ScopeSpans] {
        &self.scope_spans
    }
    fn schema_url(&self) -> &str {
        &self.schema_url
    }
}

impl ScopeContainer for ScopeSpans {
    type Record = Span;
    fn scope(&self) -> Option<&InstrumentationScope> {
        self.scope.as_ref()
    }
    fn records(&self) -> &[Span] {
        &self.spans
    }
    fn schema_url(&self) -> &str {
        &self.schema_url
    }
    fn attributes(span: &Span) -> &[KeyValue] {
        &span.attributes
    }
}

impl ResourceContainer for ResourceLogs {
    type Scope = ScopeLogs;
    fn resource(&self) -> Option<&Resource> {
        self.resource.as_ref()
    }
    fn scopes(&self) -> &[ScopeLogs] {
        &self.scope_logs
    }
    fn schema_url(&self) -> &str {
        &self.schema_url
    }
}

impl ScopeContainer for ScopeLogs {
    type Record = LogRecord;
    fn scope(&self) -> Option<&InstrumentationScope> {
        self.scope.as_ref()
    }
    fn records(&self) -> &[LogRecord] {
        &self.log_records
    }
    fn schema_url(&self) -> &str {
        &self.schema_url
    }
    fn attributes(record: &LogRecord) -> &[KeyValue] {
        &record.attributes
    }
}

/// One gateway's part of a request, borrowed from it: routing copies no record.
/// Encoded as the request holding just these records would be.
struct Part<'a, R: ResourceContainer> {
    resources: Vec<ResourcePart<'a, R>>,
    records: usize,
}

struct ResourcePart<'a, R: ResourceContainer> {
    container: &'a R,
    scopes: Vec<ScopePart<'a, R::Scope>>,
}

struct ScopePart<'a, S: ScopeContainer> {
    container: &'a S,
    records: Vec<&'a S::Record>,
}

impl<R: ResourceContainer> Fields for Part<'_, R> {
    fn fields<P: Pass>(&self, pass: &mut P) {
        for resource in &self.resources {
            pass.message(1, resource);
        }
    }
}

impl<R: ResourceContainer> Fields for ResourcePart<'_, R> {
    fn fields<P: Pass>(&self, pass: &mut P) {
        if let Some(resource) = self.container.resource() {
            pass.message(1, resource);
        }
        for scope in &self.scopes {
            pass.message(2, scope);
        }
        pass.bytes(3, self.container.schema_url().as_bytes());
    }
}

impl<S: ScopeContainer> Fields for ScopePart<'_, S> {
    fn fields<P: Pass>(&self, pass: &mut P) {
        if let Some(scope) = self.container.scope() {
            pass.message(1, scope);
        }
        for record in &self.records {
            pass.message(2, *record);
        }
        pass.bytes(3, self.container.schema_url().as_bytes());
    }
}

/// Each record whose key hash `keep` takes to the part of its owner, under its
/// resource and scope, in order; then each part encoded.
pub(crate) fn encode_parts<R: ResourceContainer, T: Telemetry>(
    resources: &[R],
    ring: &Ring,
    keep: &dyn Fn(u64) -> bool,
) -> Vec<Encoded<T>> {
    let mut parts: Vec<Part<'_, R>> = (0..ring.len().max(1))
        .map(|_| Part {
            resources: Vec::new(),
            records: 0,
        })
        .collect();
    for resource in resources {
        for scope in resource.scopes() {
            for record in scope.records() {
                let key = record_key(R::Scope::attributes(record), resource.resource());
                if !keep(key) {
                    continue;
                }
                let Some(part) = parts.get_mut(ring.owner(key).unwrap_or(0)) else {
                    continue;
                };
                part.add(resource, scope, record);
            }
        }
    }
    parts
        .into_iter()
        .map(|part| Encoded::concatenated(part.encode_once(), part.records))
        .collect()
}

impl<'a, R: ResourceContainer> Part<'a, R> {
    fn add(
        &mut self,
        resource: &'a R,
        scope: &'a R::Scope,
        record: &'a <R::Scope as ScopeContainer>::Record,
    ) {
        self.records += 1;
        let resource_part = match self.resources.last_mut() {
            Some(last) if std::ptr::eq(last.container, resource) => last,
            _ => {
                self.resources.push(ResourcePart {
                    container: resource,
                    scopes: Vec::new(),
                });
                let Some(last) = self.resources.last_mut() else {
                    return;
                };
                last
            }
        };
        match resource_part.scopes.last_mut() {
            Some(last) if std::ptr::eq(last.container, scope) => last.records.push(record),
            _ => resource_part.scopes.push(ScopePart {
                container: scope,
                records: vec![record],
            }),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use opscope_model::attributes::set_str;
    use opscope_proto::prost::Message;

    use super::*;
    use crate::batch::Batch;

    /// The parts, decoded by prost.
    fn decoded<T: Telemetry + Message + Default>(parts: &[Encoded<T>]) -> Vec<T> {
        parts
            .iter()
            .map(|part| T::decode(part.bytes()).expect("a part decodes"))
            .collect()
    }

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

    /// The resource of operator pod `name` in namespace `operators`.
    pub(crate) fn pod(name: &str) -> Resource {
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
        let encoded = encode_traces(&request, &ring);
        let parts = decoded(&encoded);
        assert_eq!(parts.len(), 3);
        for (part, encoded) in parts.iter().zip(&encoded) {
            assert_eq!(part.item_count(), encoded.items());
        }
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
        let total: usize = decoded(&encode_logs(&request, &ring))
            .iter()
            .flat_map(|part| &part.resource_logs)
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum();
        assert_eq!(total, 30);
        let one = Ring::new(&["10.0.0.5:4317"]);
        let whole = encode_logs(&request, &one);
        assert_eq!(whole.len(), 1);
        assert_eq!(
            whole[0].bytes(),
            request.encode_to_vec(),
            "the bytes prost writes"
        );
    }
}
