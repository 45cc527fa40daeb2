//! Objects written inside a message rather than in fields: `Kafka(ns/name)`
//! (Strimzi), `[ns/name] …` (kopf), `Kustomization/name.ns - …` (`flux logs`),
//! `Kind ns/name`, `syncing deployment ns/name`, `item "ns/name"`,
//! `Kind:"X", Namespace:"Y", Name:"Z"`, `namespace=X, name=Y`, kubectl's
//! `deployment/name` and Istio's `Kind/ns/name`.

use super::fields::is_object_name;

/// An object a message names; the Kind when the message gives one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageObject<'a> {
    pub kind: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

/// Words after which a lowercase word is the Kind of the object that follows
/// (`Error syncing deployment ns/name`).
/// Built-in kinds as messages write them in lowercase (`acquired lease ns/name`).
const LOWERCASE_KINDS: &[&str] = &[
    "pod",
    "deployment",
    "statefulset",
    "daemonset",
    "replicaset",
    "job",
    "cronjob",
    "service",
    "configmap",
    "secret",
    "lease",
    "endpoints",
    "ingress",
    "node",
    "namespace",
    "persistentvolumeclaim",
    "pvc",
    "serviceaccount",
    "certificate",
];

/// Words that stand where a Kind would but name none (`syncing item 'ns/name'`).
const GENERIC_NOUNS: &[&str] = &["item", "key", "object", "resource", "request", "for", "of"];

const VERBS: &[&str] = &[
    "syncing",
    "reconciling",
    "processing",
    "deleting",
    "removing",
    "updating",
    "creating",
];

/// The first object the message names, in the most specific shape found.
pub fn find(message: &str) -> Option<MessageObject<'_>> {
    let head = cut(message, 1024);
    // The word-wise shapes share one split of the message.
    let words: Vec<&str> = head.split_whitespace().collect();
    kopf_prefix(head)
        .or_else(|| key_after_controller(head))
        .or_else(|| flux_cli(head))
        .or_else(|| kind_call(head))
        .or_else(|| slashed_kind(head))
        .or_else(|| keyed_fields(head))
        .or_else(|| kind_then_path(&words))
        .or_else(|| quoted_path(head))
        .or_else(|| kind_then_quoted_name(&words))
        .or_else(|| object_ref_word(head))
        .or_else(|| verb_kind_name(&words))
        .or_else(|| resource_after_kind(&words))
        .or_else(|| reconciled_quoted_name(head, &words))
        .or_else(|| builtin_kind_and_name(&words))
}

/// A built-in Kind and a bare name: `Missing timestamp for Node ip-172-31-74-0.`,
/// `[Pod: mariadb-sample-6b59]`, `pod=my-cluster-2`. Only a name with a digit or a
/// `-` is taken, so that prose (`Pod is ready`) names nothing.
fn builtin_kind_and_name<'a>(words: &[&'a str]) -> Option<MessageObject<'a>> {
    let is_builtin = |kind: &str| {
        LOWERCASE_KINDS
            .iter()
            .any(|builtin| builtin.eq_ignore_ascii_case(kind))
            && !kind.eq_ignore_ascii_case("namespace")
    };
    let is_generated_name = |name: &str| {
        is_object_name(name) && name.contains(|c: char| c == '-' || c.is_ascii_digit())
    };
    let keyed = words.iter().find_map(|word| {
        let (kind, name) = word.split_once('=')?;
        (LOWERCASE_KINDS.contains(&kind) && kind != "namespace" && is_generated_name(name))
            .then_some((kind, name))
    });
    let spaced = || {
        words.windows(2).find_map(|pair| {
            let [kind, name] = *pair else {
                return None;
            };
            let kind = kind.trim_start_matches('[').trim_end_matches(':');
            let name = name.trim_end_matches([']', '.', ',', ';', ':']);
            (kind.starts_with(|c: char| c.is_ascii_uppercase())
                && is_builtin(kind)
                && is_generated_name(name))
            .then_some((kind, name))
        })
    };
    let (kind, name) = keyed.or_else(spaced)?;
    Some(MessageObject {
        kind: Some(kind),
        namespace: None,
        name,
    })
}

