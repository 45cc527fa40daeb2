//! The pod and container a cgroup belongs to, read from the path the kubelet and the
//! container runtime give it. Both cgroup drivers and both cgroup versions name the
//! pod by its UID and the container by its id:
//!
//! * cgroupfs: `/kubepods/burstable/pod<uid>/<container-id>`
//! * systemd: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with
//!   _>.slice/<runtime>-<container-id>.scope`, under `kubelet.slice` in kind, and
//!   `…pod<uid>.slice:<runtime>:<container-id>` where containerd writes its own form.

/// What a cgroup's path says of its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCgroup {
    /// With dashes, as the API server writes it (the systemd driver's underscores
    /// turned back), or the 32 hex digits of a static pod.
    pub pod_uid: String,
    /// The runtime's id of the container; `None` for the pod's own cgroup.
    pub container_id: Option<String>,
}

/// Runtime prefixes of a container's systemd scope.
const RUNTIME_PREFIXES: &[&str] = &["cri-containerd-", "crio-", "docker-", "containerd-"];

/// The pod of a cgroup path (relative to the hierarchy's root, or absolute); `None`
/// for a path outside pods, and for the runtime's own processes inside one (cri-o's
/// `crio-conmon-<id>.scope`).
pub fn pod_of(path: &str) -> Option<PodCgroup> {
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    while let Some(segment) = segments.next() {
        let (pod_part, inline_container) = match segment.split_once(':') {
            Some((pod, rest)) => (pod, Some(rest)),
            None => (segment, None),
        };
        let Some(pod_uid) = pod_uid_of(pod_part) else {
            continue;
        };
        let container = match inline_container {
            // `<runtime>:<id>`
            Some(rest) => Some(rest.rsplit(':').next().filter(|id| is_container_id(id))?),
            None => match segments.next() {
                Some(next) => Some(container_id_of(next)?),
                None => None,
            },
        };
        return Some(PodCgroup {
            pod_uid,
            container_id: container.map(str::to_string),
        });
    }
    None
}

/// `pod<uid>` (cgroupfs) or `…-pod<uid_with_underscores>.slice` (systemd).
fn pod_uid_of(segment: &str) -> Option<String> {
    let name = segment.strip_suffix(".slice").unwrap_or(segment);
    let uid = match segment.ends_with(".slice") {
        true => name.rsplit_once("-pod")?.1,
        false => name.strip_prefix("pod")?,
    };
    let uid = uid.replace('_', "-");
    is_pod_uid(&uid).then_some(uid)
}

/// A UUID (8-4-4-4-12 hex digits), or the 32 hex digits the kubelet gives a static pod.
fn is_pod_uid(uid: &str) -> bool {
    let hex = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_hexdigit());
    let lengths: Vec<usize> = uid.split('-').map(str::len).collect();
    uid.split('-').all(hex) && (lengths == [8, 4, 4, 4, 12] || lengths == [32])
}

fn container_id_of(segment: &str) -> Option<&str> {
    let name = segment.strip_suffix(".scope").unwrap_or(segment);
    if name.starts_with("crio-conmon-") {
        return None;
    }
    let id = RUNTIME_PREFIXES
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .unwrap_or(name);
    is_container_id(id).then_some(id)
}

