//! Cgroup ids to paths. The kernel gives a cgroup's id (its kernfs node id, which is
//! also the inode number of its directory); the path, which names the pod, is found
//! by walking the mounted hierarchy. The walk is redone only when an id is unknown,
//! and at most once per interval.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Which hierarchy the probe keys its counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// The unified hierarchy: the task's own cgroup.
    V2,
    /// The `memory` controller's hierarchy, whose directories the kubelet makes per pod.
    V1,
}

/// Deepest directory walked below the root (kind's paths are seven deep).
const MAX_DEPTH: usize = 12;
/// Most directories one walk visits: a node with thousands of pods has tens of
/// thousands of cgroups at most.
const MAX_DIRECTORIES: usize = 200_000;

/// The hierarchy under `root` and the version it is: v2 when `root` holds
/// `cgroup.controllers`, else v1's `memory` controller below it (or `root` itself
/// when it is that controller's mount).
pub fn hierarchy(root: &Path) -> Result<(CgroupVersion, PathBuf), String> {
    if root.join("cgroup.controllers").is_file() {
        return Ok((CgroupVersion::V2, root.to_path_buf()));
    }
    for memory in [root.join("memory"), root.to_path_buf()] {
        if memory.join("memory.usage_in_bytes").is_file() {
            return Ok((CgroupVersion::V1, memory));
        }
    }
    Err(format!(
        "{} is neither a cgroup v2 mount (no cgroup.controllers) nor holds cgroup v1's memory controller: mount the host's /sys/fs/cgroup there",
        root.display()
    ))
}

pub struct CgroupIndex {
    root: PathBuf,
    paths: HashMap<u64, String>,
}

impl CgroupIndex {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            paths: HashMap::new(),
        }
    }

    /// The path of cgroup `id` relative to the root (`/` for the root), as of the
    /// last walk.
    pub fn path(&self, id: u64) -> Option<&str> {
        self.paths.get(&id).map(String::as_str)
    }

    /// Walks the hierarchy again. Cgroups gone since the last walk are forgotten.
    pub fn rescan(&mut self) {
        let mut paths = HashMap::new();
        let mut pending = vec![(self.root.clone(), 0usize)];
        let mut visited = 0usize;
        while let Some((directory, depth)) = pending.pop() {
            visited += 1;
            if visited > MAX_DIRECTORIES {
                tracing::warn!(root = %self.root.display(), "more than {MAX_DIRECTORIES} cgroups; the rest are not resolved");
                break;
            }
            let Ok(metadata) = std::fs::metadata(&directory) else {
                continue; // removed while walking
            };
            let relative = directory.strip_prefix(&self.root).unwrap_or(&directory);
            paths.insert(metadata.ino(), format!("/{}", relative.display()));
            if depth >= MAX_DEPTH {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&directory) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    pending.push((entry.path(), depth + 1));
                }
            }
        }
        self.paths = paths;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_inodes_of_the_directories() {
        let root = tempfile::tempdir().unwrap();
        let pod = root
            .path()
            .join("kubepods/burstable/pod1ff47ee6-9685-4726-ac6f-0ff070c452d6");
        std::fs::create_dir_all(&pod).unwrap();
        let mut index = CgroupIndex::new(root.path().to_path_buf());
        index.rescan();
        let id = std::fs::metadata(&pod).unwrap().ino();
        assert_eq!(
            index.path(id),
            Some("/kubepods/burstable/pod1ff47ee6-9685-4726-ac6f-0ff070c452d6")
        );
        let root_id = std::fs::metadata(root.path()).unwrap().ino();
        assert_eq!(index.path(root_id), Some("/"));
        std::fs::remove_dir(&pod).unwrap();
        index.rescan();
        assert_eq!(index.path(id), None);
    }

    #[test]
    fn the_version_is_read_off_the_mount() {
        let root = tempfile::tempdir().unwrap();
        assert!(hierarchy(root.path()).unwrap_err().contains("neither"));
        std::fs::create_dir(root.path().join("memory")).unwrap();
        std::fs::write(root.path().join("memory/memory.usage_in_bytes"), "0").unwrap();
        assert_eq!(
            hierarchy(root.path()).unwrap(),
            (CgroupVersion::V1, root.path().join("memory"))
        );
        std::fs::write(root.path().join("cgroup.controllers"), "cpu memory").unwrap();
        assert_eq!(
            hierarchy(root.path()).unwrap(),
            (CgroupVersion::V2, root.path().to_path_buf())
        );
    }
}
