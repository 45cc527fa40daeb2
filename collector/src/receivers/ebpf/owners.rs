//! Whose a cgroup's counts are: a pod's container (by its path, then the kubelet's
//! folders) in a namespace the receiver reports, or, when asked, a process outside
//! pods; anything else is left out.

use std::path::PathBuf;

use wildmatch::WildMatch;

use super::cgroup_index::CgroupIndex;
use super::cgroup_path::pod_of;
use super::pod_names::PodNames;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Pod {
        namespace: String,
        pod: String,
        uid: String,
        container_id: Option<String>,
        container: Option<String>,
    },
    /// A cgroup outside pods (with `include_host_processes`).
    Host { cgroup: String },
}

/// Why a cgroup is not reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// Not found in the hierarchy (gone, or not walked yet).
    UnknownCgroup,
    /// A pod whose folder is not in the pod logs yet.
    UnnamedPod,
    NotAPod,
    OtherNamespace,
}

pub struct Owners {
    cgroups: CgroupIndex,
    names: PodNames,
    namespaces: Vec<WildMatch>,
    excluded: Vec<WildMatch>,
    include_host_processes: bool,
    rescanned_this_round: bool,
}

/// Which namespaces' pods are reported: those matching `namespaces` (all when it is
/// empty) and none of `exclude_namespaces`.
pub struct NamespaceFilter<'a> {
    pub namespaces: &'a [String],
    pub exclude_namespaces: &'a [String],
}

impl Owners {
    pub fn new(
        hierarchy: PathBuf,
        names: PodNames,
        filter: NamespaceFilter<'_>,
        include_host_processes: bool,
    ) -> Self {
        let compile = |patterns: &[String]| patterns.iter().map(|p| WildMatch::new(p)).collect();
        Self {
            cgroups: CgroupIndex::new(hierarchy),
            names,
            namespaces: compile(filter.namespaces),
            excluded: compile(filter.exclude_namespaces),
            include_host_processes,
            rescanned_this_round: false,
        }
    }

    /// Starts a round of lookups: the folders are walked again at most once per round.
    pub fn start_round(&mut self) {
        self.rescanned_this_round = false;
    }

    pub fn owner(&mut self, cgroup_id: u64) -> Result<Owner, Skipped> {
        match self.lookup(cgroup_id) {
            Err(Skipped::UnknownCgroup | Skipped::UnnamedPod) if !self.rescanned_this_round => {
                self.rescanned_this_round = true;
                self.cgroups.rescan();
                self.names.rescan();
                self.lookup(cgroup_id)
            }
            result => result,
        }
    }

