//! Kubernetes API calls: a request path split into group, version, resource,
//! namespace, name and subresource, its verb, and the calls client and apiserver spans show.

use opscope_proto::otlp::common::v1::KeyValue;

use super::name::Name;
use crate::attributes::{get_i64, get_str};
use crate::semconv::{
    HTTP_METHOD_OLD, HTTP_REQUEST_METHOD, HTTP_RESPONSE_STATUS_CODE, HTTP_STATUS_CODE_OLD,
    HTTP_URL_OLD, URL_FULL, URL_PATH, URL_QUERY,
};

/// The query string of a span that gives `url.path` separately.
/// Path and query in the old HTTP conventions, on server spans.
const HTTP_TARGET_OLD: &str = "http.target";

/// Attributes of kube-apiserver handler spans: `verb` (an HTTP method or an API
/// verb, uppercase), `resource` and `url` (the request path); `subresource`,
/// `namespace`, `name` and `group` where an instrumentation adds them.
const APISERVER_VERB: &str = "verb";
const APISERVER_URL: &str = "url";
const APISERVER_GROUP: &str = "group";
const APISERVER_RESOURCE: &str = "resource";
const APISERVER_SUBRESOURCE: &str = "subresource";
const APISERVER_NAMESPACE: &str = "namespace";
const APISERVER_NAME: &str = "name";

/// What a Kubernetes API request path addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiPath {
    /// Empty for the core group (`/api/v1`).
    pub group: Name,
    pub version: Name,
    /// Lowercase plural: `pods`, `rayjobs`.
    pub resource: Name,
    /// Empty for cluster-scoped objects and cluster-wide collections.
    pub namespace: Name,
    /// Empty for collections.
    pub name: Name,
    /// `status`, `finalize`, `scale`…; empty for the object itself.
    pub subresource: Name,
    /// The deprecated `/watch/` path form.
    pub watch: bool,
}

/// A request to the API server and, when known, its HTTP status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    pub path: ApiPath,
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'static str,
    pub code: Option<u16>,
}

/// Parses a request path or full URL (scheme, host, query and fragment are
/// ignored). `None` for paths that are not resource requests (`/healthz`, `/apis`).
pub fn parse_api_path(path_or_url: &str) -> Option<ApiPath> {
    let path = path_of(path_or_url)?;
    let mut segments = path.split('/').filter(|segment| !segment.is_empty());
    let (group, version) = match segments.next()? {
        "api" => (Name::default(), segments.next()?),
        "apis" => (Name::from(segments.next()?), segments.next()?),
        _ => return None,
    };
    if !is_version(version) {
        return None;
    }
    let rest: Vec<&str> = segments.collect();
    let (watch, object_segments) = match rest.as_slice() {
        ["watch", after @ ..] => (true, after),
        all => (false, all),
    };
    let mut api_path = object_of(object_segments)?;
    api_path.group = group;
    api_path.version = version.into();
    api_path.watch = watch;
    Some(api_path)
}

/// The Kubernetes verb of a request: the HTTP method, refined by whether the path
/// names one object and whether the query asks to watch. Empty for methods the
/// API does not serve.
pub fn verb_of(method: &str, path: &ApiPath, query: Option<&str>) -> &'static str {
    let is_collection = path.name.is_empty();
    match method.to_ascii_uppercase().as_str() {
        "GET" | "HEAD" if path.watch || query.is_some_and(asks_to_watch) => "watch",
        "GET" | "HEAD" if is_collection => "list",
        "GET" | "HEAD" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if is_collection => "deletecollection",
        "DELETE" => "delete",
        _ => "",
    }
}

/// The API call a span shows: a client HTTP span (new or old HTTP conventions) or
/// a kube-apiserver handler span. `None` when the span is neither.
pub fn api_call_from_span(attributes: &[KeyValue]) -> Option<ApiCall> {
    client_call(attributes).or_else(|| apiserver_call(attributes))
}

