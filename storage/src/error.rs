//! What can go wrong with a storage directory, each error naming the path it is about.

use std::io;
use std::path::{Path, PathBuf};

use crate::frame::MAX_RECORD_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("a record of {0} bytes is larger than the {MAX_RECORD_BYTES} bytes a record may be")]
    TooLarge(usize),
    /// Another process (or another log in this one) has the directory open. Two
    /// writers of one segment file interleave their frames and lose records.
    #[error(
        "{dir}: the storage directory is in use by {holder}; a storage directory serves one \
         process at a time: give each agent or gateway a directory of its own"
    )]
    Locked { dir: PathBuf, holder: String },
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    }
}