    fn lookup(&self, cgroup_id: u64) -> Result<Owner, Skipped> {
        let path = self.cgroups.path(cgroup_id).ok_or(Skipped::UnknownCgroup)?;
        let Some(pod) = pod_of(path) else {
            return match self.include_host_processes {
                true => Ok(Owner::Host {
                    cgroup: path.to_string(),
                }),
                false => Err(Skipped::NotAPod),
            };
        };
        let name = self.names.pod(&pod.pod_uid).ok_or(Skipped::UnnamedPod)?;
        let reported = (self.namespaces.is_empty()
            || self.namespaces.iter().any(|p| p.matches(&name.namespace)))
            && !self.excluded.iter().any(|p| p.matches(&name.namespace));
        if !reported {
            return Err(Skipped::OtherNamespace);
        }
        let container = pod
            .container_id
            .as_deref()
            .and_then(|id| self.names.container(id))
            .map(str::to_string);
        Ok(Owner::Pod {
            namespace: name.namespace.clone(),
            pod: name.pod.clone(),
            uid: pod.pod_uid,
            container_id: pod.container_id,
            container,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    const UID: &str = "7d4424e6-bb13-42f4-a47a-45a4828bf54d";
    const CONTAINER: &str = "d0b3604b67ac7930dd34ba3a796627e3e4717d12309e90a4afe3f38b6816ac98";

    struct Node {
        _root: tempfile::TempDir,
        cgroups: PathBuf,
        pod_logs: PathBuf,
        container_logs: PathBuf,
    }

    fn node() -> Node {
        let root = tempfile::tempdir().unwrap();
        let cgroups = root.path().join("cgroup");
        let pod_logs = root.path().join("pods");
        let container_logs = root.path().join("containers");
        for dir in [&cgroups, &pod_logs, &container_logs] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Node {
            _root: root,
            cgroups,
            pod_logs,
            container_logs,
        }
    }

    fn cgroup(node: &Node, path: &str) -> u64 {
        let dir = node.cgroups.join(path);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::metadata(dir).unwrap().ino()
    }

    fn owners(node: &Node, namespaces: &[&str], host: bool) -> Owners {
        let names = PodNames::new(node.pod_logs.clone(), node.container_logs.clone());
        let namespaces: Vec<String> = namespaces.iter().map(|s| s.to_string()).collect();
        let excluded = ["kube-system".to_string()];
        let filter = NamespaceFilter {
            namespaces: &namespaces,
            exclude_namespaces: &excluded,
        };
        Owners::new(node.cgroups.clone(), names, filter, host)
    }

    #[test]
    fn a_pods_container_is_named_by_the_kubelets_folders() {
        let node = node();
        let path = format!(
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/docker-{CONTAINER}.scope",
            UID.replace('-', "_")
        );
        let id = cgroup(&node, &path);
        let mut owners = owners(&node, &["*-system"], false);
        owners.start_round();
        assert_eq!(owners.owner(id), Err(Skipped::UnnamedPod));
        std::fs::create_dir(
            node.pod_logs
                .join(format!("widget-system_widget-operator-5f7d_{UID}")),
        )
        .unwrap();
        std::fs::write(
            node.container_logs.join(format!(
                "widget-operator-5f7d_widget-system_manager-{CONTAINER}.log"
            )),
            "",
        )
        .unwrap();
        // Not walked again within the round; in the next one it is.
        assert_eq!(owners.owner(id), Err(Skipped::UnnamedPod));
        owners.start_round();
        assert_eq!(
            owners.owner(id),
            Ok(Owner::Pod {
                namespace: "widget-system".into(),
                pod: "widget-operator-5f7d".into(),
                uid: UID.into(),
                container_id: Some(CONTAINER.into()),
                container: Some("manager".into()),
            })
        );
    }

    #[test]
    fn excluded_namespaces_are_left_out() {
        let node = node();
        let pod = cgroup(&node, &format!("kubepods/burstable/pod{UID}/{CONTAINER}"));
        std::fs::create_dir(
            node.pod_logs
                .join(format!("kube-system_coredns-5d78c9869d-x2k4p_{UID}")),
        )
        .unwrap();
        let mut owners = owners(&node, &["*-system"], false);
        owners.start_round();
        assert_eq!(owners.owner(pod), Err(Skipped::OtherNamespace));
    }

    #[test]
    fn other_namespaces_and_host_processes_are_left_out_unless_asked() {
        let node = node();
        let pod = cgroup(&node, &format!("kubepods/burstable/pod{UID}/{CONTAINER}"));
        let host = cgroup(&node, "system.slice/kubelet.service");
        std::fs::create_dir(node.pod_logs.join(format!("default_web-0_{UID}"))).unwrap();
        let mut owners = owners(&node, &["*-system"], false);
        owners.start_round();
        assert_eq!(owners.owner(pod), Err(Skipped::OtherNamespace));
        assert_eq!(owners.owner(host), Err(Skipped::NotAPod));
        assert_eq!(owners.owner(u64::MAX), Err(Skipped::UnknownCgroup));
        let mut owners = self::owners(&node, &[], true);
        owners.start_round();
        assert_eq!(
            owners.owner(host),
            Ok(Owner::Host {
                cgroup: "/system.slice/kubelet.service".into()
            })
        );
        assert!(matches!(
            owners.owner(pod),
            Ok(Owner::Pod {
                container: None,
                ..
            })
        ));
    }
}
