//! The key → fact rules shared by every structured shape (zap JSON and console context,
//! klog and logfmt pairs, tracing fields, OTLP log attributes): first match wins.

use super::json_line::{JsonObject, JsonValue};

use super::outcome::LogOutcome;
use super::{Level, LogFacts, kube_rs};
use opscope_model::semconv;
use opscope_model::timestamp::{epoch_seconds_from_f64, has_zone, parse_timestamp};

/// A structured field's value, borrowed from the record it came from.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A nested object, such as zap's `"RayJob": {"name": "train", "namespace": "ml"}`.
    Object(Vec<(&'a str, FieldValue<'a>)>),
}

impl<'a> FieldValue<'a> {
    /// The value of a JSON field; `None` for null and arrays, which no rule reads.
    pub fn from_json(value: &'a JsonValue<'_>) -> Option<FieldValue<'a>> {
        Some(match value {
            JsonValue::Str(text) => FieldValue::Str(text),
            JsonValue::Int(int) => FieldValue::Int(*int),
            JsonValue::Float(float) => FieldValue::Float(*float),
            JsonValue::Bool(flag) => FieldValue::Bool(*flag),
            JsonValue::Object(object) => FieldValue::Object(json_fields(object).collect()),
            JsonValue::Null | JsonValue::Array(_) => return None,
        })
    }

    fn as_str(&self) -> Option<&'a str> {
        match self {
            FieldValue::Str(text) => Some(text),
            _ => None,
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            FieldValue::Int(int) => Some(*int as f64),
            FieldValue::Float(float) => Some(*float),
            FieldValue::Str(text) => text.parse().ok(),
            _ => None,
        }
    }

    /// The `(namespace, name)` of an object value (`{"name": .., "namespace": ..}`).
    fn object_name(&self) -> Option<(Option<&'a str>, &'a str)> {
        let FieldValue::Object(entries) = self else {
            return None;
        };
        // Go structs printed as JSON keep their field names: `{"Namespace":..,"Name":..}`.
        let string_of = |wanted: &str| {
            entries
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(wanted))
                .and_then(|(_, value)| value.as_str())
        };
        Some((string_of("namespace"), string_of("name")?))
    }

    /// The `kind` an object value states (`{"kind": "NamespaceConfig", …}`).
    fn object_kind(&self) -> Option<&'a str> {
        let FieldValue::Object(entries) = self else {
            return None;
        };
        entries
            .iter()
            .find(|(key, _)| *key == "kind")
            .and_then(|(_, value)| value.as_str())
    }

    /// The `(namespace, name)` of an object value or of a `namespace/name` string.
    fn object_or_path_name(&self) -> Option<(Option<&'a str>, &'a str)> {
        self.object_name()
            .or_else(|| split_namespaced(self.as_str()?))
    }
}

/// The fields of a JSON object, in the shape `facts_from_fields` reads.
pub fn json_fields<'a>(
    object: &'a JsonObject<'_>,
) -> impl Iterator<Item = (&'a str, FieldValue<'a>)> {
    object
        .iter()
        .filter_map(|(key, value)| Some((key, FieldValue::from_json(value)?)))
}

/// `namespace/name`, or `name` or `/name` for a cluster-scoped object.
pub fn split_namespaced(path: &str) -> Option<(Option<&str>, &str)> {
    match path.split_once('/') {
        Some((_, name)) if name.is_empty() || name.contains('/') => None,
        Some(("", name)) => Some((None, name)),
        Some((namespace, name)) => Some((Some(namespace), name)),
        None if path.is_empty() => None,
        None => Some((None, path)),
    }
}

/// Fills the facts still unset in `facts` from a structured record's fields, reading
/// the controller-runtime, kube-rs, klog and opscope key names (see `rule_for`), then
/// infers the outcome from the message if no field stated it.
pub fn facts_from_fields<'a>(
    fields: impl IntoIterator<Item = (&'a str, FieldValue<'a>)>,
    facts: &mut LogFacts,
) {
    let mut found = Found::default();
    for (key, value) in fields {
        found.note(key, value);
    }
    found.resolve_prefixed_names();
    found.resolve_kind_keyed_object();
    found.fill(facts);
    facts.infer_outcome();
}

