//! The lock that keeps a storage directory to one user: an exclusive `flock(2)` on the
//! file `lock` inside it, taken without waiting and held as long as the [`DirLock`]
//! lives (the kernel lets go of it when the process ends, however it ends, so a stale
//! file never locks anyone out). The holder writes its pid, process name and host
//! into the file, so that whoever finds the directory taken can say by whom: two
//! releases on one node show up as each other's pod name.
//!
//! `flock` locks the file, not the name: it holds across containers that mount one
//! host directory, and between two opens in one process.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use rustix::fs::FlockOperation;

use crate::error::{LogError, io_error};
use crate::regular_file::{Access, open_regular};

pub const LOCK_FILE: &str = "lock";
/// The most of the lock file read back to name its holder.
const HOLDER_BYTES: u64 = 256;

/// A storage directory held by this process.
#[derive(Debug)]
pub struct DirLock {
    /// Closing it releases the lock.
    _file: File,
}

impl DirLock {
    /// Takes the lock of `dir`, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<Self, LogError> {
        let path = dir.join(LOCK_FILE);
        let mut file = open_regular(&path, Access::ReadWrite).map_err(io_error(&path))?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(errno) if errno == rustix::io::Errno::WOULDBLOCK => {
                return Err(LogError::Locked {
                    dir: dir.to_path_buf(),
                    holder: read_holder(&mut file),
                });
            }
            Err(errno) => return Err(io_error(&path)(errno.into())),
        }
        // Not fatal: the lock is held whatever the file says.
        if let Err(error) = write_holder(&mut file) {
            tracing::warn!(file = %path.display(), %error, "storage: cannot write the lock's holder");
        }
        Ok(Self { _file: file })
    }
}

/// This process, as the lock file names it: `pid 7 (opscope) on gateway-1`.
fn this_process() -> String {
    let name = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.file_name()?.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".to_string());
    let uname = rustix::system::uname();
    let host = uname.nodename().to_string_lossy();
    format!("pid {} ({name}) on {host}", std::process::id())
}

fn write_holder(file: &mut File) -> io::Result<()> {
    file.set_len(0)?;
    writeln!(file, "{}", this_process())?;
    file.flush()
}

/// The holder the lock file names, as one printable line.
fn read_holder(file: &mut File) -> String {
    let mut bytes = Vec::new();
    let read = file.take(HOLDER_BYTES).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    match read {
        Ok(_) if !line.trim().is_empty() => line.trim().to_string(),
        _ => "another process (which has not written its name)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_directory_is_refused_naming_the_holder_until_it_is_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let held = DirLock::acquire(dir.path()).unwrap();
        let written = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(written.trim(), this_process());
        assert!(
            written.starts_with(&format!("pid {} (", std::process::id())),
            "{written}"
        );

        let Err(LogError::Locked { dir: named, holder }) = DirLock::acquire(dir.path()) else {
            panic!("a second lock of one directory is refused");
        };
        assert_eq!(named, dir.path());
        assert_eq!(holder, this_process());

        drop(held);
        DirLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_holder_that_wrote_nothing_or_garbage_is_still_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        let file = open_regular(&path, Access::ReadWrite).unwrap();
        rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).unwrap();
        let refused = |dir: &Path| match DirLock::acquire(dir) {
            Err(LogError::Locked { holder, .. }) => holder,
            other => panic!("refused, not {other:?}"),
        };
        assert_eq!(
            refused(dir.path()),
            "another process (which has not written its name)"
        );
        std::fs::write(&path, b"pid 1 \x1b[31m(x)\xff\nsecond line").unwrap();
        assert_eq!(refused(dir.path()), "pid 1 [31m(x)\u{fffd}");
    }
}
