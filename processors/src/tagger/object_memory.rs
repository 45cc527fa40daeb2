//! What the tagger remembers of the objects records name, so that a record naming an
//! object in part (a name with no Kind, a Kind and name with no namespace) takes the
//! rest from the records that named it whole. Only an unambiguous memory fills a gap.
//! Bounded: past [`MAX_NAMES`] names new ones are not remembered, and a name keeps at
//! most [`MAX_VARIANTS`] objects.

use foldhash::{HashMap, HashMapExt};

use opscope_model::kubernetes::kinds::{is_short_for, plural_of_kind};

/// Object names remembered at most.
pub const MAX_NAMES: usize = 16_384;
/// Objects of one name (in other namespaces, of other kinds) remembered at most.
pub const MAX_VARIANTS: usize = 4;

/// One object as records named it: its Kind and namespace, each where stated.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Known {
    kind: Option<Box<str>>,
    /// `Some("")`: cluster-scoped.
    namespace: Option<Box<str>>,
}

impl Known {
    /// Whether the object may be the one in `namespace`: where either is not known,
    /// it may.
    fn is_in(&self, namespace: Option<&str>) -> bool {
        match (&self.namespace, namespace) {
            (Some(known), Some(namespace)) => **known == *namespace,
            _ => true,
        }
    }
}

#[derive(Debug)]
pub struct ObjectMemory {
    by_name: HashMap<Box<str>, Vec<Known>>,
}

impl Default for ObjectMemory {
    fn default() -> Self {
        Self {
            by_name: HashMap::new(),
        }
    }
}

/// Kinds are the same when they name the same resource (`Deployment`, `deployment`).
fn same_kind(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b) || plural_of_kind(a) == plural_of_kind(b)
}

impl ObjectMemory {
    /// Notes what a record stated of an object: a name with its Kind, its namespace,
    /// or both. A part stated later completes the object noted without it.
    pub fn remember(&mut self, kind: Option<&str>, namespace: Option<&str>, name: &str) {
        if kind.is_none() && namespace.is_none() {
            return;
        }
        if !self.by_name.contains_key(name) {
            if self.by_name.len() >= MAX_NAMES {
                return;
            }
            self.by_name.insert(name.into(), Vec::new());
        }
        let Some(variants) = self.by_name.get_mut(name) else {
            return;
        };
        let fits = |known: &Known| {
            let kind_fits = match (&known.kind, kind) {
                (Some(a), Some(b)) => same_kind(a, b),
                _ => true,
            };
            kind_fits && known.is_in(namespace)
        };
        if let Some(known) = variants.iter_mut().find(|known| fits(known)) {
            if known.kind.is_none() {
                known.kind = kind.map(Into::into);
            }
            if known.namespace.is_none() {
                known.namespace = namespace.map(Into::into);
            }
        } else if variants.len() < MAX_VARIANTS {
            variants.push(Known {
                kind: kind.map(Into::into),
                namespace: namespace.map(Into::into),
            });
        }
    }

    /// The Kind of the object of this name (in this namespace, where known): the one
    /// remembered, or of several the one the message names.
    pub fn kind_of(&self, namespace: Option<&str>, name: &str, message: &str) -> Option<&str> {
        let mut kinds: Vec<&str> = Vec::new();
        for known in self.by_name.get(name)? {
            if let Some(kind) = known.kind.as_deref().filter(|_| known.is_in(namespace))
                && !kinds.iter().any(|seen| same_kind(seen, kind))
            {
                kinds.push(kind);
            }
        }
        match kinds.as_slice() {
            [kind] => Some(kind),
            [] => None,
            several => {
                let message = message.to_ascii_lowercase();
                let mut named = several
                    .iter()
                    .filter(|kind| names_word(&message, &kind.to_ascii_lowercase()));
                match (named.next(), named.next()) {
                    (Some(kind), None) => Some(kind),
                    _ => None,
                }
            }
        }
    }

    /// The Kind, remembered for the object of this name, that `initials` is short
    /// for (its capitals or its last word).
    pub fn kind_abbreviated(
        &self,
        namespace: Option<&str>,
        name: &str,
        initials: &str,
    ) -> Option<&str> {
        self.by_name
            .get(name)?
            .iter()
            .filter(|known| known.is_in(namespace))
            .filter_map(|known| known.kind.as_deref())
            .find(|kind| is_short_for(kind, initials))
    }

    /// The namespace of the object of this Kind and name, when only one is known.
    pub fn namespace_of(&self, kind: &str, name: &str) -> Option<&str> {
        let mut found = None;
        for known in self.by_name.get(name)? {
            if known.kind.as_deref().is_some_and(|k| same_kind(k, kind))
                && let Some(namespace) = known.namespace.as_deref()
            {
                if found.is_some_and(|seen| seen != namespace) {
                    return None;
                }
                found = Some(namespace);
            }
        }
        found
    }
}

/// Whether `word` occurs in `text` as a whole word.
fn names_word(text: &str, word: &str) -> bool {
    let is_word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    text.match_indices(word).any(|(at, _)| {
        let before = text.as_bytes().get(at.wrapping_sub(1)).copied();
        let after = text.as_bytes().get(at + word.len()).copied();
        !before.is_some_and(is_word_byte) && !after.is_some_and(is_word_byte)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_takes_the_kind_and_namespace_stated_elsewhere() {
        let mut memory = ObjectMemory::default();
        memory.remember(None, Some("myproject"), "example");
        memory.remember(Some("KubevirtSsp"), Some("myproject"), "example");
        assert_eq!(
            memory.kind_of(Some("myproject"), "example", ""),
            Some("KubevirtSsp")
        );
        assert_eq!(memory.kind_of(Some("other"), "example", ""), None);
        assert_eq!(
            memory.namespace_of("kubevirtssp", "example"),
            Some("myproject")
        );
        assert_eq!(memory.by_name.get("example").map(Vec::len), Some(1));
    }

    #[test]
    fn an_ambiguous_memory_fills_nothing_unless_the_message_names_the_kind() {
        let mut memory = ObjectMemory::default();
        memory.remember(Some("service"), None, "api");
        memory.remember(Some("deployment"), None, "api");
        assert_eq!(
            memory.kind_of(Some("components"), "api", "Handler called"),
            None
        );
        assert_eq!(
            memory.kind_of(None, "api", "Conflict updating deployment."),
            Some("deployment")
        );
        memory.remember(Some("Certificate"), Some("a"), "tls");
        memory.remember(Some("Certificate"), Some("b"), "tls");
        assert_eq!(memory.namespace_of("Certificate", "tls"), None);
    }

    #[test]
    fn memory_is_bounded() {
        let mut memory = ObjectMemory::default();
        for index in 0..MAX_NAMES + 10 {
            memory.remember(Some("K"), None, &format!("o{index}"));
        }
        assert_eq!(memory.by_name.len(), MAX_NAMES);
        for namespace in 0..MAX_VARIANTS + 3 {
            memory.remember(Some("K"), Some(&namespace.to_string()), "o0");
        }
        assert_eq!(memory.by_name.get("o0").map(Vec::len), Some(MAX_VARIANTS));
    }
}