/// A fact a field can state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fact {
    Time,
    Level,
    Logger,
    Message,
    ReconcileId,
    Controller,
    Group,
    Kind,
    Namespace,
    Name,
    Error,
    Result,
    RequeueAfterSeconds,
}

/// What a key means: a fact with its rank among the keys stating it (lower wins), or
/// a value that names the object.
enum Rule {
    States(Fact, u8),
    /// `object`: `{"name","namespace"}` or `"namespace/name"`.
    Object,
    /// controller-runtime's old `request`: `"namespace/name"` or `"name"`.
    Request,
    /// kube-rs `object.ref`: `Kind.version.group/name.namespace`.
    KubeObjectRef,
    /// A Go `GroupVersionKind` printed: `apps/v1, Kind=Deployment`, or `gvk` as
    /// Crossplane writes it.
    GroupVersionKind,
    /// `apiVersion`: `group/version`, or `version` for the core group.
    ApiVersion,
    /// A key that names an object of one Kind: Argo CD's `application`.
    KindNamed(&'static str, &'static str),
}

/// Ranks of the sources of an object's namespace and name, most specific first.
const RANK_OWN_ATTRIBUTE: u8 = 0;
const RANK_KIND_KEYED_OBJECT: u8 = 1;
const RANK_NAME_KEYS: u8 = 2;
const RANK_OBJECT_KEY: u8 = 3;
const RANK_REQUEST_KEY: u8 = 4;
const RANK_KUBE_OBJECT_REF: u8 = 5;
/// Rank of `<kind>.name` and `<kind>.namespace`.
const RANK_PREFIXED_NAME: u8 = 3;
/// Rank of plain `kind`, `resource_kind` and `gvk`: below the controller's own.
const RANK_PLAIN_KIND: u8 = 4;
/// Rank of a Kind taken from the key of an object-valued field (`"RayJob": {..}`).
const RANK_KIND_FROM_KEY: u8 = 3;

fn rule_for(key: &str) -> Option<Rule> {
    let states = |fact, rank| Some(Rule::States(fact, rank));
    match key {
        "ts" | "time" | "timestamp" => states(Fact::Time, 0),
        "level" | "lvl" | "severity" => states(Fact::Level, 0),
        "logger" => states(Fact::Logger, 0),
        // Elastic Common Schema, as ECK writes it.
        "log.logger" => states(Fact::Logger, 1),
        "log.level" => states(Fact::Level, 1),
        "@timestamp" => states(Fact::Time, 1),
        "target" => states(Fact::Logger, 1),
        "msg" => states(Fact::Message, 0),
        "message" => states(Fact::Message, 1),
        semconv::RECONCILE_ID => states(Fact::ReconcileId, 0),
        "reconcile_id" => states(Fact::ReconcileId, 1),
        "reconcileID" => states(Fact::ReconcileId, 2),
        semconv::CONTROLLER => states(Fact::Controller, 0),
        "controller" => states(Fact::Controller, 1),
        "knative.dev/controller" => states(Fact::Controller, 2),
        semconv::OBJECT_GROUP => states(Fact::Group, RANK_OWN_ATTRIBUTE),
        "controllerGroup" => states(Fact::Group, 1),
        "reconciler group" | "reconcilerGroup" => states(Fact::Group, 2),
        semconv::OBJECT_KIND => states(Fact::Kind, RANK_OWN_ATTRIBUTE),
        "controllerKind" => states(Fact::Kind, 1),
        "reconciler kind" | "reconcilerKind" => states(Fact::Kind, 2),
        semconv::OBJECT_NAMESPACE => states(Fact::Namespace, RANK_OWN_ATTRIBUTE),
        "namespace" => states(Fact::Namespace, RANK_NAME_KEYS),
        // Crossplane's and cert-manager's names of the reconciled object.
        "resourceNamespace" | "resource_namespace" => states(Fact::Namespace, RANK_NAME_KEYS),
        "resourceName" | "resource_name" => states(Fact::Name, RANK_NAME_KEYS),
        "kind" | "resource_kind" | "resourceKind" | "objectKind" => {
            states(Fact::Kind, RANK_PLAIN_KIND)
        }
        "gvk" => Some(Rule::GroupVersionKind),
        "apiVersion" | "api_version" => Some(Rule::ApiVersion),
        semconv::OBJECT_NAME => states(Fact::Name, RANK_OWN_ATTRIBUTE),
        "name" => states(Fact::Name, RANK_NAME_KEYS),
        semconv::RECONCILE_ERROR => states(Fact::Error, 0),
        "error" => states(Fact::Error, 1),
        "err" => states(Fact::Error, 2),
        semconv::RECONCILE_RESULT => states(Fact::Result, 0),
        semconv::RECONCILE_REQUEUE_AFTER => states(Fact::RequeueAfterSeconds, 0),
        "object" => Some(Rule::Object),
        // controller-runtime's old `request`, klog's `key`, Knative's `knative.dev/key`.
        "request" | "key" | "knative.dev/key" => Some(Rule::Request),
        // kubebuilder's `WithValues("Request.Name", req.Name)`: a name, of no Kind.
        "Request.Name" | "request.name" => states(Fact::Name, RANK_NAME_KEYS),
        "Request.Namespace" | "request.namespace" => states(Fact::Namespace, RANK_NAME_KEYS),
        "application" => Some(Rule::KindNamed("argoproj.io", "Application")),
        // OLM's abbreviations of the objects it reconciles.
        "ip" => Some(Rule::KindNamed("operators.coreos.com", "InstallPlan")),
        "csv" => Some(Rule::KindNamed(
            "operators.coreos.com",
            "ClusterServiceVersion",
        )),
        "sub" => Some(Rule::KindNamed("operators.coreos.com", "Subscription")),
        "object.ref" | "resource" => Some(Rule::KubeObjectRef),
        _ => None,
    }
}

