//! Finding the files to tail (`include` globs minus `exclude`, pod filters), and a
//! file's rotated siblings (`0.log.<timestamp>`) after a rename or a copytruncate.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use glob::{MatchOptions, Pattern};

use super::config::FilelogConfig;
use super::identity::{FileIdentity, Fingerprint};
use super::open::{SkippedFiles, open_regular};
use super::pod::PodFilter;

/// `*` and `?` stop at `/`, in `include` and `exclude` alike.
const MATCH_OPTIONS: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

/// Rotated siblings looked at when a file is searched among them.
const MAX_SIBLINGS: usize = 64;

#[derive(Clone)]
pub struct Discovery {
    include: Vec<String>,
    include_patterns: Vec<Pattern>,
    exclude: Vec<Pattern>,
    pods: PodFilter,
}

impl Discovery {
    /// The config's globs; they were checked by `FilelogConfig::validate`, and one that
    /// does not compile matches nothing.
    pub fn new(config: &FilelogConfig) -> Self {
        let compile =
            |globs: &[String]| globs.iter().filter_map(|g| Pattern::new(g).ok()).collect();
        Self {
            include: config.include.clone(),
            include_patterns: compile(&config.include),
            exclude: compile(&config.exclude),
            pods: PodFilter::new(&config.namespaces, &config.pods, &config.containers),
        }
    }

    /// The paths to tail now, sorted, at most `limit`: all but directories, so that
    /// opening them refuses (and reports) what is not a regular file.
    pub fn find(&self, limit: usize) -> Vec<PathBuf> {
        let mut found = BTreeSet::new();
        for glob in &self.include {
            let Ok(paths) = glob::glob_with(glob, MATCH_OPTIONS) else {
                continue;
            };
            let wanted = paths
                .filter_map(Result::ok)
                .filter(|path| self.wanted(path) && !path.is_dir());
            for path in wanted {
                if found.len() >= limit {
                    return found.into_iter().collect();
                }
                found.insert(path);
            }
        }
        found.into_iter().collect()
    }

    /// Whether the config selects `path` (for files resumed from a checkpoint).
    pub fn accepts(&self, path: &Path) -> bool {
        self.include_patterns
            .iter()
            .any(|p| p.matches_path_with(path, MATCH_OPTIONS))
            && self.wanted(path)
    }

    fn wanted(&self, path: &Path) -> bool {
        !self
            .exclude
            .iter()
            .any(|p| p.matches_path_with(path, MATCH_OPTIONS))
            && self.pods.accepts(path)
    }
}

/// The file `identity` with the fingerprint `fingerprint`, renamed from `path` to one of
/// its rotated siblings; siblings that cannot be opened are reported to `skipped`.
pub fn find_renamed(
    path: &Path,
    identity: FileIdentity,
    fingerprint: Fingerprint,
    skipped: &mut SkippedFiles,
) -> Option<File> {
    rotated_siblings(path).into_iter().find_map(|sibling| {
        let file = open_sibling(&sibling, skipped)?;
        let same = FileIdentity::of(&file.metadata().ok()?) == identity
            && fingerprint.recheck(&file).ok()?.is_some();
        same.then_some(file)
    })
}

/// The newest copy of a file that was then truncated (logrotate's `copytruncate`): a
/// rotated sibling, other than the file itself, that starts with the same bytes and
/// holds at least `min_size` bytes.
pub fn find_copy(
    path: &Path,
    original: FileIdentity,
    fingerprint: Fingerprint,
    min_size: u64,
    skipped: &mut SkippedFiles,
) -> Option<(File, FileIdentity)> {
    let copies = rotated_siblings(path).into_iter().filter_map(|sibling| {
        let file = open_sibling(&sibling, skipped)?;
        let metadata = file.metadata().ok()?;
        let identity = FileIdentity::of(&metadata);
        let copy = identity != original
            && metadata.len() >= min_size
            && fingerprint.recheck(&file).ok()?.is_some();
        let modified = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        copy.then_some((modified, file, identity))
    });
    copies
        .max_by_key(|(modified, _, _)| *modified)
        .map(|(_, file, identity)| (file, identity))
}

fn open_sibling(sibling: &Path, skipped: &mut SkippedFiles) -> Option<File> {
    open_regular(sibling)
        .map_err(|err| skipped.report(sibling, &err))
        .ok()
}