/// `Certificate "example-com-tls"`: a Kind and a quoted name, no namespace.
fn kind_then_quoted_name<'a>(words: &[&'a str]) -> Option<MessageObject<'a>> {
    words.windows(2).find_map(|pair| {
        let [kind, quoted] = *pair else {
            return None;
        };
        let name = quoted.strip_prefix('"').and_then(|rest| {
            rest.trim_end_matches([':', ',', ';', '.'])
                .strip_suffix('"')
        })?;
        (is_kind(kind) && is_object_name(name)).then_some(MessageObject {
            kind: Some(kind),
            namespace: None,
            name,
        })
    })
}

fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// `[ns/name] message`, as kopf prefixes its per-object lines.
fn kopf_prefix(message: &str) -> Option<MessageObject<'_>> {
    let inner = message.strip_prefix('[')?;
    let (path, _) = inner.split_once("] ")?;
    path_object(None, path)
}

/// `Kustomization/apps.flux-system - message`, as `flux logs` prints objects.
fn flux_cli(message: &str) -> Option<MessageObject<'_>> {
    let (subject, _) = message.split_once(" - ")?;
    let (kind, named) = subject.split_once('/')?;
    let (name, namespace) = named.rsplit_once('.')?;
    (is_kind(kind) && is_object_name(name) && is_object_name(namespace)).then_some(MessageObject {
        kind: Some(kind),
        namespace: Some(namespace),
        name,
    })
}

/// `Kind(ns/name)`, as Strimzi names the reconciled resource.
fn kind_call(message: &str) -> Option<MessageObject<'_>> {
    for (open, _) in message.match_indices('(') {
        let kind = word_before(message, open);
        let Some(inner) = message.get(open + 1..) else {
            continue;
        };
        let Some((path, _)) = inner.split_once(')') else {
            continue;
        };
        if is_kind(kind)
            && path.contains('/')
            && let Some(object) = path_object(Some(kind), path)
        {
            return Some(object);
        }
    }
    None
}

/// `deployment/name` (kubectl's notation, built-in kinds in lowercase) and
/// `EnvoyFilter/ns/name` (Istio's config keys), as words of their own or between
/// `|`, brackets or quotes.
fn slashed_kind(message: &str) -> Option<MessageObject<'_>> {
    message
        .split(|c: char| c.is_whitespace() || matches!(c, '|' | '[' | ']' | '(' | ')' | '"' | '\''))
        .find_map(|word| {
            let word = word.trim_end_matches([':', '.', ',', ';']);
            let mut parts = word.split('/');
            let (kind, first, second) = (parts.next()?, parts.next()?, parts.next());
            if parts.next().is_some() || kind.eq_ignore_ascii_case("namespace") {
                return None;
            }
            let (namespace, name) = match second {
                Some(name) if is_kind(kind) => (Some(first), name),
                None if LOWERCASE_KINDS.contains(&kind) => (None, first),
                _ => return None,
            };
            (is_object_name(name) && namespace.is_none_or(is_object_name)).then_some(
                MessageObject {
                    kind: Some(kind),
                    namespace,
                    name,
                },
            )
        })
}

/// `Kind ns/name`, `Kind "ns/name"`, `syncing deployment ns/name`.
fn kind_then_path<'a>(words: &[&'a str]) -> Option<MessageObject<'a>> {
    words.windows(2).enumerate().find_map(|(at, pair)| {
        let [kind, path] = *pair else {
            return None;
        };
        let path = unquote(path);
        if !path.contains('/') {
            return None;
        }
        let after_verb = at
            .checked_sub(1)
            .and_then(|before| words.get(before))
            .is_some_and(|verb| is_verb(verb));
        if GENERIC_NOUNS.contains(&kind) {
            return path_object(None, path);
        }
        let kind_like = is_kind(kind)
            || LOWERCASE_KINDS.contains(&kind)
            || (after_verb && kind.bytes().all(|b| b.is_ascii_lowercase()) && !kind.is_empty());
        kind_like.then(|| path_object(Some(kind), path)).flatten()
    })
}

/// A quoted or bracketed `"ns/name"`, `'ns/name'`, `[ns/name]` anywhere
/// (`Re-queuing item "default/example"`, Knative's `[ns/name] message`).
fn quoted_path(message: &str) -> Option<MessageObject<'_>> {
    message
        .split_whitespace()
        .filter(|word| word.starts_with(['"', '\'', '[']))
        .map(|word| unquote(word.trim_start_matches('[').trim_end_matches(']')))
        .filter(|word| word.contains('/'))
        .find_map(|path| path_object(None, path))
}