fn client_call(attributes: &[KeyValue]) -> Option<ApiCall> {
    let method = get_str(attributes, HTTP_REQUEST_METHOD)
        .or_else(|| get_str(attributes, HTTP_METHOD_OLD))?;
    let (target, query) = request_target(attributes)?;
    let path = parse_api_path(target)?;
    let verb = verb_of(method, &path, query);
    if verb.is_empty() {
        return None;
    }
    Some(ApiCall {
        path,
        verb,
        code: status_code(attributes),
    })
}

/// The request path or URL of a client span and its query string.
fn request_target(attributes: &[KeyValue]) -> Option<(&str, Option<&str>)> {
    let full = get_str(attributes, URL_FULL)
        .or_else(|| get_str(attributes, HTTP_URL_OLD))
        .or_else(|| get_str(attributes, HTTP_TARGET_OLD));
    if let Some(url) = full {
        return Some((url, query_of(url)));
    }
    let path = get_str(attributes, URL_PATH)?;
    Some((path, get_str(attributes, URL_QUERY)))
}

fn apiserver_call(attributes: &[KeyValue]) -> Option<ApiCall> {
    let verb_text = get_str(attributes, APISERVER_VERB)?;
    let mut path = get_str(attributes, APISERVER_URL)
        .and_then(parse_api_path)
        .unwrap_or_default();
    for (field, key) in [
        (&mut path.group, APISERVER_GROUP),
        (&mut path.resource, APISERVER_RESOURCE),
        (&mut path.subresource, APISERVER_SUBRESOURCE),
        (&mut path.namespace, APISERVER_NAMESPACE),
        (&mut path.name, APISERVER_NAME),
    ] {
        fill_known(field, get_str(attributes, key));
    }
    if path.resource.is_empty() {
        return None;
    }
    let verb = apiserver_verb(verb_text, &path);
    if verb.is_empty() {
        return None;
    }
    Some(ApiCall {
        path,
        verb,
        code: status_code(attributes),
    })
}

/// Sets an empty field from an attribute, skipping the apiserver's `unknown`.
fn fill_known(field: &mut Name, value: Option<&str>) {
    if let Some(value) = value.filter(|v| *v != "unknown")
        && field.is_empty()
    {
        *field = value.into();
    }
}

/// The apiserver reports API verbs (`LIST`, `WATCH`, `APPLY`) or HTTP methods.
fn apiserver_verb(text: &str, path: &ApiPath) -> &'static str {
    match text.to_ascii_lowercase().as_str() {
        "get" => "get",
        "list" => "list",
        "watch" | "watchlist" => "watch",
        "create" => "create",
        "update" => "update",
        "patch" | "apply" => "patch",
        "deletecollection" => "deletecollection",
        other => verb_of(other, path, None),
    }
}

/// Methods a request line of client-go or kube-apiserver starts with.
const METHODS: &[&str] = &["GET", "PUT", "POST", "PATCH", "DELETE", "HEAD"];
/// Words read after the URL at most, looking for the status code.
const WORDS_TO_STATUS: usize = 4;

/// The API call a log line reports: client-go's request log (`round_trippers.go]
/// PUT https://…/status 409 Conflict in 3 milliseconds`), kube-apiserver's old
/// access log (`handlers.go] PUT /apis/…/status: (1.1ms) 409 [[agent] ip]`) and its
/// structured one (`httplog.go] "HTTP" verb="PUT" URI="/apis/…" … resp=409`).
pub fn api_call_from_text(text: &str) -> Option<ApiCall> {
    method_url_status(text).or_else(|| structured_http_log(text))
}

