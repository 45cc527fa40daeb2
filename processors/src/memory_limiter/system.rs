//! What the operating system says about memory: the limit the process may use (its
//! cgroup's, else the machine's RAM) and the process's resident set size.

use std::path::{Path, PathBuf};

/// cgroup v2: the memory limit of the process's cgroup, or `max`.
const CGROUP_V2_MAX: &str = "sys/fs/cgroup/memory.max";
/// cgroup v1: the limit of the memory controller; "no limit" is a number near 2^63.
const CGROUP_V1_LIMIT: &str = "sys/fs/cgroup/memory/memory.limit_in_bytes";
const MEMINFO: &str = "proc/meminfo";
const SELF_STATUS: &str = "proc/self/status";

/// cgroup v1 reports "unlimited" as the largest page-aligned i64; anything this
/// large is no limit.
const UNLIMITED_FROM: u64 = 1 << 62;

#[derive(Debug, thiserror::Error)]
pub enum SystemMemoryError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} has no {what}")]
    Unparsable { path: PathBuf, what: &'static str },
}

/// Reads memory figures from a filesystem root (`/` in production).
#[derive(Debug, Clone)]
pub struct SystemMemory {
    root: PathBuf,
}

impl Default for SystemMemory {
    fn default() -> Self {
        Self::at("/")
    }
}

impl SystemMemory {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The memory the process may use: its cgroup's limit (v2, else v1) when there is
    /// one and it is below the machine's RAM, else the RAM.
    pub fn total(&self) -> Result<u64, SystemMemoryError> {
        let ram_path = self.root.join(MEMINFO);
        let ram = parse_meminfo_total(&read(&ram_path)?).ok_or(SystemMemoryError::Unparsable {
            path: ram_path,
            what: "MemTotal line",
        })?;
        let cgroup = self
            .read_optional(CGROUP_V2_MAX)
            .and_then(|text| parse_cgroup_limit(&text))
            .or_else(|| {
                self.read_optional(CGROUP_V1_LIMIT)
                    .and_then(|text| parse_cgroup_limit(&text))
            });
        Ok(cgroup.map_or(ram, |limit| limit.min(ram)))
    }

    /// The resident set size of this process.
    pub fn resident_bytes(&self) -> Result<u64, SystemMemoryError> {
        let path = self.root.join(SELF_STATUS);
        parse_status_rss(&read(&path)?).ok_or(SystemMemoryError::Unparsable {
            path,
            what: "VmRSS line",
        })
    }

    /// A cgroup file; absent when the process is in no such cgroup.
    fn read_optional(&self, relative: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(relative)).ok()
    }
}

fn read(path: &Path) -> Result<String, SystemMemoryError> {
    std::fs::read_to_string(path).map_err(|source| SystemMemoryError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// A cgroup memory limit in bytes; `None` for `max` (v2) or a v1 "unlimited".
pub fn parse_cgroup_limit(text: &str) -> Option<u64> {
    let limit: u64 = text.trim().parse().ok()?;
    (limit < UNLIMITED_FROM).then_some(limit)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    kib_field(text, "MemTotal:")
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes.
pub fn parse_status_rss(text: &str) -> Option<u64> {
    kib_field(text, "VmRSS:")
}

/// A `Name:   1234 kB` line, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find_map(|line| line.strip_prefix(name))?;
    let mut words = line.split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/memory");

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(Path::new(FIXTURES).join(name)).unwrap()
    }

    #[test]
    fn cgroup_limits_and_their_unlimited_forms() {
        assert_eq!(parse_cgroup_limit(&fixture("cgroup_v2_unlimited")), None);
        assert_eq!(
            parse_cgroup_limit(&fixture("cgroup_v2_limited")),
            Some(256 << 20)
        );
        assert_eq!(parse_cgroup_limit(&fixture("cgroup_v1_unlimited")), None);
        assert_eq!(
            parse_cgroup_limit(&fixture("cgroup_v1_limited")),
            Some(512 << 20)
        );
        assert_eq!(parse_cgroup_limit("lots"), None);
    }

    #[test]
    fn meminfo_and_status_figures_in_bytes() {
        assert_eq!(
            parse_meminfo_total(&fixture("meminfo")),
            Some(24_684_084 * 1024)
        );
        assert_eq!(parse_status_rss(&fixture("status")), Some(1768 * 1024));
        assert_eq!(parse_status_rss("VmRSS: 12 pages"), None);
        assert_eq!(parse_status_rss(""), None);
    }

    /// A filesystem root laid out like `/` with the given files.
    fn root(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "opscope-memory-{}-{}",
            std::process::id(),
            files.len()
        ));
        for (path, name) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, fixture(name)).unwrap();
        }
        dir
    }

    #[test]
    fn the_cgroup_limit_wins_over_ram_and_unlimited_falls_back_to_ram() {
        let ram = 24_684_084 * 1024;
        let unlimited = root(&[(MEMINFO, "meminfo"), (CGROUP_V2_MAX, "cgroup_v2_unlimited")]);
        assert_eq!(SystemMemory::at(&unlimited).total().unwrap(), ram);
        let v1 = root(&[
            (MEMINFO, "meminfo"),
            (CGROUP_V2_MAX, "cgroup_v2_unlimited"),
            (CGROUP_V1_LIMIT, "cgroup_v1_limited"),
        ]);
        assert_eq!(SystemMemory::at(&v1).total().unwrap(), 512 << 20);
        let none = root(&[]);
        assert!(
            SystemMemory::at(&none)
                .total()
                .unwrap_err()
                .to_string()
                .contains("meminfo")
        );
        for dir in [unlimited, v1, none] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
