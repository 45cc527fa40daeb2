//! kube-rs `tracing` output: the default `fmt` text format (`ts LEVEL spans{fields}:
//! target: message k=v`), its JSON format, and the `object.ref` of `reconciling object`.

use std::borrow::Cow;

use super::json_line::{JsonObject, JsonValue};

use super::fields::FieldValue;
use super::kv::read_quoted;
use super::{Level, LogFacts, LogFormat, facts_from_fields};
use opscope_model::timestamp::parse_rfc3339;

/// The object a kube-rs `ObjectRef` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeObjectRef<'a> {
    pub kind: &'a str,
    /// Empty for the core group.
    pub group: &'a str,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

/// Built-in kinds that are cluster-scoped; kinds starting with `Cluster` are too.
const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "CustomResourceDefinition",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "APIService",
    "CertificateSigningRequest",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
];

/// Reads `Kind.version.group/name.namespace` (core group: `Pod.v1./name.ns`;
/// cluster-scoped: no `.namespace`). A name may contain dots and the format does not
/// mark the namespace, so a cluster-scoped kind is recognised by name: the built-in
/// ones and kinds starting with `Cluster`.
pub fn parse_object_ref(text: &str) -> Option<KubeObjectRef<'_>> {
    let (type_part, object_part) = text.split_once('/')?;
    let (kind, version_and_group) = type_part.split_once('.')?;
    let group = version_and_group
        .split_once('.')
        .map_or("", |(_, group)| group);
    if kind.is_empty() || object_part.is_empty() {
        return None;
    }
    let (namespace, name) = match object_part.rsplit_once('.') {
        Some((name, namespace)) if !is_cluster_scoped(kind) && !name.is_empty() => {
            (Some(namespace), name)
        }
        _ => (None, object_part),
    };
    Some(KubeObjectRef {
        kind,
        group,
        namespace,
        name,
    })
}

fn is_cluster_scoped(kind: &str) -> bool {
    kind.starts_with("Cluster") || CLUSTER_SCOPED_KINDS.contains(&kind)
}

/// Whether a JSON line is `tracing_subscriber`'s JSON format.
pub fn is_tracing_json(object: &JsonObject) -> bool {
    object.contains_key("target")
        && (object.get("fields").is_some_and(JsonValue::is_object)
            || object.contains_key("timestamp"))
}

/// The facts of a tracing JSON line: the top-level `timestamp`/`level`/`target`, the
/// event's `fields` and the fields of its spans (`span`, `spans`), less span names.
pub fn recognize_json(object: &JsonObject) -> LogFacts {
    let top_level = object
        .iter()
        .filter(|(key, _)| !matches!(*key, "fields" | "span" | "spans"));
    let event_fields = object
        .get("fields")
        .and_then(JsonValue::as_object)
        .into_iter()
        .flat_map(JsonObject::iter);
    let span_fields = object
        .get("span")
        .into_iter()
        .chain(
            object
                .get("spans")
                .and_then(JsonValue::as_array)
                .into_iter()
                .flatten(),
        )
        .filter_map(JsonValue::as_object)
        .flat_map(JsonObject::iter)
        .filter(|(key, _)| *key != "name");
    let fields = top_level
        .chain(event_fields)
        .chain(span_fields)
        .filter_map(|(key, value)| Some((key, FieldValue::from_json(value)?)));
    let mut facts = LogFacts::of_format(LogFormat::KubeRs);
    facts_from_fields(fields, &mut facts);
    facts
}

