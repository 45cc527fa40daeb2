//! One object, whatever a source calls it: a Kind (`RayJob`), a resource
//! (`rayjobs`, `rayjobs.ray.io`) or a URL segment. Everything is matched on the
//! lowercase plural resource name, derived from a Kind the way Kubernetes does for
//! CRDs, with the irregular built-in kinds listed.

/// Built-in kinds whose plural is not the regular one.
const IRREGULAR: &[(&str, &str)] = &[
    ("endpoints", "endpoints"),
    ("podsecuritypolicy", "podsecuritypolicies"),
    ("ingress", "ingresses"),
    ("networkpolicy", "networkpolicies"),
    ("priorityclass", "priorityclasses"),
    ("storageclass", "storageclasses"),
    ("runtimeclass", "runtimeclasses"),
    ("ingressclass", "ingressclasses"),
];

/// The lowercase plural resource name of a Kind (`RayJob` → `rayjobs`,
/// `NetworkPolicy` → `networkpolicies`, `Ingress` → `ingresses`).
pub fn plural_of_kind(kind: &str) -> String {
    let mut plural = String::with_capacity(kind.len() + 3);
    push_plural_of_kind(kind, &mut plural);
    plural
}

/// Appends the plural of `kind` to `out` (see [`plural_of_kind`]): a caller that
/// keeps a buffer makes no allocation.
pub fn push_plural_of_kind(kind: &str, out: &mut String) {
    let start = out.len();
    out.push_str(kind);
    let Some(lower) = out.get_mut(start..) else {
        return;
    };
    lower.make_ascii_lowercase();
    let lower: &str = lower;
    if let Some((_, plural)) = IRREGULAR.iter().find(|(k, _)| *k == lower) {
        out.truncate(start);
        out.push_str(plural);
        return;
    }
    let sibilant = lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with("ch")
        || lower.ends_with("sh");
    let consonant_y = lower
        .strip_suffix('y')
        .is_some_and(|stem| !stem.ends_with(['a', 'e', 'i', 'o', 'u']));
    if sibilant {
        out.push_str("es");
    } else if consonant_y {
        out.pop();
        out.push_str("ies");
    } else {
        out.push('s');
    }
}

/// The lowercase Kind of a plural resource name (`rayjobs` → `rayjob`,
/// `networkpolicies` → `networkpolicy`, `ingresses` → `ingress`): the inverse of
/// [`plural_of_kind`], so that the Kind it gives names the same resource.
pub fn singular_of_resource(resource: &str) -> String {
    let lower = resource.to_ascii_lowercase();
    if let Some((kind, _)) = IRREGULAR.iter().find(|(_, plural)| *plural == lower) {
        return (*kind).to_string();
    }
    let candidates = [
        lower.strip_suffix("ies").map(|stem| format!("{stem}y")),
        lower.strip_suffix("es").map(str::to_string),
        lower.strip_suffix('s').map(str::to_string),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|kind| !kind.is_empty() && plural_of_kind(kind) == lower)
        .unwrap_or(lower)
}

/// Whether `short` stands for the CamelCase Kind `word`: its capitals, lowercased
/// (`dspa`), or its last word (`topic` for `KafkaTopic`), but not all of it.
pub fn is_short_for(word: &str, short: &str) -> bool {
    if !word.starts_with(|c: char| c.is_ascii_uppercase()) || word.len() <= short.len() {
        return false;
    }
    let initials = word
        .bytes()
        .filter(u8::is_ascii_uppercase)
        .map(|b| b.to_ascii_lowercase())
        .eq(short.bytes());
    let tail_at = word.len() - short.len();
    let last_word = word.is_char_boundary(tail_at)
        && word
            .as_bytes()
            .get(tail_at)
            .is_some_and(u8::is_ascii_uppercase)
        && word
            .get(tail_at..)
            .is_some_and(|tail| tail.eq_ignore_ascii_case(short));
    initials || last_word
}

/// Splits `rayjobs.ray.io` into (`rayjobs`, `ray.io`); a bare resource has no group.
pub fn split_qualified_resource(qualified: &str) -> (String, String) {
    match qualified.split_once('.') {
        Some((resource, group)) => (resource.to_ascii_lowercase(), group.to_string()),
        None => (qualified.to_ascii_lowercase(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singulars_name_the_same_resource() {
        for (resource, kind) in [
            ("rayjobs", "rayjob"),
            ("networkpolicies", "networkpolicy"),
            ("ingresses", "ingress"),
            ("endpoints", "endpoints"),
            ("mailboxes", "mailbox"),
            ("istiooperators", "istiooperator"),
            ("gateways", "gateway"),
        ] {
            assert_eq!(singular_of_resource(resource), kind);
            assert_eq!(plural_of_kind(&singular_of_resource(resource)), resource);
        }
    }

    #[test]
    fn plurals_follow_kubernetes() {
        for (kind, plural) in [
            ("RayJob", "rayjobs"),
            ("Pod", "pods"),
            ("NetworkPolicy", "networkpolicies"),
            ("Ingress", "ingresses"),
            ("Endpoints", "endpoints"),
            ("Gateway", "gateways"),
            ("Mailbox", "mailboxes"),
            ("Batch", "batches"),
        ] {
            assert_eq!(plural_of_kind(kind), plural, "{kind}");
        }
    }

    #[test]
    fn qualified_resources_split_at_the_first_dot() {
        assert_eq!(
            split_qualified_resource("rayjobs.ray.io"),
            ("rayjobs".into(), "ray.io".into())
        );
        assert_eq!(
            split_qualified_resource("pods"),
            ("pods".into(), String::new())
        );
    }
}