/// The candidates for each fact met so far, and the unrecognised fields that may be
/// controller-runtime's `<Kind>: {name, namespace}`.
#[derive(Default)]
struct Found<'a> {
    candidates: Vec<(Fact, u8, FieldValue<'a>)>,
    kind_keyed: Vec<(&'a str, FieldValue<'a>)>,
    /// `<kind>.name` and `<kind>.namespace` keys: (kind, fact, value).
    prefixed: Vec<(&'a str, Fact, &'a str)>,
}

impl<'a> Found<'a> {
    fn note(&mut self, key: &'a str, value: FieldValue<'a>) {
        match rule_for(key) {
            Some(Rule::States(fact, rank)) => self.candidates.push((fact, rank, value)),
            Some(Rule::Object) => self.note_object(RANK_OBJECT_KEY, &value),
            Some(Rule::Request) => self.note_object(RANK_REQUEST_KEY, &value),
            Some(Rule::KubeObjectRef) => self.note_kube_object_ref(&value),
            Some(Rule::GroupVersionKind) => self.note_group_version_kind(&value),
            Some(Rule::ApiVersion) => {
                if let Some((group, _version)) = value.as_str().and_then(|v| v.split_once('/')) {
                    self.push_str(Fact::Group, RANK_PLAIN_KIND, group);
                }
            }
            Some(Rule::KindNamed(group, kind)) => {
                self.push_str(Fact::Group, RANK_PLAIN_KIND, group);
                self.push_str(Fact::Kind, RANK_PLAIN_KIND, kind);
                self.note_object(RANK_REQUEST_KEY, &value);
            }
            None if let Some((kind, fact)) = prefixed_name_key(key) => {
                if let Some(text) = value.as_str().filter(|text| is_object_name(text)) {
                    self.prefixed.push((kind, fact, text));
                }
            }
            None if matches!(value, FieldValue::Object(_) | FieldValue::Str(_)) => {
                self.kind_keyed.push((key, value));
            }
            None => {}
        }
    }

