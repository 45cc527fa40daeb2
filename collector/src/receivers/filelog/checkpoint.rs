//! The offsets checkpoint: where reading resumes in each tailed file, written
//! atomically (temporary file, then rename) to the `storage` directory.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::identity::{FileIdentity, Fingerprint};
use super::open::open_regular;

/// Largest checkpoint file read back (it holds a few hundred bytes per file).
const MAX_CHECKPOINT_BYTES: u64 = 64 * 1024 * 1024;
const VERSION: u32 = 1;

/// Where reading of a file resumes: the start of a line with no record in progress,
/// and how many records read after it were already delivered (when a record was
/// split, or pieces of the two streams interleave, there is no such line after it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub offset: u64,
    /// The number (from 1) of the line that starts at `offset`.
    pub line: u64,
    /// Records after `offset` to drop when reading resumes.
    pub skip: u64,
}

impl Position {
    pub const START: Self = Self {
        offset: 0,
        line: 1,
        skip: 0,
    };
}

/// One tailed file in the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointEntry {
    /// The path the file was found at (it may since have been renamed).
    pub path: String,
    pub identity: FileIdentity,
    pub fingerprint: Fingerprint,
    pub position: Position,
}

#[derive(Serialize, Deserialize)]
struct CheckpointFile {
    version: u32,
    files: Vec<CheckpointEntry>,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot use {path}: {source}")]
    Storage { path: PathBuf, source: io::Error },
    #[error("cannot read the checkpoint {path}: {reason}; delete it to start over")]
    Unreadable { path: PathBuf, reason: String },
}

/// The checkpoint file of one receiver, or none when offsets live in memory only.
pub struct CheckpointStore {
    path: Option<PathBuf>,
}

impl CheckpointStore {
    pub fn in_memory() -> Self {
        Self { path: None }
    }

    /// Prepares `directory` (created if missing, checked writable) and reads the
    /// receiver's previous checkpoint: `None` when there was none.
    pub fn open(
        directory: &Path,
        receiver: &str,
    ) -> Result<(Self, Option<Vec<CheckpointEntry>>), CheckpointError> {
        let storage_error = |source| CheckpointError::Storage {
            path: directory.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(directory).map_err(storage_error)?;
        let path = directory.join(file_name(receiver));
        let probe = temporary(&path);
        std::fs::write(&probe, b"").map_err(storage_error)?;
        std::fs::remove_file(&probe).map_err(storage_error)?;
        let previous = read(&path)?;
        Ok((Self { path: Some(path) }, previous))
    }

    /// Replaces the checkpoint with `entries`; a crash leaves the old or the new one.
    pub fn save(&self, entries: Vec<CheckpointEntry>) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let checkpoint = CheckpointFile {
            version: VERSION,
            files: entries,
        };
        let bytes = serde_json::to_vec(&checkpoint).map_err(io::Error::other)?;
        let temporary = temporary(path);
        let mut file = File::create(&temporary)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    }
}

fn read(path: &Path) -> Result<Option<Vec<CheckpointEntry>>, CheckpointError> {
    let unreadable = |reason: String| CheckpointError::Unreadable {
        path: path.to_path_buf(),
        reason,
    };
    let file = match open_regular(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(unreadable(err.to_string())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_CHECKPOINT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| unreadable(err.to_string()))?;
    if bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
        return Err(unreadable(format!(
            "larger than {MAX_CHECKPOINT_BYTES} bytes"
        )));
    }
    let checkpoint: CheckpointFile =
        serde_json::from_slice(&bytes).map_err(|err| unreadable(err.to_string()))?;
    if checkpoint.version != VERSION {
        return Err(unreadable(format!(
            "unknown version {}",
            checkpoint.version
        )));
    }
    Ok(Some(checkpoint.files))
}

/// `filelog/pods` keeps its offsets in `filelog_pods.checkpoint.json`.
fn file_name(receiver: &str) -> String {
    let safe: String = receiver
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.checkpoint.json")
}

fn temporary(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".tmp");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, offset: u64) -> CheckpointEntry {
        CheckpointEntry {
            path: path.into(),
            identity: FileIdentity {
                device: 1,
                inode: 2,
            },
            fingerprint: Fingerprint::of(b"2024-05-01T12:00:00Z stdout F x\n"),
            position: Position {
                offset,
                line: 7,
                skip: 1,
            },
        }
    }

    #[test]
    fn saved_entries_read_back() {
        let directory = tempfile::tempdir().expect("a temp dir");
        let storage = directory.path().join("state");
        let (store, previous) = CheckpointStore::open(&storage, "filelog/pods").expect("opens");
        assert_eq!(previous, None, "no checkpoint yet");
        store
            .save(vec![entry("/a/0.log", 10), entry("/b/0.log", 20)])
            .expect("saves");
        store.save(vec![entry("/a/0.log", 30)]).expect("saves");
        let (_, previous) = CheckpointStore::open(&storage, "filelog/pods").expect("opens");
        assert_eq!(previous, Some(vec![entry("/a/0.log", 30)]));
        let names: Vec<_> = std::fs::read_dir(&storage)
            .expect("lists")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            names,
            ["filelog_pods.checkpoint.json"],
            "no temporary file left"
        );
    }

    #[test]
    fn receivers_keep_separate_checkpoints() {
        let directory = tempfile::tempdir().expect("a temp dir");
        let (first, _) = CheckpointStore::open(directory.path(), "filelog").expect("opens");
        first.save(vec![entry("/a/0.log", 10)]).expect("saves");
        let (_, other) = CheckpointStore::open(directory.path(), "filelog/other").expect("opens");
        assert_eq!(other, None);
    }

    #[test]
    fn a_damaged_checkpoint_is_an_error_that_says_what_to_do() {
        let directory = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            directory.path().join("filelog.checkpoint.json"),
            "{\"version\":1,",
        )
        .expect("write");
        let Err(err) = CheckpointStore::open(directory.path(), "filelog") else {
            panic!("a damaged checkpoint must not be ignored");
        };
        assert!(err.to_string().contains("delete it to start over"), "{err}");
    }

    #[test]
    fn an_unusable_directory_is_an_error() {
        let directory = tempfile::tempdir().expect("a temp dir");
        let file = directory.path().join("not-a-directory");
        std::fs::write(&file, "x").expect("write");
        assert!(matches!(
            CheckpointStore::open(&file, "filelog"),
            Err(CheckpointError::Storage { .. })
        ));
    }
}
