//! Compact copies of what events say, for state that must stay small: text cut to
//! a bound, and hashes standing in for identities that are only ever compared.

use std::hash::{BuildHasher, Hash};
use std::sync::LazyLock;

use opscope_model::kubernetes::{Name, ObjectRef, OperatorRef};

/// The longest text kept from an event: a name, an evidence reference, an error.
pub(crate) const MAX_TEXT: usize = 256;

/// `text` cut to at most [`MAX_TEXT`] bytes, on a character boundary.
pub(crate) fn bounded<T: for<'a> From<&'a str>>(text: &str) -> T {
    T::from(text.get(..boundary(text)).unwrap_or_default())
}

/// Cuts `text` in place to at most [`MAX_TEXT`] bytes, on a character boundary.
pub(crate) fn bound(text: &mut Name) {
    let end = boundary(text);
    text.truncate(end);
}

/// Cuts every name of an object reference to [`MAX_TEXT`] bytes.
pub(crate) fn bound_object(object: &mut ObjectRef) {
    for text in [
        &mut object.group,
        &mut object.kind,
        &mut object.resource,
        &mut object.namespace,
        &mut object.name,
    ] {
        bound(text);
    }
}

/// Cuts both names of an operator reference to [`MAX_TEXT`] bytes.
pub(crate) fn bound_operator(operator: &mut OperatorRef) {
    bound(&mut operator.name);
    bound(&mut operator.namespace);
}

/// Seeded once per process: a hash of one text is the same everywhere in it, and
/// not known outside it.
static TEXT_HASHER: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);

/// A 64-bit hash of `text`, for comparing identities within one process without
/// keeping them (never stored or sent). foldhash: status digests hash a few dozen
/// short texts per write, where SipHash took a tenth of the correlator's time.
pub(crate) fn hash_text(text: &str) -> u64 {
    TEXT_HASHER.hash_one(text)
}

/// A hash like [`hash_text`] of an identity in parts (a tuple of texts and enums),
/// without formatting them into one text first: samples are hashed one each.
pub(crate) fn hash_parts(parts: impl Hash) -> u64 {
    TEXT_HASHER.hash_one(parts)
}

pub(crate) fn boundary(text: &str) -> usize {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_TEXT);
        let cut: String = bounded(&long);
        assert!(cut.len() <= MAX_TEXT);
        assert!(cut.chars().all(|c| c == 'é'));
        let mut owned = Name::from(long.as_str());
        bound(&mut owned);
        assert_eq!(owned, cut);
        assert_eq!(bounded::<String>("short"), "short");
    }

    #[test]
    fn equal_text_hashes_equal() {
        assert_eq!(hash_text("pod-0"), hash_text("pod-0"));
        assert_ne!(hash_text("pod-0"), hash_text("pod-1"));
        assert_eq!(hash_parts(("a", "b")), hash_parts(("a", "b")));
        // Each text ends its part: parts do not run into each other.
        assert_ne!(hash_parts(("ab", "")), hash_parts(("a", "b")));
    }
}