/// The Kind a message gives the object `name` in key-value form (kopf's body dump:
/// `'kind': 'ImageReplication', 'metadata': {'name': 'x', …}`).
pub fn kind_of_named<'a>(message: &'a str, name: &str) -> Option<&'a str> {
    let object = keyed_fields(cut(message, 1024))?;
    (object.name == name).then_some(object.kind).flatten()
}

/// `Kind:"Subscription", Namespace:"default", Name:"x"` (a Go struct printed),
/// `'kind': 'X', … 'name': 'y'` (a Python dict), `state.Key.Namespace=y` and
/// `namespace=X, name=Y`: a name, with a namespace or a Kind.
fn keyed_fields(message: &str) -> Option<MessageObject<'_>> {
    let mut kind = None;
    let mut namespace = None;
    let mut name = None;
    for (key, value) in key_values(message) {
        match key.to_ascii_lowercase().as_str() {
            // The API's `Status` of an error dump is no object of the operator's.
            "kind" if is_kind(value) && value != "Status" => kind = kind.or(Some(value)),
            "namespace" if is_object_name(value) => namespace = namespace.or(Some(value)),
            "name" if is_object_name(value) => name = name.or(Some(value)),
            _ => {}
        }
    }
    let name = name?;
    (kind.is_some() || namespace.is_some()).then_some(MessageObject {
        kind,
        namespace,
        name,
    })
}

/// The `key: value` and `key=value` pairs of a text whose key is `kind`, `name` or
/// `namespace` (the last part of a dotted key), quoted or not.
fn key_values(text: &str) -> impl Iterator<Item = (&str, &str)> {
    const KEYS: &[&str] = &["kind", "namespace", "name"];
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            let start = at;
            at += 1;
            let Some(key) = KEYS.iter().find(|key| {
                bytes
                    .get(start..start + key.len())
                    .is_some_and(|word| word.eq_ignore_ascii_case(key.as_bytes()))
            }) else {
                continue;
            };
            let before = start.checked_sub(1).and_then(|i| bytes.get(i));
            if before.is_some_and(|b| b.is_ascii_alphanumeric()) {
                continue;
            }
            let mut end = start + key.len();
            let skip = |end: &mut usize, set: &[u8]| {
                while bytes.get(*end).is_some_and(|b| set.contains(b)) {
                    *end += 1;
                }
            };
            skip(&mut end, b"'\"");
            if !matches!(bytes.get(end), Some(b':' | b'=')) {
                continue;
            }
            end += 1;
            skip(&mut end, b" '\"\\");
            let value_start = end;
            while bytes
                .get(end)
                .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            {
                end += 1;
            }
            at = end;
            let key_text = text.get(start..start + key.len())?;
            let value = text.get(value_start..end)?.trim_end_matches('.');
            if !value.is_empty() {
                return Some((key_text, value));
            }
        }
        None
    })
}

/// `istiooperators.install.istio.io "example" not found`: an API error's
/// `resource.group "name"`; the Kind is the resource's singular.
pub fn api_error_object(message: &str) -> Option<(&str, &str)> {
    let mut words = message.split(' ').peekable();
    while let Some(word) = words.next() {
        let Some(next) = words.peek() else {
            break;
        };
        let qualified = word.trim_start_matches(|c: char| !c.is_ascii_lowercase());
        let Some((resource, group)) = qualified.split_once('.') else {
            continue;
        };
        let quoted = next
            .trim_start_matches('\\')
            .strip_prefix('"')
            .and_then(|rest| rest.split(['"', '\\']).next());
        let valid = resource.bytes().all(|b| b.is_ascii_lowercase())
            && resource.len() >= 2
            && group.contains('.')
            && group
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
        if valid && let Some(name) = quoted.filter(|name| is_object_name(name)) {
            return Some((resource, name));
        }
    }
    None
}