/// The facts of a tracing `fmt` text line: `2024-05-01T12:00:00.123456Z  INFO
/// reconciling object{object.ref=.. object.reason=..}: controller: message error=..`.
pub fn recognize_text(line: &str) -> Option<LogFacts> {
    let (time, rest) = line.split_once(' ')?;
    let time = parse_rfc3339(time)?;
    let rest = rest.trim_start();
    let (level, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let level = tracing_level(level)?;
    let (spans, rest) = split_spans(rest.trim_start());
    let (target, body) = split_target(rest);
    let (message, event_fields) = split_fields(body);
    let mut facts = LogFacts {
        time_unix_nano: Some(time),
        level: Some(level),
        logger: target.map(str::to_string),
        message: message.to_string(),
        ..LogFacts::of_format(LogFormat::KubeRs)
    };
    let span_fields = spans.into_iter().flat_map(|span| split_fields(span).1);
    let fields: Vec<_> = span_fields.chain(event_fields).collect();
    facts_from_fields(
        fields
            .iter()
            .map(|(key, value)| (*key, FieldValue::Str(value))),
        &mut facts,
    );
    Some(facts)
}

/// tracing's level, exactly as `fmt` prints it.
fn tracing_level(word: &str) -> Option<Level> {
    match word {
        "ERROR" | "WARN" | "INFO" | "DEBUG" | "TRACE" => Level::parse(word),
        _ => None,
    }
}

/// The field lists of the leading span section (`a{x=1}:b{y=2}: `) and what follows;
/// no spans when the text before the first `: ` outside braces has no braces.
fn split_spans(text: &str) -> (Vec<&str>, &str) {
    let Some(end) = span_section_end(text) else {
        return (Vec::new(), text);
    };
    let (section, rest) = text.split_at_checked(end).unwrap_or((text, ""));
    if !section.contains('{') {
        return (Vec::new(), text);
    }
    (brace_groups(section), rest.get(2..).unwrap_or_default())
}

/// Where the first `: ` outside braces starts.
fn span_section_end(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let bytes = text.as_bytes();
    for (index, byte) in bytes.iter().enumerate() {
        match byte {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && bytes.get(index + 1) == Some(&b' ') => return Some(index),
            _ => {}
        }
    }
    None
}

/// The contents of each outermost `{...}` of a span section.
fn brace_groups(section: &str) -> Vec<&str> {
    let mut groups = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, byte) in section.bytes().enumerate() {
        match byte {
            b'{' => {
                if depth == 0 {
                    start = index + 1;
                }
                depth += 1;
            }
            b'}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    groups.extend(section.get(start..index));
                }
            }
            _ => {}
        }
    }
    groups
}

/// The event's target (`kube_runtime::controller: `) and the text after it.
fn split_target(text: &str) -> (Option<&str>, &str) {
    match text.split_once(": ") {
        Some((target, body)) if is_module_path(target) => (Some(target), body),
        _ => (None, text),
    }
}

fn is_module_path(text: &str) -> bool {
    !text.is_empty()
        && text
            .split("::")
            .all(|segment| !segment.is_empty() && segment.bytes().all(is_identifier_byte))
}

