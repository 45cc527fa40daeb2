//! The files `analyze` reads: the paths given walked (each directory and file once,
//! whatever symlinks lead to it), only regular files opened and never a FIFO or a
//! device, `.gz` inflated up to a bound. What cannot be read is skipped with its
//! reason; only a path given that does not exist stops the run.

use std::collections::HashMap;
use std::fmt;
use std::fs::FileType;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;
use opscope_storage::regular_file::{Access, not_regular_kind, open_regular};

/// Most bytes a `.gz` file is inflated to; the rest of it is skipped.
pub const MAX_INFLATED_BYTES: u64 = 1024 * 1024 * 1024;

/// A path given to `analyze` that cannot be found: the run stops.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct InputError {
    path: String,
    source: io::Error,
}

/// An entry not read, or not read to its end, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

impl Skipped {
    pub fn new(path: &Path, reason: impl Into<String>) -> Self {
        Self {
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: skipped: {}", self.path, self.reason)
    }
}

/// The regular files under the paths given, in a stable order, and the entries
/// skipped on the way.
#[derive(Debug, Default)]
pub struct Inputs {
    pub files: Vec<PathBuf>,
    pub skipped: Vec<Skipped>,
}

/// Walks the paths given; `Err` for one that does not exist.
pub fn collect_files(paths: &[PathBuf]) -> Result<Inputs, InputError> {
    for path in paths {
        if let Err(source) = std::fs::metadata(path)
            && source.kind() == io::ErrorKind::NotFound
        {
            return Err(InputError {
                path: path.display().to_string(),
                source,
            });
        }
    }
    let mut walk = Walk::default();
    for path in paths {
        walk.visit(path);
    }
    Ok(walk.inputs)
}

/// The walk's findings, and the entries it has met by device and inode with the
/// path it met each by first.
#[derive(Default)]
struct Walk {
    inputs: Inputs,
    met: HashMap<(u64, u64), PathBuf>,
}

impl Walk {
    fn visit(&mut self, path: &Path) {
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(err) => return self.skip(path, unreadable(&err)),
        };
        let file_type = metadata.file_type();
        if !file_type.is_file() && !file_type.is_dir() {
            return self.skip(path, not_read(file_type));
        }
        if let Some(first) = self.met.get(&(metadata.dev(), metadata.ino())) {
            let reason = if metadata.is_dir() {
                format!("the directory {} again; read once", first.display())
            } else {
                format!("the same file as {}; read once", first.display())
            };
            return self.skip(path, reason);
        }
        self.met
            .insert((metadata.dev(), metadata.ino()), path.to_path_buf());
        if file_type.is_dir() {
            self.visit_directory(path);
        } else {
            self.inputs.files.push(path.to_path_buf());
        }
    }

    fn visit_directory(&mut self, path: &Path) {
        let listing = match std::fs::read_dir(path) {
            Ok(listing) => listing,
            Err(err) => return self.skip(path, format!("cannot be listed: {err}")),
        };
        let mut entries = Vec::new();
        for entry in listing {
            match entry {
                Ok(entry) => entries.push(entry.path()),
                Err(err) => self.skip(path, format!("an entry cannot be listed: {err}")),
            }
        }
        entries.sort();
        for entry in entries {
            self.visit(&entry);
        }
    }

    fn skip(&mut self, path: &Path, reason: String) {
        self.inputs.skipped.push(Skipped::new(path, reason));
    }
}

fn unreadable(err: &io::Error) -> String {
    if err.raw_os_error() == Some(libc::ELOOP) {
        "a symlink loop".to_string()
    } else {
        format!("cannot be read: {err}")
    }
}

/// Why an entry that is neither a regular file nor a directory is not read.
fn not_read(file_type: FileType) -> String {
    let kind = if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    format!("{kind}; not read")
}

/// Opens a regular file to read, inflated when it ends in `.gz`. The open never
/// blocks, and a path swapped for a FIFO or a device since the walk is refused
/// ([`opscope_storage::regular_file`]). `Err` says why the file is not read.
pub fn open(path: &Path) -> Result<Box<dyn Read>, String> {
    let file = open_regular(path, Access::Read).map_err(|err| match not_regular_kind(&err) {
        Some(kind) => format!("a {kind}; not read"),
        None => unreadable(&err),
    })?;
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(Bounded::new(
            MultiGzDecoder::new(file),
            MAX_INFLATED_BYTES,
            "inflates to more than",
        ))
    } else {
        Box::new(file)
    })
}