fn method_url_status(text: &str) -> Option<ApiCall> {
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        if !METHODS.contains(&word) {
            continue;
        }
        // fabric8 writes `Failure executing: PUT at: https://…`.
        let mut target = words.next().map(|url| url.trim_end_matches(':'))?;
        if target == "at" {
            target = words.next().map(|url| url.trim_end_matches([':', '.']))?;
        }
        let Some(path) = parse_api_path(target) else {
            continue;
        };
        let code = words.by_ref().take(WORDS_TO_STATUS).find_map(status_word);
        return call(word, target, path, code);
    }
    None
}

fn structured_http_log(text: &str) -> Option<ApiCall> {
    if !text.contains("\"HTTP\"") {
        return None;
    }
    let quoted = |key: &str| {
        let (_, after) = text.split_once(&format!(" {key}=\""))?;
        after.split('"').next()
    };
    let method = quoted("verb")?;
    let target = quoted("URI")?;
    let code = text
        .split_once(" resp=")
        .and_then(|(_, after)| status_word(after.split_whitespace().next()?));
    call(method, target, parse_api_path(target)?, code)
}

fn call(method: &str, target: &str, path: ApiPath, code: Option<u16>) -> Option<ApiCall> {
    let verb = verb_of(method, &path, query_of(target));
    (!verb.is_empty()).then_some(ApiCall { path, verb, code })
}

/// An HTTP status code word (`409`, `409,`).
fn status_word(word: &str) -> Option<u16> {
    let digits = word.trim_end_matches([',', ';', ':']);
    if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|code| (100..600).contains(code))
}

fn status_code(attributes: &[KeyValue]) -> Option<u16> {
    get_i64(attributes, HTTP_RESPONSE_STATUS_CODE)
        .or_else(|| get_i64(attributes, HTTP_STATUS_CODE_OLD))
        .and_then(|code| u16::try_from(code).ok())
}

/// The path of a URL or path, without query or fragment.
fn path_of(path_or_url: &str) -> Option<&str> {
    // A path has no ':' before its first '/'; a URL has its scheme's "://". (Searched
    // by character: a string pattern sets up a substring searcher on every call.)
    let scheme_end = path_or_url.find(':').filter(|at| {
        path_or_url
            .get(at + 1..)
            .is_some_and(|rest| rest.starts_with("//"))
    });
    let without_scheme = match scheme_end.and_then(|at| path_or_url.get(at + 3..)) {
        Some(rest) => rest.find('/').and_then(|start| rest.get(start..))?,
        None => path_or_url,
    };
    let end = without_scheme
        .find(['?', '#'])
        .unwrap_or(without_scheme.len());
    without_scheme.get(..end)
}

fn query_of(url: &str) -> Option<&str> {
    let (_, after) = url.split_once('?')?;
    Some(after.split('#').next().unwrap_or(after))
}

/// `v1`, `v1beta2`, `v2alpha1`.
fn is_version(segment: &str) -> bool {
    let mut chars = segment.chars();
    chars.next() == Some('v') && chars.next().is_some_and(|c| c.is_ascii_digit())
}

/// `watch=true` (or any true value Go's `strconv.ParseBool` accepts) in a query.
fn asks_to_watch(query: &str) -> bool {
    query.split('&').any(|pair| {
        matches!(
            pair.split_once('='),
            Some(("watch", "1" | "t" | "T" | "true" | "TRUE" | "True"))
        )
    })
}

/// The object the segments after the version address: `namespaces/ns/r/x/sub`,
/// `r/x/sub`, or the namespace object itself (`namespaces/x[/status|/finalize]`).
fn object_of(segments: &[&str]) -> Option<ApiPath> {
    match segments {
        ["namespaces", namespace, resource, tail @ ..] if !is_namespace_subresource(resource) => {
            let mut api_path = resource_path(resource, tail);
            api_path.namespace = (*namespace).into();
            Some(api_path)
        }
        [resource, tail @ ..] => Some(resource_path(resource, tail)),
        [] => None,
    }
}

fn is_namespace_subresource(segment: &str) -> bool {
    matches!(segment, "status" | "finalize")
}