/// `message key=value key2="quoted"` split into the message and its fields, the way
/// tracing writes them: a value runs to the next ` key=` unless it is quoted.
fn split_fields(text: &str) -> (&str, Vec<(&str, Cow<'_, str>)>) {
    let Some(first) = next_field_start(text, 0) else {
        return (text.trim_end(), Vec::new());
    };
    let message = text.get(..first).unwrap_or_default().trim_end();
    let mut fields = Vec::new();
    let mut at = Some(first);
    while let Some(start) = at {
        let Some((key, value, next)) = read_field(text, start) else {
            break;
        };
        fields.push((key, value));
        at = next;
    }
    (message, fields)
}

/// The field at `start` (`key=value`), and where the next one starts.
fn read_field(text: &str, start: usize) -> Option<(&str, Cow<'_, str>, Option<usize>)> {
    let (key, value_text) = text.get(start..)?.split_once('=')?;
    let value_start = start + key.len() + 1;
    if let Some(quoted) = value_text.strip_prefix('"') {
        let (value, rest) = read_quoted(quoted);
        let rest_start = text.len() - rest.len();
        return Some((key, value, next_field_start(text, rest_start)));
    }
    let next = next_field_start(text, value_start);
    let value_end = next.map_or(text.len(), |next| next - 1);
    let value = text
        .get(value_start..value_end)
        .unwrap_or_default()
        .trim_end();
    Some((key, Cow::Borrowed(value), next))
}

/// The start of the first `key=` at or after `from` that begins the text or follows a
/// space (a field name is letters, digits, `_` and `.`).
fn next_field_start(text: &str, from: usize) -> Option<usize> {
    if from == 0 && field_starts_at(text, 0) {
        return Some(0);
    }
    text.get(from..)?
        .match_indices(' ')
        .map(|(index, _)| from + index + 1)
        .find(|&start| field_starts_at(text, start))
}

fn field_starts_at(text: &str, start: usize) -> bool {
    let Some(rest) = text.get(start..) else {
        return false;
    };
    let name_len = rest
        .bytes()
        .take_while(|b| is_identifier_byte(*b) || *b == b'.')
        .count();
    name_len > 0 && rest.as_bytes().get(name_len) == Some(&b'=')
}

fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fixtures::{KUBE_RS, at, line, some};
    use super::super::{LogOutcome, recognize_line};
    use super::*;

    fn kube_line(index: usize) -> LogFacts {
        recognize_line(line(KUBE_RS, index))
    }

    /// The facts of a line inside kube-rs's `reconciling object` span for `Document`s.
    fn document(namespace: &str, name: &str) -> LogFacts {
        LogFacts {
            format: LogFormat::KubeRs,
            logger: some("controller::controller"),
            kind: some("Document"),
            group: some("kube.rs"),
            namespace: some(namespace),
            name: some(name),
            ..LogFacts::default()
        }
    }

    #[test]
    fn reconciling_object_span() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_800, 123_456_000),
            level: Some(Level::Info),
            message: "Reconciling Document \"samuel\" in default".into(),
            starts_reconcile: true,
            ..document("default", "samuel")
        };
        assert_eq!(kube_line(0), expected);
    }

    #[test]
    fn nested_spans_and_event_fields() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_800, 234_567_000),
            level: Some(Level::Debug),
            message: "patched status".into(),
            // The kube-rs example's own status patch, told in its log.
            status_write: true,
            ..document("default", "samuel")
        };
        assert_eq!(kube_line(1), expected);
    }

    #[test]
    fn core_group_object_with_a_colon_in_the_reason() {
        let expected = LogFacts {
            format: LogFormat::KubeRs,
            time_unix_nano: at(1_714_564_801, 1_000),
            level: Some(Level::Info),
            logger: some("configmap_sync"),
            message: "synced configmap".into(),
            kind: some("ConfigMap"),
            namespace: some("kube-system"),
            name: some("settings"),
            ..LogFacts::default()
        };
        assert_eq!(kube_line(2), expected);
    }

    #[test]
    fn cluster_scoped_objects() {
        let issuer = kube_line(3);
        assert_eq!(issuer.kind.as_deref(), Some("ClusterIssuer"));
        assert_eq!(issuer.group.as_deref(), Some("cert-manager.io"));
        assert_eq!(issuer.namespace, None);
        assert_eq!(issuer.name.as_deref(), Some("letsencrypt-prod"));
        let node = kube_line(4);
        assert_eq!(node.group, None);
        assert_eq!(node.namespace, None);
        assert_eq!(node.name.as_deref(), Some("ip-10-0-1-23.ec2.internal"));
    }

    #[test]
    fn error_policy_warning() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_802, 1_000),
            level: Some(Level::Warn),
            message: "reconcile failed: Finalizer Error: failed to apply finalizer".into(),
            outcome: Some(LogOutcome::Error),
            ..document("default", "lorem")
        };
        assert_eq!(kube_line(5), expected);
    }

    #[test]
    fn reconciler_failed_with_error_field() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_803, 500_000_000),
            level: Some(Level::Error),
            logger: some("kube_runtime::controller"),
            message: "reconciler failed".into(),
            error: some(
                "ApiError: Operation cannot be fulfilled on documents.kube.rs \"lorem\": the \
                 object has been modified; please apply your changes to the latest version and \
                 try again: Conflict (ErrorResponse { status: \"Failure\", reason: \"Conflict\", \
                 code: 409 })",
            ),
            outcome: Some(LogOutcome::Error),
            ..document("default", "lorem")
        };
        assert_eq!(kube_line(6), expected);
    }

    #[test]
    fn requeue_with_quoted_field() {
        let facts = kube_line(7);
        assert_eq!(facts.message, "awaiting rollout, requeueing after 30s");
        assert_eq!(
            facts.outcome,
            Some(LogOutcome::RequeueAfter(Duration::from_secs(30)))
        );
        assert_eq!(facts.name.as_deref(), Some("samuel"));
    }

    #[test]
    fn json_format() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_805, 123_000),
            level: Some(Level::Info),
            message: "Reconciling Document \"samuel\" in default".into(),
            starts_reconcile: true,
            ..document("default", "samuel")
        };
        assert_eq!(kube_line(8), expected);
    }

    #[test]
    fn json_format_error() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_806, 500_000_000),
            level: Some(Level::Warn),
            message: "reconcile failed: Finalizer Error: failed to remove finalizer".into(),
            error: some("FinalizerError(RemoveFinalizer(Api(ErrorResponse { code: 409 })))"),
            outcome: Some(LogOutcome::Error),
            deletion: Some(super::super::DeletionNote::InProgress),
            ..document("default", "lorem")
        };
        assert_eq!(kube_line(9), expected);
    }

    #[test]
    fn colour_codes() {
        let expected = LogFacts {
            time_unix_nano: at(1_714_564_807, 0),
            level: Some(Level::Info),
            message: "Reconciling Document \"samuel\" in default".into(),
            starts_reconcile: true,
            ..document("default", "samuel")
        };
        assert_eq!(kube_line(10), expected);
    }

    #[test]
    fn event_outside_any_span() {
        let expected = LogFacts {
            format: LogFormat::KubeRs,
            time_unix_nano: at(1_714_564_808, 0),
            level: Some(Level::Info),
            logger: some("controller"),
            message: "starting controller".into(),
            ..LogFacts::default()
        };
        assert_eq!(kube_line(11), expected);
    }

    #[test]
    fn every_line_is_recognised() {
        for text in KUBE_RS.lines() {
            assert_eq!(recognize_line(text).format, LogFormat::KubeRs, "{text}");
        }
    }

    #[test]
    fn object_refs() {
        let parsed = |text| parse_object_ref(text).map(|o| (o.kind, o.group, o.namespace, o.name));
        assert_eq!(
            parsed("Pod.v1./web-0.shop"),
            Some(("Pod", "", Some("shop"), "web-0"))
        );
        assert_eq!(
            parsed("Document.v1.kube.rs/a.b.c.default"),
            Some(("Document", "kube.rs", Some("default"), "a.b.c"))
        );
        assert_eq!(
            parsed("Namespace.v1./kube-system"),
            Some(("Namespace", "", None, "kube-system"))
        );
        assert_eq!(
            parsed("Foo.v1.example.com/solo"),
            Some(("Foo", "example.com", None, "solo"))
        );
        for broken in ["", "/", "Pod/x", ".v1./x", "Pod.v1./", "no slash"] {
            assert_eq!(parsed(broken), None, "{broken}");
        }
    }

    #[test]
    fn fields_run_to_the_next_key() {
        let (message, fields) = split_fields("done a=1 b=two words c=\"q=x\" d=");
        assert_eq!(message, "done");
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_ref())).collect();
        assert_eq!(
            fields,
            vec![("a", "1"), ("b", "two words"), ("c", "q=x"), ("d", "")]
        );
    }

    #[test]
    fn unbalanced_braces_do_not_hide_the_message() {
        let facts = recognize_line("2024-05-01T12:00:00Z  INFO x{y=1: target: message");
        assert_eq!(facts.format, LogFormat::KubeRs);
        assert_eq!(facts.message, "x{y=1: target: message");
    }
}