/// A reader that fails once more than `limit` bytes would be read from `inner`
/// (`FileTooLarge`, saying `{what} {limit}`), without reading beyond the limit but
/// one byte.
pub struct Bounded<R> {
    inner: R,
    left: u64,
    limit: u64,
    what: &'static str,
}

impl<R: Read> Bounded<R> {
    pub fn new(inner: R, limit: u64, what: &'static str) -> Self {
        Self {
            inner,
            left: limit,
            limit,
            what,
        }
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(
                    io::ErrorKind::FileTooLarge,
                    format!("{} {}", self.what, size(self.limit)),
                )),
            };
        }
        let len = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let read = self.inner.read(buf.get_mut(..len).unwrap_or_default())?;
        self.left -= read as u64;
        Ok(read)
    }
}

/// Why reading stopped: the bound said by [`Bounded`], or the error.
pub fn read_error(err: &io::Error) -> String {
    if err.kind() == io::ErrorKind::FileTooLarge {
        err.to_string()
    } else {
        format!("read failed: {err}")
    }
}

/// A size in the largest binary unit that divides it.
pub fn size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    UNITS
        .iter()
        .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
        .map_or_else(
            || format!("{bytes} bytes"),
            |(unit, name)| format!("{} {name}", bytes / unit),
        )
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, Instant};

    use super::*;

    fn mkfifo(path: &Path) {
        let name = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: `name` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
    }

    fn reasons(inputs: &Inputs) -> Vec<(String, String)> {
        inputs
            .skipped
            .iter()
            .map(|s| {
                let name = Path::new(&s.path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
                (name.unwrap_or_default(), s.reason.clone())
            })
            .collect()
    }

    #[test]
    fn loops_fifos_and_devices_are_skipped_and_the_rest_listed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir(root.join("logs")).expect("mkdir");
        std::fs::write(root.join("logs/a.log"), "a\n").expect("write");
        std::os::unix::fs::symlink(root.join("logs"), root.join("logs/back")).expect("link");
        std::os::unix::fs::symlink("self", root.join("self")).expect("link");
        std::os::unix::fs::symlink("/dev/zero", root.join("zero.log")).expect("link");
        std::os::unix::fs::symlink(root.join("logs/a.log"), root.join("z.log")).expect("link");
        mkfifo(&root.join("fifo.log"));
        std::fs::write(root.join("b.log"), "b\n").expect("write");

        let started = Instant::now();
        let inputs = collect_files(&[root.to_path_buf()]).expect("walked");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(inputs.files, [root.join("b.log"), root.join("logs/a.log")]);
        let logs = root.join("logs").display().to_string();
        let a = root.join("logs/a.log").display().to_string();
        assert_eq!(
            reasons(&inputs),
            [
                ("fifo.log".to_string(), "a FIFO; not read".to_string()),
                (
                    "back".to_string(),
                    format!("the directory {logs} again; read once")
                ),
                ("self".to_string(), "a symlink loop".to_string()),
                (
                    "z.log".to_string(),
                    format!("the same file as {a}; read once")
                ),
                (
                    "zero.log".to_string(),
                    "a character device; not read".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_path_given_that_does_not_exist_stops_the_run() {
        let err = collect_files(&[PathBuf::from("/nonexistent/audit.log")]).expect_err("missing");
        assert!(
            err.to_string().starts_with("/nonexistent/audit.log: "),
            "{err}"
        );
        let inputs = collect_files(&[PathBuf::from("/dev/zero")]).expect("skipped, not fatal");
        assert!(inputs.files.is_empty());
        assert_eq!(
            inputs.skipped[0].to_string(),
            "/dev/zero: skipped: a character device; not read"
        );
    }

    #[test]
    fn a_device_or_fifo_is_not_opened() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("f.log");
        mkfifo(&fifo);
        let started = Instant::now();
        assert_eq!(open(&fifo).err(), Some("a FIFO; not read".to_string()));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(
            open(Path::new("/dev/zero")).err(),
            Some("a character device; not read".to_string())
        );
    }

    #[test]
    fn bounded_reads_fail_past_the_limit_naming_it() {
        let mut exact = Bounded::new(&[7u8; 4096][..], 4096, "longer than");
        let mut all = Vec::new();
        assert_eq!(exact.read_to_end(&mut all).expect("within"), 4096);
        let mut over = Bounded::new(&[7u8; 4097][..], 4096, "inflates to more than");
        let err = over
            .read_to_end(&mut Vec::new())
            .expect_err("past the limit");
        assert_eq!(err.to_string(), "inflates to more than 4 KiB");
        assert_eq!(size(MAX_INFLATED_BYTES), "1 GiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
