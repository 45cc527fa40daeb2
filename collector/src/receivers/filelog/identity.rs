//! What makes a log file the same file across renames and restarts: its device and
//! inode, and a fingerprint of its first bytes that tells a reused inode or a rewrite.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;

use opscope_model::hash::fnv1a;
use serde::{Deserialize, Serialize};

use super::reader::fill;

/// Device and inode: stays with a file through a rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileIdentity {
    pub device: u64,
    pub inode: u64,
}

impl FileIdentity {
    pub fn of(metadata: &Metadata) -> Self {
        Self {
            device: metadata.dev(),
            inode: metadata.ino(),
        }
    }
}

/// A hash of a file's first `len` bytes (at most [`Fingerprint::MAX_LEN`]); it grows
/// with the file until it covers `MAX_LEN` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub len: u32,
    pub hash: u64,
}

impl Fingerprint {
    pub const MAX_LEN: usize = 1024;

    pub fn of(bytes: &[u8]) -> Self {
        let head = bytes.get(..Self::MAX_LEN).unwrap_or(bytes);
        Self {
            len: head.len() as u32,
            hash: fnv1a(head),
        }
    }

    /// The fingerprint of what `file` starts with now.
    pub fn read(file: &File) -> io::Result<Self> {
        Ok(Self::of(&read_head(file)?))
    }

    /// `Some` (with the fingerprint grown to the file's current start) when `file`
    /// still starts with the bytes this fingerprint was taken of; `None` when it was
    /// truncated or rewritten.
    pub fn recheck(&self, file: &File) -> io::Result<Option<Self>> {
        let head = read_head(file)?;
        let same = head
            .get(..self.len as usize)
            .is_some_and(|prefix| fnv1a(prefix) == self.hash);
        Ok(same.then(|| Self::of(&head)))
    }
}

/// The first [`Fingerprint::MAX_LEN`] bytes of a file, or all of a shorter one.
fn read_head(file: &File) -> io::Result<Vec<u8>> {
    let mut head = vec![0; Fingerprint::MAX_LEN];
    let filled = fill(file, &mut head, 0)?;
    head.truncate(filled);
    Ok(head)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    use super::*;

    #[test]
    fn fingerprint_grows_with_the_file_and_tells_a_rewrite() {
        let mut file = tempfile::tempfile().expect("a temp file");
        file.write_all(b"2024-05-01T12:00:00Z stdout F first\n")
            .expect("write");
        let first = Fingerprint::read(&file).expect("read");
        assert_eq!(first.len, 36);
        file.write_all(&[b'x'; 2000]).expect("write");
        let grown = first.recheck(&file).expect("read").expect("same file");
        assert_eq!(grown.len as usize, Fingerprint::MAX_LEN);
        assert_eq!(grown.recheck(&file).expect("read"), Some(grown));

        file.set_len(0).expect("truncate");
        assert_eq!(grown.recheck(&file).expect("read"), None, "truncated");
        file.write_all_at(&[b'y'; 2000], 0).expect("write");
        assert_eq!(grown.recheck(&file).expect("read"), None, "rewritten");
    }

    #[test]
    fn identity_follows_a_rename() {
        let directory = tempfile::tempdir().expect("a temp dir");
        let path = directory.path().join("0.log");
        std::fs::write(&path, "x").expect("write");
        let before = FileIdentity::of(&std::fs::metadata(&path).expect("stat"));
        let rotated = directory.path().join("0.log.20240501-120000");
        std::fs::rename(&path, &rotated).expect("rename");
        std::fs::write(&path, "x").expect("write");
        assert_eq!(
            FileIdentity::of(&std::fs::metadata(&rotated).expect("stat")),
            before
        );
        assert_ne!(
            FileIdentity::of(&std::fs::metadata(&path).expect("stat")),
            before
        );
    }
}
