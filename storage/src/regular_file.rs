//! Opening a file without ever blocking, whatever is found under its name: only a
//! regular file is used. A FIFO in place of a segment, the offset or the lock would
//! block the open (and every read) until a writer came, before the process serves
//! `/healthz`; a FIFO or a device among the pod logs the filelog receiver tails, or
//! the files `opscope analyze` is given, would hang them the same way. The type is
//! checked before the open (a FIFO is never opened, which would disturb its writer),
//! the open is `O_NONBLOCK` should the name be swapped in between, and the handle is
//! checked again. Regular files ignore `O_NONBLOCK`, so it stays set.

use std::fs::{File, FileType};
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// Under a storage file's name is something else than a regular file.
#[derive(Debug, thiserror::Error)]
#[error("not a regular file (a {kind}); not opened")]
pub struct NotRegularFile {
    pub kind: &'static str,
}

/// What a file is opened for.
#[derive(Debug, Clone, Copy)]
pub enum Access {
    Read,
    /// Appending, created when missing (a segment being written).
    Append,
    /// Reading and writing, created when missing (the lock file).
    ReadWrite,
}

impl Access {
    fn flags(self) -> OFlags {
        match self {
            Self::Read => OFlags::RDONLY,
            Self::Append => OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
            Self::ReadWrite => OFlags::RDWR | OFlags::CREATE,
        }
    }
}

/// Opens `path` if it is a regular file (or, for an access that creates, missing).
pub fn open_regular(path: &Path, access: Access) -> io::Result<File> {
    match std::fs::metadata(path) {
        Ok(metadata) => refuse_unless_regular(metadata.file_type())?,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let flags = access.flags() | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::open(path, flags, Mode::from_raw_mode(0o666))?);
    refuse_unless_regular(file.metadata()?.file_type())?;
    Ok(file)
}

/// Whether `path` names something that exists and is not a regular file.
pub fn names_other_than_a_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|metadata| !metadata.is_file())
}

/// Whether opening failed because the name holds no regular file.
pub fn is_not_regular(error: &io::Error) -> bool {
    not_regular_kind(error).is_some()
}

/// What the name held instead of a regular file (`FIFO`, `character device`, …),
/// when that is why opening failed.
pub fn not_regular_kind(error: &io::Error) -> Option<&'static str> {
    let inner = error.get_ref()?.downcast_ref::<NotRegularFile>()?;
    Some(inner.kind)
}

fn refuse_unless_regular(file_type: FileType) -> io::Result<()> {
    if file_type.is_file() {
        return Ok(());
    }
    let kind = if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_dir() {
        "directory"
    } else {
        "special file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        NotRegularFile { kind },
    ))
}

/// Makes a FIFO at `path`, for tests.
#[cfg(test)]
pub fn make_fifo(path: &Path) -> io::Result<()> {
    let mode = Mode::from_raw_mode(0o644);
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, mode, 0)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_at_once_whatever_the_access() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("00000000000000000000.seg");
        make_fifo(&fifo).unwrap();
        for access in [Access::Read, Access::Append, Access::ReadWrite] {
            let error = open_regular(&fifo, access).unwrap_err();
            assert!(is_not_regular(&error), "{access:?}: {error}");
            assert_eq!(error.to_string(), "not a regular file (a FIFO); not opened");
        }
        assert!(names_other_than_a_file(&fifo));
    }

    #[test]
    fn a_directory_is_refused_and_a_missing_file_created_when_the_access_creates() {
        let dir = tempfile::tempdir().unwrap();
        let error = open_regular(dir.path(), Access::Read).unwrap_err();
        assert!(is_not_regular(&error), "{error}");
        let missing = dir.path().join("lock");
        assert!(!is_not_regular(
            &open_regular(&missing, Access::Read).unwrap_err()
        ));
        open_regular(&missing, Access::ReadWrite).unwrap();
        assert!(missing.is_file());
        assert!(!names_other_than_a_file(&missing));
    }
}
