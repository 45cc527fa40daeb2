//! The attribute names opscope reads and writes. No OpenTelemetry semantic
//! convention covers controllers and reconciles, so these are opscope's own,
//! alongside the standard names it reads.

// Resource attributes.
pub const OPERATOR_NAME: &str = "operator.name";
pub const SERVICE_NAME: &str = "service.name";
pub const K8S_NAMESPACE_NAME: &str = "k8s.namespace.name";
pub const K8S_DEPLOYMENT_NAME: &str = "k8s.deployment.name";
pub const K8S_CONTAINER_NAME: &str = "k8s.container.name";
pub const K8S_POD_NAME: &str = "k8s.pod.name";

// Span and log record attributes written by the tagger.
pub const RECONCILE_ID: &str = "reconcile.id";
/// `ok`, `error`, `requeue` or `requeue_after`.
pub const RECONCILE_RESULT: &str = "reconcile.result";
/// Requested requeue delay in seconds (with `requeue_after`).
pub const RECONCILE_REQUEUE_AFTER: &str = "reconcile.requeue_after";
/// The error text of a failed reconcile.
pub const RECONCILE_ERROR: &str = "reconcile.error";
/// The controller that ran the reconcile.
pub const CONTROLLER: &str = "k8s.controller.name";
pub const OBJECT_GROUP: &str = "k8s.object.group";
pub const OBJECT_KIND: &str = "k8s.object.kind";
/// The object's resource (plural, lowercase), when a source names it that way.
pub const OBJECT_RESOURCE: &str = "k8s.object.resource";
pub const OBJECT_NAMESPACE: &str = "k8s.object.namespace";
pub const OBJECT_NAME: &str = "k8s.object.name";
pub const OBJECT_GENERATION: &str = "k8s.object.generation";
pub const OBJECT_OBSERVED_GENERATION: &str = "k8s.object.observed_generation";
pub const OBJECT_RESOURCE_VERSION: &str = "k8s.object.resource_version";
/// RFC 3339 deletion timestamp.
pub const OBJECT_DELETION_TIMESTAMP: &str = "k8s.object.deletion_timestamp";
/// Array of finalizer names.
pub const OBJECT_FINALIZERS: &str = "k8s.object.finalizers";
/// Array of `path=hash` strings: a digest of the object's status leaves, so the
/// correlator can tell which status field changes from one write to the next.
pub const OBJECT_STATUS_DIGEST: &str = "k8s.object.status_digest";
/// Set (true) when the record reports the object deleted.
pub const OBJECT_GONE: &str = "k8s.object.gone";

/// What a record is evidence of: `reconcile` (a reconcile ran or ended),
/// `api_call` (a request to the API server), `object_state`.
pub const OPSCOPE_RECORD: &str = "opscope.record";
pub const RECORD_RECONCILE: &str = "reconcile";
pub const RECORD_API_CALL: &str = "api_call";
pub const RECORD_OBJECT_STATE: &str = "object_state";

// API calls (client spans, audit events, 409 messages). The call's target object is
// named separately from `k8s.object.*`, which is the object being reconciled: a
// reconcile of a RayJob may create a Pod.
pub const API_GROUP: &str = "k8s.api.group";
pub const API_KIND: &str = "k8s.api.kind";
pub const API_RESOURCE: &str = "k8s.api.resource";
pub const API_NAMESPACE: &str = "k8s.api.namespace";
pub const API_NAME: &str = "k8s.api.name";
/// Kubernetes verb: get, list, watch, create, update, patch, delete.
pub const API_VERB: &str = "k8s.api.verb";
pub const API_SUBRESOURCE: &str = "k8s.api.subresource";
/// Who made the call (a user or service account), when known.
pub const API_ACTOR: &str = "k8s.api.actor";

// Standard HTTP attribute names, new and old.
pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
pub const HTTP_METHOD_OLD: &str = "http.method";
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
pub const HTTP_STATUS_CODE_OLD: &str = "http.status_code";
pub const URL_FULL: &str = "url.full";
pub const HTTP_URL_OLD: &str = "http.url";
pub const URL_PATH: &str = "url.path";
pub const URL_QUERY: &str = "url.query";

/// Where a log record came from, for evidence (`file:line`).
pub const LOG_SOURCE: &str = "opscope.log.source";

/// A resource attribute (true) on records one gateway hands over to the gateway that
/// owns their objects now: the receiver takes them whatever their age.
pub const HANDED_OVER: &str = "opscope.handed_over";
/// On handed-over records: the id (16 hex digits) of the journal that first took
/// them, and their batch's sequence number there. A gateway handed back records of
/// its own journal knows them by it, and one handed the same batch twice.
pub const HANDED_OVER_JOURNAL: &str = "opscope.handed_over.journal";
pub const HANDED_OVER_SEQUENCE: &str = "opscope.handed_over.sequence";
