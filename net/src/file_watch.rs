//! Noticing that files read at start have changed since: a cheap stamp (modification
//! time and length) taken at most once per interval, so hot paths can ask often.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// What a file looked like when last stamped; `None` when it could not be read.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// A set of files watched together (a certificate and its key change as a pair).
#[derive(Debug)]
pub struct WatchedFiles {
    paths: Vec<PathBuf>,
    stamps: Vec<Stamp>,
    check_interval: Duration,
    last_check: Instant,
}

impl WatchedFiles {
    /// Starts watching `paths` as they are now: only later changes are reported.
    pub fn new(paths: Vec<PathBuf>, check_interval: Duration) -> Self {
        let stamps = paths.iter().map(|path| stamp(path)).collect();
        Self {
            paths,
            stamps,
            check_interval,
            last_check: Instant::now(),
        }
    }

    /// Whether any file changed since the last call that said so; the files are
    /// looked at only when `check_interval` has passed since they last were.
    pub fn changed(&mut self) -> bool {
        if self.last_check.elapsed() < self.check_interval {
            return false;
        }
        self.last_check = Instant::now();
        let stamps: Vec<Stamp> = self.paths.iter().map(|path| stamp(path)).collect();
        if stamps == self.stamps {
            return false;
        }
        self.stamps = stamps;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_is_noticed_once_and_only_after_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one").unwrap();
        let mut watched = WatchedFiles::new(vec![path.clone()], Duration::ZERO);
        assert!(!watched.changed());
        std::fs::write(&path, "longer").unwrap();
        assert!(watched.changed());
        assert!(!watched.changed());

        let mut slow = WatchedFiles::new(vec![path.clone()], Duration::from_secs(3600));
        std::fs::write(&path, "different length").unwrap();
        assert!(!slow.changed(), "not looked at before the interval");
    }

    #[test]
    fn a_file_that_disappears_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        std::fs::write(&path, "x").unwrap();
        let mut watched = WatchedFiles::new(vec![path.clone()], Duration::ZERO);
        std::fs::remove_file(&path).unwrap();
        assert!(watched.changed());
    }
}