    fn note_object(&mut self, rank: u8, value: &FieldValue<'a>) {
        // kube-rs `object=NifiCluster.v1alpha1.nifi.stackable.tech/simple-nifi`.
        if let Some(text) = value.as_str()
            && text
                .split('/')
                .next()
                .is_some_and(|head| head.contains('.'))
            && kube_rs::parse_object_ref(text).is_some()
        {
            self.note_kube_object_ref(value);
            return;
        }
        if let Some((namespace, name)) = value.object_or_path_name() {
            self.note_namespaced(rank, namespace, name);
            // An event's involved `object` states its Kind.
            if let Some(kind) = value.object_kind() {
                self.push_str(Fact::Kind, rank, kind);
            }
        }
    }

    fn note_namespaced(&mut self, rank: u8, namespace: Option<&'a str>, name: &'a str) {
        if let Some(namespace) = namespace {
            self.push_str(Fact::Namespace, rank, namespace);
        }
        self.push_str(Fact::Name, rank, name);
    }

    fn note_kube_object_ref(&mut self, value: &FieldValue<'a>) {
        let Some(object) = value.as_str().and_then(kube_rs::parse_object_ref) else {
            return;
        };
        self.push_str(Fact::Kind, RANK_KUBE_OBJECT_REF, object.kind);
        if !object.group.is_empty() {
            self.push_str(Fact::Group, RANK_KUBE_OBJECT_REF, object.group);
        }
        self.note_namespaced(RANK_KUBE_OBJECT_REF, object.namespace, object.name);
    }

    fn note_group_version_kind(&mut self, value: &FieldValue<'a>) {
        let Some((group, kind)) = value.as_str().and_then(parse_group_version_kind) else {
            return;
        };
        if !group.is_empty() {
            self.push_str(Fact::Group, RANK_PLAIN_KIND, group);
        }
        self.push_str(Fact::Kind, RANK_PLAIN_KIND, kind);
    }

    fn push_str(&mut self, fact: Fact, rank: u8, text: &'a str) {
        self.candidates.push((fact, rank, FieldValue::Str(text)));
    }

    /// OLM's `catalogsource.name=x catalogsource.namespace=y`, ECK's `es_name` (two
    /// letters name no Kind): the object of the first prefix with a name, unless a key
    /// that names the reconciled object (`name`, `Request.Name`) is there too; then the
    /// prefixed keys name its children (`StatefulSet.Name` beside `Request.Name`).
    fn resolve_prefixed_names(&mut self) {
        let Some(&(kind, _, name)) = self
            .prefixed
            .iter()
            .find(|(_, fact, _)| *fact == Fact::Name)
        else {
            return;
        };
        let named_otherwise = self
            .candidates
            .iter()
            .any(|(fact, rank, _)| *fact == Fact::Name && *rank < RANK_PREFIXED_NAME);
        if named_otherwise {
            return;
        }
        self.push_str(Fact::Name, RANK_PREFIXED_NAME, name);
        if let Some(&(_, _, namespace)) = self
            .prefixed
            .iter()
            .find(|(other, fact, _)| *other == kind && *fact == Fact::Namespace)
        {
            self.push_str(Fact::Namespace, RANK_PREFIXED_NAME, namespace);
        }
        if kind.len() >= 3 {
            self.push_str(Fact::Kind, RANK_PLAIN_KIND + 1, kind);
        }
    }

    /// The field keyed by the Kind (`"RayJob": {..}`, klog's `RayJob="ml/train"`, any
    /// case); without a Kind, the first object-valued field, whose key is then the Kind.
    fn resolve_kind_keyed_object(&mut self) {
        if self.best_str(Fact::Kind).is_none() {
            self.resolve_paired_kind_key();
        }
        let named = match self.best_str(Fact::Kind) {
            Some(kind) => self
                .kind_keyed
                .iter()
                .filter(|(key, _)| key.eq_ignore_ascii_case(kind))
                .find_map(|(_, value)| value.object_or_path_name()),
            None => self
                .object_keyed_by_logger_kind()
                .or_else(|| self.first_object_keyed_by_kind()),
        };
        if let Some((namespace, name)) = named {
            self.note_namespaced(RANK_KIND_KEYED_OBJECT, namespace, name);
        }
    }