/// Knative's `[controller] [ns/name] message`: the key the controller reconciles,
/// before any object the message goes on to name.
fn key_after_controller(message: &str) -> Option<MessageObject<'_>> {
    let controller = named_controller(message)?;
    let after = message.split_once(controller)?.1.strip_prefix("] [")?;
    let (path, _) = after.split_once(']')?;
    path_object(None, path)
}

/// The controller a message names: in brackets, as Knative's test logs print it
/// (`[route-controller] [ns/name] message`), or as a prefix (`ingress-shim
/// controller: syncing item`, old cert-manager).
pub fn named_controller(message: &str) -> Option<&str> {
    let head = cut(message, 1024);
    let is_name = |name: &str| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let bracketed = head
        .split_whitespace()
        .filter_map(|word| word.strip_prefix('[')?.strip_suffix(']'))
        .find(|name| {
            (name.ends_with("-controller") || name.ends_with("-reconciler")) && is_name(name)
        });
    bracketed.or_else(|| {
        let (before, _) = head.split_once(" controller: ")?;
        let name = before.rsplit(' ').next()?;
        is_name(name).then_some(name)
    })
}

/// Words after a verb that tell how it went, not what it was of (`reconciling err:
/// …`).
const OUTCOME_WORDS: &[&str] = &[
    "err", "error", "failed", "failure", "done", "finished", "ok",
];

/// kube-rs's `ObjectRef` written in a message (`tried to reconcile object
/// Build.v1alpha1.fl0.dev/build.fl0-build that was not found`).
fn object_ref_word(message: &str) -> Option<MessageObject<'_>> {
    message.split_whitespace().find_map(|word| {
        let word = word.trim_end_matches([',', ';', ':']);
        let (type_part, _) = word.split_once('/')?;
        let object = super::kube_rs::parse_object_ref(word)?;
        (type_part.contains('.')
            && is_kind(object.kind)
            && is_object_name(object.name)
            && object.namespace.is_none_or(is_object_name))
        .then_some(MessageObject {
            kind: Some(object.kind),
            namespace: object.namespace,
            name: object.name,
        })
    })
}

/// `Reconciling topic job.request,`, `Deleting topic 'job.request'` (Strimzi),
/// `Reconciling build: my-build` (kube-rs examples): a verb, a lowercase Kind and a
/// name, which after a colon may be any name and else is quoted or holds a `.`, `-`
/// or digit.
fn verb_kind_name<'a>(words: &[&'a str]) -> Option<MessageObject<'a>> {
    words.windows(3).find_map(|triple| {
        let [verb, kind, named] = *triple else {
            return None;
        };
        let (kind, colon) = match kind.strip_suffix(':') {
            Some(kind) => (kind, true),
            None => (kind, false),
        };
        let name = unquote(named);
        let quoted = name.len() + 1 < named.trim_end_matches([',', ';', ':', '.']).len();
        let kind_like = kind.len() >= 2
            && kind.bytes().all(|b| b.is_ascii_lowercase())
            && !GENERIC_NOUNS.contains(&kind)
            && !OUTCOME_WORDS.contains(&kind);
        let name_like = is_object_name(name)
            && (colon
                || quoted
                || name.contains(|c: char| matches!(c, '.' | '-') || c.is_ascii_digit()));
        (is_verb(verb) && kind_like && name_like).then_some(MessageObject {
            kind: Some(kind),
            namespace: None,
            name,
        })
    })
}

/// Whether a word is one of the [`VERBS`], in any case.
fn is_verb(word: &str) -> bool {
    VERBS.iter().any(|verb| verb.eq_ignore_ascii_case(word))
}

/// `KafkaTopic watch received event DELETED on resource job.request`: a CamelCase
/// Kind, then the object named as `on resource <name>` (or `for resource`).
fn resource_after_kind<'a>(words: &[&'a str]) -> Option<MessageObject<'a>> {
    let at = words.windows(2).position(|pair| {
        matches!(pair, [preposition, "resource"] if *preposition == "on" || *preposition == "for")
    })? + 1;
    let named = words.get(at + 1)?;
    let name = named.trim_end_matches([',', ';', ':']);
    let kind =
        words.get(..at)?.iter().rev().find(|word| {
            is_kind(word) && word.bytes().filter(u8::is_ascii_uppercase).count() >= 2
        })?;
    is_object_name(name).then_some(MessageObject {
        kind: Some(kind),
        namespace: None,
        name,
    })
}

