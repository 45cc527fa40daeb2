//! Noticing files as they appear: an inotify watcher (the `notify` crate) on the
//! directories the `include` globs match in opens each new file at once, or its new
//! name when it was renamed before it could be opened, so that a file created and
//! rotated within one poll interval is read too. Polling stays, for what the watcher
//! misses (a full queue, an overflow, a directory not watched yet).

use std::fs::File;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use notify::event::{CreateKind, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;

use super::discovery::Discovery;
use super::open::open_regular;

/// New files opened and not yet taken by the tailer, at most (each holds a handle);
/// past it, polling finds them.
const MAX_ARRIVALS: usize = 256;

/// A file opened as it appeared.
pub struct Arrival {
    /// Where it appeared: the name the include globs matched.
    pub path: PathBuf,
    pub file: File,
    /// It had already been renamed away from `path` (rotated) when it was opened.
    pub renamed: bool,
}

/// The watcher, and what it opened.
pub struct Watch {
    receiver: String,
    watcher: RecommendedWatcher,
    arrivals: Receiver<Arrival>,
    /// Directories to watch that could not be watched yet (not there yet, say).
    pending: Vec<(PathBuf, RecursiveMode)>,
    woken: Arc<Notify>,
}

impl Watch {
    /// Starts watching the directories of `include`; `None` when inotify cannot be had
    /// (then polling alone finds files).
    pub fn start(receiver: &str, include: &[String], discovery: Discovery) -> Option<Self> {
        let (sender, arrivals) = std::sync::mpsc::sync_channel(MAX_ARRIVALS);
        let woken = Arc::new(Notify::new());
        let handler = Handler {
            discovery,
            sender,
            woken: Arc::clone(&woken),
        };
        let config = notify::Config::default().with_follow_symlinks(false);
        let watcher = match RecommendedWatcher::new(move |event| handler.handle(event), config) {
            Ok(watcher) => watcher,
            Err(err) => {
                tracing::warn!(receiver, %err, "cannot watch for new files; they are found by polling only");
                return None;
            }
        };
        let mut pending = Vec::new();
        for directory in include.iter().map(|glob| watched_directory(glob)) {
            if !pending.contains(&directory) {
                pending.push(directory);
            }
        }
        let mut watch = Self {
            receiver: receiver.to_string(),
            watcher,
            arrivals,
            pending,
            woken,
        };
        watch.retry();
        Some(watch)
    }

    /// Watches the directories that could not be watched before.
    pub fn retry(&mut self) {
        let receiver = &self.receiver;
        let watcher = &mut self.watcher;
        self.pending.retain(|(directory, mode)| {
            if !directory.is_dir() {
                return true;
            }
            match watcher.watch(directory, *mode) {
                Ok(()) => false,
                Err(err) => {
                    tracing::warn!(receiver, directory = %directory.display(), %err,
                        "cannot watch for new files; they are found by polling");
                    false
                }
            }
        });
    }

    /// Fires when files arrived.
    pub fn woken(&self) -> Arc<Notify> {
        Arc::clone(&self.woken)
    }

    /// The files opened since the last call, oldest first.
    pub fn arrivals(&self) -> impl Iterator<Item = Arrival> + '_ {
        self.arrivals.try_iter()
    }
}

/// What runs on the watcher's thread for every event.
struct Handler {
    discovery: Discovery,
    sender: SyncSender<Arrival>,
    woken: Arc<Notify>,
}

impl Handler {
    fn handle(&self, event: notify::Result<Event>) {
        // An error or an overflow loses events: polling finds those files.
        let Ok(event) = event else {
            return;
        };
        let opened = match (event.kind, event.paths.as_slice()) {
            (EventKind::Create(CreateKind::File | CreateKind::Any), [path])
            | (EventKind::Modify(ModifyKind::Name(RenameMode::To)), [path]) => {
                self.open(path, path, false)
            }
            // Renamed before the file was opened from its first name: it is read as
            // the rotated file of that name.
            (EventKind::Modify(ModifyKind::Name(RenameMode::Both)), [from, to]) => {
                self.open(from, to, true)
            }
            _ => false,
        };
        if opened {
            self.woken.notify_one();
        }
    }

    /// Opens `at`, a file that appeared as `path`, if the config selects `path`.
    fn open(&self, path: &Path, at: &Path, renamed: bool) -> bool {
        if !self.discovery.accepts(path) {
            return false;
        }
        // What cannot be opened is left to polling, which reports it.
        let Ok(file) = open_regular(at) else {
            return false;
        };
        let arrival = Arrival {
            path: path.to_path_buf(),
            file,
            renamed,
        };
        match self.sender.try_send(arrival) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }
}

/// The directory to watch for the files a glob matches: its leading components free of
/// wildcards, recursively when the glob goes deeper than one level below them.
fn watched_directory(glob: &str) -> (PathBuf, RecursiveMode) {
    let mut base = PathBuf::new();
    let mut rest = 0;
    for component in Path::new(glob).components() {
        let literal = match component {
            Component::Normal(name) => !name.to_string_lossy().contains(['*', '?', '[']),
            _ => true,
        };
        if rest == 0 && literal {
            base.push(component);
        } else {
            rest += 1;
        }
    }
    if rest == 0 {
        // No wildcard: one file, watched in its directory.
        let parent = base.parent().map(Path::to_path_buf).unwrap_or_default();
        return (parent, RecursiveMode::NonRecursive);
    }
    let mode = if rest > 1 {
        RecursiveMode::Recursive
    } else {
        RecursiveMode::NonRecursive
    };
    (base, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_watched_is_where_the_wildcards_begin() {
        assert_eq!(
            watched_directory("/var/log/pods/*/*/*.log"),
            (PathBuf::from("/var/log/pods"), RecursiveMode::Recursive)
        );
        assert_eq!(
            watched_directory("/var/log/containers/*.log"),
            (
                PathBuf::from("/var/log/containers"),
                RecursiveMode::NonRecursive
            )
        );
        assert_eq!(
            watched_directory("/var/log/kube-apiserver/audit.log"),
            (
                PathBuf::from("/var/log/kube-apiserver"),
                RecursiveMode::NonRecursive
            )
        );
    }
}