    /// `"sync"="ns/name" "syncKind"="RootSync"` (Config Sync's klogr keys): a key
    /// naming an object, and the same key with `Kind` naming its Kind.
    fn resolve_paired_kind_key(&mut self) {
        let paired = self.kind_keyed.iter().find_map(|(key, value)| {
            let prefix = key
                .strip_suffix("Kind")
                .filter(|prefix| !prefix.is_empty())?;
            let kind = value.as_str().filter(|kind| is_kind_key(kind))?;
            let named = self
                .kind_keyed
                .iter()
                .find(|(other, _)| *other == prefix)
                .and_then(|(_, object)| object.object_or_path_name())?;
            Some((kind, named))
        });
        if let Some((kind, (namespace, name))) = paired {
            self.push_str(Fact::Kind, RANK_KIND_FROM_KEY, kind);
            self.note_namespaced(RANK_KIND_KEYED_OBJECT, namespace, name);
        }
    }

    /// kubebuilder's `controllers.KafkaCluster` logger with `"kafkacluster": "ns/name"`:
    /// the field keyed by the Kind the logger ends with.
    fn object_keyed_by_logger_kind(&mut self) -> Option<(Option<&'a str>, &'a str)> {
        let logger = self.best_str(Fact::Logger)?;
        let kind = logger.rsplit(['.', '/']).next()?;
        if !kind.starts_with(|c: char| c.is_ascii_uppercase()) {
            return None;
        }
        let named = self
            .kind_keyed
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(kind))
            .find_map(|(_, value)| value.object_or_path_name())?;
        self.push_str(Fact::Kind, RANK_KIND_FROM_KEY, kind);
        Some(named)
    }

    fn first_object_keyed_by_kind(&mut self) -> Option<(Option<&'a str>, &'a str)> {
        let (key, named) = self
            .kind_keyed
            .iter()
            .find_map(|(key, value)| {
                // An object that states its own `kind` (a dumped manifest under
                // `instance`) is of that Kind, not of its key's.
                let kind = value.object_kind().unwrap_or(key);
                Some((kind, value.object_name()?))
            })
            .or_else(|| {
                // `"IstioRevision": "default"`: a Kind key and an object's name.
                self.kind_keyed.iter().find_map(|(key, value)| {
                    let name = value.as_str().filter(|name| is_object_name(name))?;
                    is_kind_key(key).then_some((*key, (None, name)))
                })
            })?;
        self.push_str(Fact::Kind, RANK_KIND_FROM_KEY, key);
        Some(named)
    }

    fn best(&self, fact: Fact) -> Option<&FieldValue<'a>> {
        self.candidates
            .iter()
            .filter(|(candidate, _, _)| *candidate == fact)
            .min_by_key(|(_, rank, _)| *rank)
            .map(|(_, _, value)| value)
    }

    fn best_str(&self, fact: Fact) -> Option<&'a str> {
        self.best(fact).and_then(FieldValue::as_str)
    }

    fn fill(&self, facts: &mut LogFacts) {
        if facts.time_unix_nano.is_none() {
            let time = self.best(Fact::Time);
            facts.time_unix_nano = time.and_then(time_of);
            facts.zoneless_time = time
                .and_then(FieldValue::as_str)
                .is_some_and(|text| facts.time_unix_nano.is_some() && !has_zone(text));
        }
        fill(&mut facts.level, || {
            self.best_str(Fact::Level).and_then(Level::parse)
        });
        fill(&mut facts.outcome, || self.outcome());
        let text_facts = [
            (&mut facts.logger, Fact::Logger),
            (&mut facts.reconcile_id, Fact::ReconcileId),
            (&mut facts.controller, Fact::Controller),
            (&mut facts.group, Fact::Group),
            (&mut facts.kind, Fact::Kind),
            (&mut facts.namespace, Fact::Namespace),
            (&mut facts.name, Fact::Name),
            (&mut facts.error, Fact::Error),
        ];
        for (slot, fact) in text_facts {
            fill(slot, || self.best_str(fact).map(str::to_string));
        }
        // `"name": "ns/name"` (manifestival and others): the namespace is in the name.
        if let Some((namespace, name)) = facts.name.as_deref().and_then(|n| n.split_once('/'))
            && !namespace.is_empty()
            && !name.is_empty()
            && !name.contains('/')
        {
            let (namespace, name) = (namespace.to_string(), name.to_string());
            facts.namespace.get_or_insert(namespace);
            facts.name = Some(name);
        }
        if facts.message.is_empty() {
            facts.message = self.best_str(Fact::Message).unwrap_or_default().to_string();
        }
    }

    fn outcome(&self) -> Option<LogOutcome> {
        let requeue_after = self
            .best(Fact::RequeueAfterSeconds)
            .and_then(FieldValue::as_f64);
        LogOutcome::from_result(self.best_str(Fact::Result)?, requeue_after)
    }
}