/// The Kind a message states on its own: `type: StatefulSet`, or a fabric8 model
/// class (`type: class io.fabric8.kubernetes.api.model.apps.StatefulSet`).
pub fn stated_type(message: &str) -> Option<&str> {
    let (_, after) = message.split_once("type: ")?;
    let word = after.split_whitespace().find(|word| *word != "class")?;
    let word = word.trim_end_matches([',', ';', '.']);
    let kind = match word.strip_prefix("io.fabric8.kubernetes.api.model.") {
        Some(class) => class.rsplit('.').next()?,
        None => word,
    };
    is_kind(kind).then_some(kind)
}

/// A quoted name in a message about a reconcile, as Java operators write it
/// (`Starting reconcile operation for 'microcks'`).
fn reconciled_quoted_name<'a>(message: &str, words: &[&'a str]) -> Option<MessageObject<'a>> {
    if !super::contains_ignore_case(message, "reconcil") {
        return None;
    }
    words.windows(2).find_map(|pair| {
        let [before, quoted] = *pair else {
            return None;
        };
        if before != "for" {
            return None;
        }
        let name = unquote(quoted.trim_end_matches([':', ',', ';', '.']));
        (name != quoted && is_object_name(name)).then_some(MessageObject {
            kind: None,
            namespace: None,
            name,
        })
    })
}

/// The namespace a message names on its own: `in namespace X`, `Namespace/X`.
pub fn namespace_phrase(message: &str) -> Option<&str> {
    let head = cut(message, 1024);
    let words: Vec<&str> = head.split_whitespace().collect();
    words.iter().enumerate().find_map(|(at, word)| {
        let candidate = if let Some(rest) = word.strip_prefix("Namespace/") {
            rest
        } else if word.eq_ignore_ascii_case("namespace")
            && at
                .checked_sub(1)
                .and_then(|before| words.get(before))
                .is_some_and(|before| before.eq_ignore_ascii_case("in"))
        {
            words.get(at + 1)?
        } else {
            return None;
        };
        let candidate = unquote(candidate);
        is_object_name(candidate).then_some(candidate)
    })
}

fn path_object<'a>(kind: Option<&'a str>, path: &'a str) -> Option<MessageObject<'a>> {
    let path = path.trim_end_matches([':', '.', ',', ';']);
    let (namespace, name) = match path.split_once('/') {
        Some((namespace, name)) => (Some(namespace).filter(|ns| !ns.is_empty()), name),
        None => (None, path),
    };
    let valid =
        is_object_name(name) && namespace.is_none_or(is_object_name) && !is_group_version(path);
    valid.then_some(MessageObject {
        kind,
        namespace,
        name,
    })
}

/// `apps/v1` and the like: an API version, not an object.
fn is_group_version(path: &str) -> bool {
    path.rsplit_once('/').is_some_and(|(_, version)| {
        version
            .strip_prefix('v')
            .is_some_and(|number| number.starts_with(|c: char| c.is_ascii_digit()))
    })
}

fn word_before(text: &str, end: usize) -> &str {
    let before = text.get(..end).unwrap_or_default();
    let start = before
        .rfind(|c: char| !c.is_ascii_alphanumeric())
        .map_or(0, |at| at + 1);
    before.get(start..).unwrap_or_default()
}

fn unquote(word: &str) -> &str {
    word.trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '\\'))
        .trim_end_matches([':', ',', ';', '.'])
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '\\'))
}

