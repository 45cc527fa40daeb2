//! The whole operator logs the tests read from outside the repository: where they are
//! (`../shared/captures/` relative to the repository's root, or `$OPSCOPE_CAPTURES`),
//! skipping when they are not there (unless `OPSCOPE_REQUIRE_BACKENDS=1`), and each
//! file checked against the git blob hash of the commit it was taken from.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA1_FOR_LEGACY_USE_ONLY};

use crate::backend::skip_or_fail;

/// The folder that holds the captures: `$OPSCOPE_CAPTURES`, else `../shared/captures`
/// relative to the repository's root.
pub fn captures_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("OPSCOPE_CAPTURES") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/captures")
}

/// The captures' folder, or `None` (with the reason printed) when it is not there and
/// the running test is to be skipped. Panics when it is not there and
/// `OPSCOPE_REQUIRE_BACKENDS=1`.
pub fn captures_dir_or_skip() -> Option<PathBuf> {
    let dir = captures_dir();
    if let Ok(found) = dir.canonicalize()
        && found.is_dir()
    {
        return Some(found);
    }
    skip_or_fail(&format!(
        "the captures' folder {} is not there (OPSCOPE_CAPTURES=<folder> names the one that holds sieve/)",
        dir.display()
    ));
    None
}

/// The file's git blob hash, as `git hash-object` gives it: SHA-1 over
/// `blob <length>\0` and the bytes, in lowercase hex.
pub fn git_blob_hash(bytes: &[u8]) -> String {
    let mut context = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
    context.update(format!("blob {}\0", bytes.len()).as_bytes());
    context.update(bytes);
    context
        .finish()
        .as_ref()
        .iter()
        .fold(String::with_capacity(40), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// Panics, saying which file and how, unless the file at `path` can be read and has
/// the git blob hash `blob`: a changed file is not the one the expectations were
/// counted on.
pub fn assert_blob(path: &Path, blob: &str) {
    let bytes = std::fs::read(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()));
    let found = git_blob_hash(&bytes);
    assert!(
        found == blob,
        "{}: git blob hash {found}, the index gives {blob}: the file is not the one \
         whose lines were counted",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_hashes_are_those_git_gives() {
        // `printf '' | git hash-object --stdin` and `printf 'hello\n' | git hash-object --stdin`.
        assert_eq!(
            git_blob_hash(b""),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        assert_eq!(
            git_blob_hash(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }
}