fn fill<T>(slot: &mut Option<T>, value: impl FnOnce() -> Option<T>) {
    if slot.is_none() {
        *slot = value();
    }
}

/// `catalogsource.name` → (`catalogsource`, name), `.namespace` likewise, and
/// camelCase `clusterName`/`clusterNamespace` (nifikop): a key that names an object
/// of the Kind before the dot, underscore or capital.
fn prefixed_name_key(key: &str) -> Option<(&str, Fact)> {
    let (kind, fact) = match key.rsplit_once(['.', '_']) {
        Some((kind, "name" | "Name")) => (kind, Fact::Name),
        Some((kind, "namespace" | "Namespace")) => (kind, Fact::Namespace),
        Some(_) => return None,
        None => match key.strip_suffix("Namespace") {
            Some(kind) => (kind, Fact::Namespace),
            None => (key.strip_suffix("Name")?, Fact::Name),
        },
    };
    // OpenTelemetry's own attributes (`code.namespace`, `service.name`) name no object.
    const SEMANTIC_CONVENTIONS: &[&str] = &[
        "code",
        "service",
        "host",
        "process",
        "telemetry",
        "os",
        "container",
        "thread",
        "exception",
        "http",
        "url",
        "net",
        "server",
        "client",
        "db",
        "rpc",
        "messaging",
        "deployment",
        "cloud",
        "faas",
        "otel",
        "span",
        "event",
        "log",
    ];
    // `controller.name` names the controller.
    let is_kind = kind.len() >= 2
        && kind.bytes().all(|b| b.is_ascii_alphabetic())
        && !SEMANTIC_CONVENTIONS.contains(&kind)
        && kind != "controller";
    is_kind.then_some((kind, fact))
}

/// A key that is a Kind: an uppercase letter, then letters and digits, some lowercase.
fn is_kind_key(key: &str) -> bool {
    key.len() >= 2
        && key.starts_with(|c: char| c.is_ascii_uppercase())
        && key.bytes().all(|b| b.is_ascii_alphanumeric())
        && key.bytes().any(|b| b.is_ascii_lowercase())
}

/// A Kubernetes object name (a DNS-1123 subdomain, loosely): lowercase letters,
/// digits, `-` and `.`, starting with a letter or a digit.
pub(super) fn is_object_name(text: &str) -> bool {
    (1..=253).contains(&text.len())
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
}

/// The group and Kind of `group/version, Kind=Kind` (Go's `GroupVersionKind`
/// printed), `/v1, Kind=Pod` (the core group) or `Kind.version.group`.
pub fn parse_group_version_kind(text: &str) -> Option<(&str, &str)> {
    if let Some((group_version, kind)) = text.split_once(", Kind=") {
        let group = group_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group);
        return (!kind.is_empty()).then_some((group, kind));
    }
    let (kind, version_group) = text.split_once('.')?;
    let group = version_group.split_once('.').map_or("", |(_, group)| group);
    let is_kind = kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.bytes().all(|b| b.is_ascii_alphanumeric());
    is_kind.then_some((group, kind))
}

/// A timestamp field: RFC 3339 or epoch seconds, as a string or a number.
fn time_of(value: &FieldValue<'_>) -> Option<u64> {
    match value {
        FieldValue::Str(text) => parse_timestamp(text),
        FieldValue::Int(seconds) => u64::try_from(*seconds).ok()?.checked_mul(1_000_000_000),
        FieldValue::Float(seconds) => epoch_seconds_from_f64(*seconds),
        _ => None,
    }
}

#[cfg(test)]
#[path = "fields_tests.rs"]
mod tests;