fn resource_path(resource: &str, tail: &[&str]) -> ApiPath {
    let part = |index: usize| tail.get(index).map(|s| Name::from(*s));
    ApiPath {
        resource: resource.into(),
        name: part(0).unwrap_or_default(),
        subresource: part(1).unwrap_or_default(),
        ..ApiPath::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_of_client_go_and_the_apiserver() {
        let old = api_call_from_text("I1022 03:55:22.443643       7 handlers.go:131] PUT /apis/extensions/v1beta1/namespaces/e2e-tests-job-ljba5/jobs/rand-local/status: (717.321µs) 409 [[kube-controller-manager/v1.2.0 (linux/amd64) kubernetes/a5a9176] 127.0.0.1:42765]").unwrap();
        assert_eq!(old.verb, "update");
        assert_eq!(old.code, Some(409));
        assert_eq!(old.path.resource.as_str(), "jobs");
        assert_eq!(old.path.namespace.as_str(), "e2e-tests-job-ljba5");
        assert_eq!(old.path.name.as_str(), "rand-local");
        assert_eq!(old.path.subresource.as_str(), "status");
        let client = api_call_from_text("I0523 15:43:40.673733       1 round_trippers.go:443] GET https://10.96.0.1:443/api/v1/namespaces/kube-system/configmaps/leader 200 OK in 5 milliseconds").unwrap();
        assert_eq!(client.verb, "get");
        assert_eq!(client.code, Some(200));
        assert_eq!(client.path.name.as_str(), "leader");
        let structured = api_call_from_text(r#"I0311 02:35:26.041556       1 httplog.go:131] "HTTP" verb="PUT" URI="/apis/ray.io/v1/namespaces/default/rayservices/rs/status" latency="10.397049ms" userAgent="kuberay-operator" resp=409"#).unwrap();
        assert_eq!(structured.verb, "update");
        assert_eq!(structured.code, Some(409));
        assert_eq!(structured.path.resource.as_str(), "rayservices");
        let fabric8 = api_call_from_text("io.fabric8.kubernetes.client.KubernetesClientException: Failure executing: PUT at: https://address/apis/flink.apache.org/v1beta1/namespaces/myns/flinkdeployments/flink-job/status. Message: Operation cannot be fulfilled").unwrap();
        assert_eq!(fabric8.verb, "update");
        assert_eq!(fabric8.path.namespace.as_str(), "myns");
        assert_eq!(fabric8.path.subresource.as_str(), "status");
        assert_eq!(api_call_from_text("GET the book from /shelf"), None);
        assert_eq!(api_call_from_text("PUT"), None);
    }
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::common::v1::{AnyValue, any_value::Value};
    use opscope_proto::otlp::trace::v1::Span;

    fn path(
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
        subresource: &str,
    ) -> ApiPath {
        ApiPath {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
            subresource: subresource.into(),
            watch: false,
        }
    }

    #[test]
    fn core_paths() {
        for (text, expected) in [
            ("/api/v1/pods", path("", "pods", "", "", "")),
            ("/api/v1/namespaces/ns/pods", path("", "pods", "ns", "", "")),
            (
                "/api/v1/namespaces/ns/pods/x",
                path("", "pods", "ns", "x", ""),
            ),
            (
                "/api/v1/namespaces/ns/pods/x/status",
                path("", "pods", "ns", "x", "status"),
            ),
            ("/api/v1/nodes/n", path("", "nodes", "", "n", "")),
            ("/api/v1/namespaces", path("", "namespaces", "", "", "")),
            ("/api/v1/namespaces/x", path("", "namespaces", "", "x", "")),
            (
                "/api/v1/namespaces/x/finalize",
                path("", "namespaces", "", "x", "finalize"),
            ),
            (
                "/api/v1/namespaces/x/status",
                path("", "namespaces", "", "x", "status"),
            ),
        ] {
            assert_eq!(parse_api_path(text), Some(expected), "{text}");
        }
    }

    #[test]
    fn group_paths() {
        for (text, expected) in [
            (
                "/apis/ray.io/v1/namespaces/ml/rayjobs/train/status",
                path("ray.io", "rayjobs", "ml", "train", "status"),
            ),
            (
                "/apis/ray.io/v1/namespaces/ml/rayjobs",
                path("ray.io", "rayjobs", "ml", "", ""),
            ),
            (
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
                path("rbac.authorization.k8s.io", "clusterroles", "", "admin", ""),
            ),
            (
                "/apis/ray.io/v1/rayjobs",
                path("ray.io", "rayjobs", "", "", ""),
            ),
        ] {
            assert_eq!(parse_api_path(text), Some(expected), "{text}");
        }
        let beta = parse_api_path("/apis/apps/v1beta2/deployments").unwrap();
        assert_eq!(beta.version, "v1beta2");
    }

    #[test]
    fn urls_lose_scheme_host_and_query() {
        let parsed = parse_api_path(
            "https://10.96.0.1:443/apis/ray.io/v1/namespaces/ml/rayjobs/train/status?fieldManager=kuberay#x",
        );
        assert_eq!(
            parsed,
            Some(path("ray.io", "rayjobs", "ml", "train", "status"))
        );
        assert_eq!(
            parse_api_path("/api/v1/namespaces/ns/pods?labelSelector=app%3Dx"),
            Some(path("", "pods", "ns", "", ""))
        );
    }

    #[test]
    fn deprecated_watch_paths() {
        let parsed = parse_api_path("/api/v1/watch/namespaces/ns/pods/x").unwrap();
        assert!(parsed.watch);
        assert_eq!(parsed.name, "x");
        assert_eq!(parsed.namespace, "ns");
        assert_eq!(verb_of("GET", &parsed, None), "watch");
    }

    #[test]
    fn non_api_paths_are_none() {
        for text in [
            "/healthz",
            "/apis",
            "/api",
            "/api/v1",
            "/apis/ray.io",
            "/apis/ray.io/v1",
            "/version",
            "/openapi/v2",
            "",
            "https://host",
            "https://host:443",
            "/apis/ray.io/notaversion/rayjobs",
        ] {
            assert_eq!(parse_api_path(text), None, "{text}");
        }
    }

    #[test]
    fn verbs_follow_the_method_and_shape() {
        let one = path("", "pods", "ns", "x", "");
        let many = path("", "pods", "ns", "", "");
        assert_eq!(verb_of("GET", &one, None), "get");
        assert_eq!(verb_of("get", &many, None), "list");
        assert_eq!(verb_of("GET", &many, Some("watch=true&rv=1")), "watch");
        assert_eq!(verb_of("GET", &many, Some("watch=1")), "watch");
        assert_eq!(verb_of("GET", &many, Some("watch=false")), "list");
        assert_eq!(verb_of("POST", &many, None), "create");
        assert_eq!(verb_of("PUT", &one, None), "update");
        assert_eq!(verb_of("PATCH", &one, None), "patch");
        assert_eq!(verb_of("DELETE", &one, None), "delete");
        assert_eq!(verb_of("DELETE", &many, None), "deletecollection");
        assert_eq!(verb_of("OPTIONS", &one, None), "");
    }

    fn key_value(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn fixture_spans(json: &str) -> Vec<Span> {
        let request: ExportTraceServiceRequest = serde_json::from_str(json).unwrap();
        request
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect()
    }

    fn call_of_span(spans: &[Span], name: &str) -> Option<ApiCall> {
        let span = spans.iter().find(|s| s.name == name).unwrap();
        api_call_from_span(&span.attributes)
    }

    #[test]
    fn client_span_with_new_conventions() {
        let spans = fixture_spans(include_str!(
            "../../../processors/tests/fixtures/spans/otelhttp_client_status_patch_409.json"
        ));
        let call = call_of_span(&spans, "HTTP PATCH").unwrap();
        assert_eq!(
            call,
            ApiCall {
                path: path("ray.io", "rayjobs", "ml", "train", "status"),
                verb: "patch",
                code: Some(409),
            }
        );
        assert_eq!(call_of_span(&spans, "reconcile"), None);
    }

    #[test]
    fn client_spans_with_old_conventions() {
        let spans = fixture_spans(include_str!(
            "../../../processors/tests/fixtures/spans/otelhttp_client_old_conventions.json"
        ));
        let watch = call_of_span(&spans, "HTTP GET").unwrap();
        assert_eq!(watch.verb, "watch");
        assert_eq!(watch.path, path("ray.io", "rayjobs", "", "", ""));
        assert_eq!(watch.code, Some(200));
        let update = call_of_span(&spans, "HTTP PUT").unwrap();
        assert_eq!(update.verb, "update");
        assert_eq!(
            update.path,
            path("", "configmaps", "ml", "train-config", "")
        );
        assert_eq!(update.code, Some(200), "status code given as a string");
        let by_path = call_of_span(&spans, "HTTP DELETE").unwrap();
        assert_eq!(by_path.verb, "delete");
        assert_eq!(by_path.path, path("", "pods", "ml", "train-head-0", ""));
        assert_eq!(by_path.code, None);
        let watch_by_query = call_of_span(&spans, "HTTP GET watch").unwrap();
        assert_eq!(watch_by_query.verb, "watch");
        assert_eq!(watch_by_query.path, path("", "pods", "ml", "", ""));
        let by_target = call_of_span(&spans, "HTTP POST").unwrap();
        assert_eq!(by_target.verb, "create");
        assert_eq!(by_target.path, path("", "events", "ml", "", ""));
        assert_eq!(by_target.code, Some(201));
        assert_eq!(call_of_span(&spans, "HTTP GET healthz"), None);
    }

    #[test]
    fn apiserver_spans() {
        let spans = fixture_spans(include_str!(
            "../../../processors/tests/fixtures/spans/kube_apiserver_handlers.json"
        ));
        let update = call_of_span(&spans, "Update").unwrap();
        assert_eq!(update.verb, "update");
        assert_eq!(
            update.path,
            path("ray.io", "rayjobs", "ml", "train", "status")
        );
        let list = call_of_span(&spans, "List").unwrap();
        assert_eq!(list.verb, "list");
        assert_eq!(list.path.resource, "pods");
        let patch = call_of_span(&spans, "Patch").unwrap();
        assert_eq!(patch.verb, "patch", "APPLY is a patch");
        assert_eq!(patch.path, {
            let mut p = path("ray.io", "rayclusters", "ml", "train-raycluster", "");
            p.version = Name::default();
            p
        });
    }

    #[test]
    fn malformed_attributes_are_none() {
        let spans = fixture_spans(include_str!(
            "../../../processors/tests/fixtures/spans/malformed_attributes.json"
        ));
        for span in &spans {
            assert_eq!(api_call_from_span(&span.attributes), None, "{}", span.name);
        }
        let out_of_range = [
            key_value(HTTP_METHOD_OLD, Value::StringValue("GET".into())),
            key_value(URL_PATH, Value::StringValue("/api/v1/pods".into())),
            key_value(HTTP_STATUS_CODE_OLD, Value::IntValue(70_000)),
        ];
        assert_eq!(api_call_from_span(&out_of_range).unwrap().code, None);
        let huge = format!("/api/v1/namespaces/{}/pods/x", "n".repeat(1 << 20));
        assert_eq!(parse_api_path(&huge).unwrap().name, "x");
        assert_eq!(
            parse_api_path("ünïcödé://ö/api/v1/pods/ä").unwrap().name,
            "ä"
        );
    }
}
