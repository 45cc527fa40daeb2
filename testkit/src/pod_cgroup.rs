//! A pod's container cgroup, made on this host the way the kubelet names it, for the
//! kernel probe's tests: cgroup v2 with the systemd driver's names
//! (`kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope`), or cgroup v1's
//! memory controller with the cgroupfs driver's (`kubepods/burstable/pod<uid>/<id>`),
//! under a folder of the test's own. Needs root; removed on drop.

use std::io;
use std::path::{Path, PathBuf};

/// A cgroup hierarchy of this host, and the `cgroup_root` the `ebpf` receiver is
/// given for it.
#[derive(Debug, Clone)]
pub struct CgroupLayout {
    pub name: &'static str,
    pub cgroup_root: PathBuf,
    pub hierarchy: PathBuf,
    systemd_driver: bool,
}

impl CgroupLayout {
    /// The layouts the host has: the unified hierarchy (at `/sys/fs/cgroup`, or below
    /// it on a hybrid host), then v1's memory controller.
    pub fn available() -> Vec<Self> {
        let mut layouts = Vec::new();
        let unified = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .find(|root| Path::new(root).join("cgroup.controllers").is_file());
        if let Some(root) = unified {
            layouts.push(Self {
                name: "cgroup_v2_systemd_driver",
                cgroup_root: root.into(),
                hierarchy: root.into(),
                systemd_driver: true,
            });
        }
        if Path::new("/sys/fs/cgroup/memory/memory.usage_in_bytes").is_file() {
            layouts.push(Self {
                name: "cgroup_v1_cgroupfs_driver",
                cgroup_root: "/sys/fs/cgroup".into(),
                hierarchy: "/sys/fs/cgroup/memory".into(),
                systemd_driver: false,
            });
        }
        layouts
    }

    fn container_path(&self, pod_uid: &str, container_id: &str) -> String {
        match self.systemd_driver {
            true => format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{container_id}.scope",
                pod_uid.replace('-', "_")
            ),
            false => format!("kubepods/burstable/pod{pod_uid}/{container_id}"),
        }
    }
}

/// Whether this process runs as root (its effective uid, from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"))
    })
}

/// Why the kernel probe cannot be loaded in this test, if it cannot: it needs root,
/// a build with the `ebpf` feature (`built_with_ebpf`, which only the caller's crate
/// knows), the kernel's BTF and a cgroup hierarchy to put pods in.
pub fn kernel_probe_unavailable(built_with_ebpf: bool) -> Option<String> {
    if !is_root() {
        Some("not root: loading the probe needs CAP_BPF and CAP_PERFMON".into())
    } else if !built_with_ebpf {
        Some("built without the ebpf feature (cargo test --features opscope/ebpf)".into())
    } else if !Path::new("/sys/kernel/btf/vmlinux").is_file() {
        Some("the kernel has no BTF (/sys/kernel/btf/vmlinux)".into())
    } else if CgroupLayout::available().is_empty() {
        Some("no cgroup v2 mount and no v1 memory controller under /sys/fs/cgroup".into())
    } else {
        None
    }
}

/// A container id for a made-up pod: 64 hex digits from its UID's.
pub fn container_id_of(pod_uid: &str) -> String {
    let hex: String = pod_uid.chars().filter(char::is_ascii_hexdigit).collect();
    format!("{hex:0<32}{hex:0<32}").chars().take(64).collect()
}

pub struct PodCgroup {
    path: PathBuf,
    /// The test's own folder, the first under the hierarchy's root.
    top: PathBuf,
}

impl PodCgroup {
    /// Makes the cgroup of container `container_id` of pod `pod_uid` under the
    /// folder `test` of `layout`'s hierarchy.
    pub fn create(
        layout: &CgroupLayout,
        test: &str,
        pod_uid: &str,
        container_id: &str,
    ) -> io::Result<Self> {
        let top = layout.hierarchy.join(test);
        let path = top.join(layout.container_path(pod_uid, container_id));
        std::fs::create_dir_all(&path)?;
        Ok(Self { path, top })
    }

    /// Its `cgroup.procs`: a process whose PID is written there moves in, with all
    /// its threads.
    pub fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    pub fn add(&self, pid: u32) -> io::Result<()> {
        std::fs::write(self.procs(), pid.to_string())
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        // Deepest first: a cgroup is removed once it has no processes and no children.
        let mut cgroup = self.path.clone();
        while cgroup.starts_with(&self.top) {
            let _ = std::fs::remove_dir(&cgroup);
            if !cgroup.pop() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_are_64_hex_digits() {
        let id = container_id_of("0f9d8c7b-1111-2222-3333-444455556666");
        assert_eq!(id.len(), 64);
        assert!(id.starts_with("0f9d8c7b111122223333444455556666"));
    }
}