/// A Kind: an uppercase letter, then letters and digits.
fn is_kind(word: &str) -> bool {
    word.len() >= 2
        && word.starts_with(|c: char| c.is_ascii_uppercase())
        && word.bytes().all(|b| b.is_ascii_alphanumeric())
        && word.bytes().any(|b| b.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(message: &str) -> Option<(Option<&str>, Option<&str>, &str)> {
        find(message).map(|o| (o.kind, o.namespace, o.name))
    }

    #[test]
    fn controllers_named_in_messages() {
        // https://github.com/knative/operator/issues/259
        let line = "kubelogs.go:197: I 20:32:35.272 controller-9b998cd47-5cjw4 [route-controller] [serving-tests/upgrade-probe] Updating targeted revisions.";
        assert_eq!(named_controller(line), Some("route-controller"));
        // https://github.com/cert-manager/cert-manager/issues/568
        assert_eq!(
            named_controller("ingress-shim controller: syncing item 'default/example'"),
            Some("ingress-shim")
        );
        let first = "kubelogs.go:197: I 20:32:35.272 controller-9b998cd47-5cjw4 [route-controller] [serving-tests/upgrade-probe] Revision serving-tests/upgrade-probe-66gn5 is inactive";
        assert_eq!(
            object(first),
            Some((None, Some("serving-tests"), "upgrade-probe"))
        );
        assert_eq!(named_controller("[ns/name] Handler called"), None);
        // https://github.com/microcks/microcks-operator/blob/089dd9c221ece39c66f638e2eccd402c42ead13d/README.md
        assert_eq!(
            object("Starting reconcile operation for 'microcks'"),
            Some((None, None, "microcks"))
        );
        assert_eq!(object("waiting for 'microcks'"), None);
    }

    #[test]
    fn strimzi_topic_operator_lines() {
        // https://github.com/strimzi/strimzi-kafka-operator/issues/1157
        assert_eq!(
            object(
                "KafkaTopic watch received event DELETED on resource job.request with labels {strimzi.io/kind=topic}"
            ),
            Some((Some("KafkaTopic"), None, "job.request"))
        );
        assert_eq!(
            object("Reconciling topic job.request, k8sTopic:null, kafkaTopic:nonnull"),
            Some((Some("topic"), None, "job.request"))
        );
        assert_eq!(
            object("Deleting topic 'job.request'"),
            Some((Some("topic"), None, "job.request"))
        );
        assert_eq!(
            object("Success processing KafkaTopic watch event DELETED on resource job.request"),
            Some((Some("KafkaTopic"), None, "job.request"))
        );
        assert_eq!(object("Reconciling topic changes now"), None);
        assert_eq!(
            object(
                r#"pods is forbidden: User "system:serviceaccount:ml:op" cannot list resource "pods" in API group """#
            ),
            None
        );
    }

    #[test]
    fn kinds_stated_as_types_and_object_refs() {
        // https://github.com/operator-framework/java-operator-sdk/issues/2290
        assert_eq!(
            stated_type(
                "Updating target resource with type: class io.fabric8.kubernetes.api.model.apps.StatefulSet, with id: ResourceID{name='a'}"
            ),
            Some("StatefulSet")
        );
        assert_eq!(
            stated_type(
                "On update event received for resource id: ResourceID{name='a'} type: StatefulSet version: 1"
            ),
            Some("StatefulSet")
        );
        assert_eq!(stated_type("content type: application/json"), None);
        // https://github.com/kube-rs/kube/issues/1167
        assert_eq!(
            object(
                "tried to reconcile object Build.v1alpha1.fl0.dev/build.fl0-build that was not found in local store"
            ),
            Some((Some("Build"), Some("fl0-build"), "build"))
        );
    }

    #[test]
    fn a_verb_a_kind_and_a_name() {
        // https://github.com/kube-rs/kube/issues/1167
        assert_eq!(
            object("Reconciling build: build"),
            Some((Some("build"), None, "build"))
        );
        assert_eq!(
            object("removing build: build"),
            Some((Some("build"), None, "build"))
        );
        assert_eq!(object("Reconciling failed: Timeout"), None);
        // https://github.com/istio/istio/issues/20021
        assert_ne!(
            object(r#"reconciling err: istiooperators.install.istio.io "example-istiocontrolplane" not found"#)
                .and_then(|(kind, _, _)| kind),
            Some("err")
        );
    }

    #[test]
    fn built_in_kinds_before_bare_names() {
        // https://github.com/kubernetes/minikube/issues/9322
        assert_eq!(
            object("Missing timestamp for Node ip-172-31-74-0. Assuming now as a timestamp."),
            Some((Some("Node"), None, "ip-172-31-74-0"))
        );
        // https://github.com/opendatahub-io/data-science-pipelines-operator/issues/186
        assert_eq!(
            object("Reconcile event triggered by [Pod: mariadb-sample-6b59bdf8b-xgmjm] "),
            Some((Some("Pod"), None, "mariadb-sample-6b59bdf8b-xgmjm"))
        );
        // https://github.com/Shin-jongwhan/kubernetes/blob/4164f9ed55deaa9eac4dcc8a2affaf7f3b5b9e21/installation/mysql_innodb_cluster/readme.md
        assert_eq!(
            object("on_pod_create: pod=my-mysql-innodbcluster-2 ContainersReady=True Ready=False"),
            Some((Some("pod"), None, "my-mysql-innodbcluster-2"))
        );
        assert_eq!(object("Pod is ready"), None);
        assert_eq!(object("Node ready after restart"), None);
    }

    #[test]
    fn slashed_kinds_of_kubectl_and_istio() {
        // https://github.com/tmforum-oda/oda-canvas/blob/33a882b6ae900ead0aaea7c1bb743845f4e7543f/TEMP/analysis/compop.log
        assert_eq!(
            object(
                "[prodcat-productcatalogmanagement|deployment/prodcat-partyroleapi|adopt_deployment|adopt_deployment] Handler called: "
            ),
            Some((Some("deployment"), None, "prodcat-partyroleapi"))
        );
        // https://github.com/istio/istio/issues/37445
        assert_eq!(
            object(
                "Push debounce stable[127] 1 for config EnvoyFilter/istio-system/wasm-service: 100.7339ms since last change"
            ),
            Some((Some("EnvoyFilter"), Some("istio-system"), "wasm-service"))
        );
        assert_eq!(object("GET apis/apps/v1 done"), None);
        assert_eq!(object("found widget/x and Namespace/bar"), None);
    }

    #[test]
    fn shapes_of_objects_in_messages() {
        assert_eq!(
            object("Reconciliation #4854(timer) Kafka(default/tom-kafka): reconciled"),
            Some((Some("Kafka"), Some("default"), "tom-kafka"))
        );
        assert_eq!(
            object("[tenant1/platform1] Handler 'delete_lease' succeeded."),
            Some((None, Some("tenant1"), "platform1"))
        );
        assert_eq!(
            object(
                "Kustomization/apps.flux-system - Reconciliation finished in 3.9s, next run in 10m0s"
            ),
            Some((Some("Kustomization"), Some("flux-system"), "apps"))
        );
        assert_eq!(
            object("Error syncing deployment kube-system/coredns: timeout"),
            Some((Some("deployment"), Some("kube-system"), "coredns"))
        );
        assert_eq!(
            object("ingress-shim controller: Re-queuing item \"default/example\" due to error"),
            Some((None, Some("default"), "example"))
        );
        assert_eq!(
            object(
                "Event(v1.ObjectReference{Kind:\"Subscription\", Namespace:\"default\", Name:\"trigger-x\"})"
            ),
            Some((Some("Subscription"), Some("default"), "trigger-x"))
        );
        assert_eq!(
            object("reconciling namespace=prod, name=web"),
            Some((None, Some("prod"), "web"))
        );
        assert_eq!(
            object(
                "Creation is in progress: {'apiVersion': 'orbit.aws/v1', 'kind': 'ImageReplication', 'metadata': {'name': 'image-replication-929js', 'namespace': 'orbit-system'}}"
            ),
            Some((
                Some("ImageReplication"),
                Some("orbit-system"),
                "image-replication-929js"
            ))
        );
        assert_eq!(
            object(
                "state.Key.Namespace=everest-olm state.Key.Name=everest-catalog state.State=READY"
            ),
            Some((None, Some("everest-olm"), "everest-catalog"))
        );
        assert_eq!(
            api_error_object(
                "reconciling err: istiooperators.install.istio.io \"example-istiocontrolplane\" not found"
            ),
            Some(("istiooperators", "example-istiocontrolplane"))
        );
        assert_eq!(api_error_object("see https://a.b \"x\""), None);
        assert_eq!(
            object("Deleting Deployment /cluster-thing"),
            Some((Some("Deployment"), None, "cluster-thing"))
        );
    }

    #[test]
    fn prose_urls_and_versions_name_nothing() {
        assert_eq!(object("Starting workers"), None);
        assert_eq!(object("GET https://10.0.0.1/api/v1 200"), None);
        assert_eq!(object("Using Scheme apps/v1"), None);
        assert_eq!(object("the answer is 42/7"), None);
    }
}