/// Runtimes name containers by 64 hex digits.
fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(uid: &str, id: &str) -> Option<PodCgroup> {
        Some(PodCgroup {
            pod_uid: uid.into(),
            container_id: Some(id.into()),
        })
    }

    /// cgroup v1, cgroupfs driver: the memory line of /proc/<pid>/cgroup in
    /// https://medium.com/@betz.mark/understanding-resource-limits-in-kubernetes-memory-6b41e9a955f9
    #[test]
    fn v1_cgroupfs() {
        assert_eq!(
            pod_of(
                "/kubepods/burstable/podfbc202d3-da21-11e8-ab5e-42010a80014b/0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574"
            ),
            container(
                "fbc202d3-da21-11e8-ab5e-42010a80014b",
                "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574"
            )
        );
        // A pod's own cgroup, https://github.com/google/cadvisor/pull/2540
        assert_eq!(
            pod_of("/kubepods/burstable/pod1ff47ee6-9685-4726-ac6f-0ff070c452d6"),
            Some(PodCgroup {
                pod_uid: "1ff47ee6-9685-4726-ac6f-0ff070c452d6".into(),
                container_id: None
            })
        );
    }

    /// cgroup v1, systemd driver, Docker: the pids line of /proc/self/cgroup in
    /// https://github.com/lxc/lxc/issues/3890
    #[test]
    fn v1_systemd_docker() {
        assert_eq!(
            pod_of(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7d4424e6_bb13_42f4_a47a_45a4828bf54d.slice/docker-d0b3604b67ac7930dd34ba3a796627e3e4717d12309e90a4afe3f38b6816ac98.scope"
            ),
            container(
                "7d4424e6-bb13-42f4-a47a-45a4828bf54d",
                "d0b3604b67ac7930dd34ba3a796627e3e4717d12309e90a4afe3f38b6816ac98"
            )
        );
    }

    /// cgroup v2, systemd driver, containerd in kind (under `kubelet.slice`):
    /// https://github.com/containerd/nri/pull/227
    #[test]
    fn v2_systemd_containerd_in_kind() {
        assert_eq!(
            pod_of(
                "/sys/fs/cgroup/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod1e597579_417e_482f_bf65_5fe170c3aebd.slice/cri-containerd-a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e.scope"
            ),
            container(
                "1e597579-417e-482f-bf65-5fe170c3aebd",
                "a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e"
            )
        );
    }

    /// A static pod (its UID a hash), two levels of `systemd-cgls` output in
    /// https://github.com/netdata/netdata/issues/4868
    #[test]
    fn static_pod_uid() {
        assert_eq!(
            pod_of(
                "kubepods-burstable-pod8daa50c3a64c9ff60bb9eab7b44b56fd.slice/cri-containerd-2884d57c0e100d7a9a2f9487ce0bc2986bca3430e988af7a4865aff061f51ac5.scope"
            ),
            container(
                "8daa50c3a64c9ff60bb9eab7b44b56fd",
                "2884d57c0e100d7a9a2f9487ce0bc2986bca3430e988af7a4865aff061f51ac5"
            )
        );
    }

    /// containerd's own `slice:runtime:id` form, under containerd.service:
    /// https://github.com/kubernetes/kubernetes/issues/106514
    #[test]
    fn containerd_colon_form() {
        assert_eq!(
            pod_of(
                "/sys/fs/cgroup/systemd/system.slice/containerd.service/kubepods-burstable-pod36b6d6be73b1065af369b3985edafa09.slice:cri-containerd:79fedb3bd23ca77c9d9ccb41909038316f713df22b54b7d942b71d3812e7c74e"
            ),
            container(
                "36b6d6be73b1065af369b3985edafa09",
                "79fedb3bd23ca77c9d9ccb41909038316f713df22b54b7d942b71d3812e7c74e"
            )
        );
    }

    /// cri-o's monitor process has a scope of its own in the pod: not the container.
    /// https://github.com/opencontainers/runc/issues/4620
    #[test]
    fn crio_conmon_is_not_the_container() {
        assert_eq!(
            pod_of(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod207aaad1_659f_4db8_88e0_46e0cdcc3004.slice/crio-conmon-32da98c8522068be05a7510a3eddb09cad6ed2f03286180d0e931d0d0b6224a6.scope"
            ),
            None
        );
    }

    #[test]
    fn paths_outside_pods() {
        for path in [
            "/",
            "/system.slice/containerd.service",
            "/kubepods/burstable",
            "/kubepods.slice/kubepods-besteffort.slice",
            "/user.slice/user-1000.slice/session-2.scope",
            "/process_api/b6128f926b4ff2a35b1208729356c03e",
            "/kubepods/podnot-a-uid/0a1b",
        ] {
            assert_eq!(pod_of(path), None, "{path}");
        }
    }
}