/// Files next to `path` named `<its name>.<suffix>`, not compressed, the newest names
/// first (rotation suffixes are timestamps or counters).
fn rotated_siblings(path: &Path) -> Vec<PathBuf> {
    let (Some(directory), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut siblings: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.starts_with(&prefix) && !name.ends_with(".gz")
        })
        .map(|entry| entry.path())
        .collect();
    siblings.sort_unstable_by(|a, b| b.cmp(a));
    siblings.truncate(MAX_SIBLINGS);
    siblings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> FilelogConfig {
        serde_json::from_str(json).expect("a config")
    }

    fn write(path: &Path, content: &str) {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }

    #[test]
    fn include_minus_exclude_and_pod_filters() {
        let root = tempfile::tempdir().expect("a temp dir");
        let pods = root.path().join("pods");
        let operator = pods.join("ray-system_kuberay-operator-x_0f9d8c7b-1111/manager/0.log");
        let sidecar = pods.join("ray-system_kuberay-operator-x_0f9d8c7b-1111/proxy/0.log");
        let other = pods.join("default_web-1_0f9d8c7b-2222/web/0.log");
        for path in [&operator, &sidecar, &other] {
            write(path, "x\n");
        }
        write(
            &pods.join("ray-system_kuberay-operator-x_0f9d8c7b-1111/manager/0.log.20240501-120000"),
            "x\n",
        );
        let include = format!("{}/*/*/*.log", pods.display());
        let all = Discovery::new(&config(&format!(r#"{{"include":["{include}"]}}"#)));
        assert_eq!(
            all.find(100),
            [other.clone(), operator.clone(), sidecar.clone()]
        );
        assert_eq!(all.find(1).len(), 1, "bounded");

        let exclude = format!("{}/default_*/*/*.log", pods.display());
        let some = Discovery::new(&config(&format!(
            r#"{{"include":["{include}"],"exclude":["{exclude}"],"containers":["manager"]}}"#
        )));
        assert_eq!(some.find(100), std::slice::from_ref(&operator));
        assert!(some.accepts(&operator));
        assert!(!some.accepts(&sidecar));
        assert!(!some.accepts(&other));
    }

    #[test]
    fn a_renamed_file_is_found_among_its_siblings() {
        let root = tempfile::tempdir().expect("a temp dir");
        let path = root.path().join("0.log");
        write(&path, "first line\n");
        let file = File::open(&path).expect("open");
        let identity = FileIdentity::of(&file.metadata().expect("stat"));
        let fingerprint = Fingerprint::read(&file).expect("read");
        std::fs::rename(&path, root.path().join("0.log.20240501-120000")).expect("rename");
        write(&path, "first line\n");
        write(
            &root.path().join("0.log.20240501-110000.gz"),
            "first line\n",
        );
        let renamed = find_renamed(&path, identity, fingerprint, &mut SkippedFiles::for_tests())
            .expect("found");
        assert_eq!(
            FileIdentity::of(&renamed.metadata().expect("stat")),
            identity
        );
        std::fs::remove_file(root.path().join("0.log.20240501-120000")).expect("remove");
        assert!(
            find_renamed(&path, identity, fingerprint, &mut SkippedFiles::for_tests()).is_none()
        );
    }

    #[test]
    fn the_copy_of_a_truncated_file_is_found_by_its_first_bytes() {
        let root = tempfile::tempdir().expect("a temp dir");
        let path = root.path().join("0.log");
        write(&path, "first line\nsecond line\n");
        let file = File::open(&path).expect("open");
        let identity = FileIdentity::of(&file.metadata().expect("stat"));
        let fingerprint = Fingerprint::read(&file).expect("read");
        write(&root.path().join("0.log.1"), "first line\nsecond line\n");
        write(&root.path().join("0.log.2"), "older content\n");
        // The newest-named sibling, a FIFO: looked at first, and passed over at once.
        let fifo =
            std::ffi::CString::new(format!("{}/0.log.3", root.path().display())).expect("no NUL");
        // SAFETY: `fifo` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        std::fs::write(&path, "").expect("truncate");
        let mut skipped = SkippedFiles::for_tests();
        let (_, copy) = find_copy(&path, identity, fingerprint, 11, &mut skipped).expect("found");
        assert_ne!(copy, identity);
        assert!(
            find_copy(&path, identity, fingerprint, 1000, &mut skipped).is_none(),
            "too short"
        );
    }
}
