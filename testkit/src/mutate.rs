//! Malformed input for the property tests of opscope's parsers: seeds of real-looking
//! input changed by byte flips, cuts, insertions of troublesome tokens and splices.

use proptest::prelude::*;
use proptest::sample::select;

/// Tokens that tend to break hand-written parsers: delimiters, escapes, numbers at
/// the edges of their types, and Unicode that is more than one byte or invisible.
pub const TOKENS: &[&str] = &[
    "\"",
    "\\",
    "\\\"",
    "\\u00",
    "\\ud800",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ":",
    ";",
    "=",
    ",",
    ".",
    "-",
    "+",
    "#",
    "$",
    "${",
    "${env:",
    "$$",
    "'",
    "`",
    " ",
    "\t",
    "\r",
    "\n",
    "\r\n",
    "\u{0}",
    "\u{1b}",
    "\u{1b}[",
    "\u{1b}[31m",
    "\u{7f}",
    "\u{a0}",
    "\u{ad}",
    "é",
    "ß",
    "€",
    "\u{200b}",
    "\u{202e}",
    "\u{feff}",
    "\u{fffd}",
    "\u{10ffff}",
    "𝄞",
    "日本",
    "0",
    "-0",
    "00000000000000000000000",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967295",
    "65536",
    "1e308",
    "1e309",
    "-1e309",
    "NaN",
    "+Inf",
    "-Inf",
    "0x",
    "+0x1d",
    "1.7e+09",
    "9999-12-31T23:59:59Z",
    "0000-00-00T00:00:00Z",
    "T",
    "Z",
    "+25:61",
    ".go:",
    ".go:99999999999",
    "] ",
    "\" ",
    "=\"",
    "null",
    "true",
    "[]",
    "{}",
    "P ",
    "F ",
    "stdout ",
    "stderr ",
];

/// One change to a seed. Positions are taken modulo the seed's length, so every
/// change applies whatever the seed.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// XOR one byte with a non-zero mask.
    Flip(usize, u8),
    /// Remove up to `len` bytes.
    Delete(usize, usize),
    /// Insert bytes (a troublesome token or arbitrary bytes).
    Insert(usize, Vec<u8>),
    /// Cut everything from a position on.
    Truncate(usize),
    /// Repeat a stretch of the seed in place, `times` times.
    Repeat(usize, usize, usize),
}

/// Arbitrary mutations, weighted towards the ones that keep most of the structure.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| Mutation::Flip(at, mask)),
        2 => (any::<usize>(), 1..16usize).prop_map(|(at, len)| Mutation::Delete(at, len)),
        3 => (any::<usize>(), insertion()).prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), 1..32usize, 1..8usize)
            .prop_map(|(at, len, times)| Mutation::Repeat(at, len, times)),
    ]
}

fn insertion() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => select(TOKENS).prop_map(|token| token.as_bytes().to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 1..8),
    ]
}

/// Applies `mutations` to `seed` in order.
pub fn apply(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for mutation in mutations {
        let position = |at: &usize, len: usize| at.checked_rem(len).unwrap_or(0);
        match mutation {
            Mutation::Flip(at, mask) => {
                let index = position(at, bytes.len());
                if let Some(byte) = bytes.get_mut(index) {
                    *byte ^= mask;
                }
            }
            Mutation::Delete(at, len) => {
                let start = position(at, bytes.len());
                let end = (start + len).min(bytes.len());
                bytes.drain(start..end);
            }
            Mutation::Insert(at, inserted) => {
                let index = position(at, bytes.len() + 1);
                bytes.splice(index..index, inserted.iter().copied());
            }
            Mutation::Truncate(at) => bytes.truncate(position(at, bytes.len() + 1)),
            Mutation::Repeat(at, len, times) => {
                let start = position(at, bytes.len());
                let end = (start + len).min(bytes.len());
                let stretch = bytes[start..end].repeat(*times);
                bytes.splice(end..end, stretch);
            }
        }
    }
    bytes
}

/// One of `seeds`, changed by up to eight mutations (sometimes none).
pub fn mutated_bytes(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "mutated_bytes needs at least one seed");
    (select(seeds), proptest::collection::vec(mutation(), 0..8))
        .prop_map(|(seed, mutations)| apply(&seed, &mutations))
}

/// Like [`mutated_bytes`] for text: invalid UTF-8 left by a mutation becomes U+FFFD.
pub fn mutated_text(seeds: Vec<String>) -> impl Strategy<Value = String> {
    let seeds = seeds.into_iter().map(String::into_bytes).collect();
    mutated_bytes(seeds).prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// The non-empty lines of some fixture texts, as seeds.
pub fn lines_of(texts: &[&str]) -> Vec<String> {
    texts
        .iter()
        .flat_map(|text| text.lines())
        .filter(|line| !line.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Text made of troublesome tokens and arbitrary characters, for parsers with no
/// seed worth mutating.
pub fn token_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            2 => select(TOKENS).prop_map(str::to_string),
            1 => any::<char>().prop_map(String::from),
            1 => "[a-z0-9./_-]{1,12}",
        ],
        0..24,
    )
    .prop_map(|pieces| pieces.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mutation_applies_to_an_empty_seed() {
        let at = 7;
        for mutation in [
            Mutation::Flip(at, 1),
            Mutation::Delete(at, 3),
            Mutation::Insert(at, b"x".to_vec()),
            Mutation::Truncate(at),
            Mutation::Repeat(at, 4, 2),
        ] {
            apply(b"", std::slice::from_ref(&mutation));
        }
        assert_eq!(apply(b"", &[Mutation::Insert(at, b"ab".to_vec())]), b"ab");
    }

    #[test]
    fn repeat_copies_the_stretch_after_itself() {
        let at = 0;
        assert_eq!(apply(b"abc", &[Mutation::Repeat(at, 2, 2)]), b"abababc");
    }
}
