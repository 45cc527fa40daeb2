//! Pod UIDs and container ids to names, from the folders the kubelet keeps on every
//! node, so the agent needs no access to the API server: `/var/log/pods/<namespace>_
//! <pod>_<uid>/` names a pod, and the links `/var/log/containers/<pod>_<namespace>_
//! <container>-<id>.log` name a container.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Most entries read from either folder.
const MAX_ENTRIES: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    pub namespace: String,
    pub pod: String,
}

pub struct PodNames {
    pod_logs: PathBuf,
    container_logs: PathBuf,
    pods: HashMap<String, PodName>,
    containers: HashMap<String, String>,
}

impl PodNames {
    pub fn new(pod_logs: PathBuf, container_logs: PathBuf) -> Self {
        Self {
            pod_logs,
            container_logs,
            pods: HashMap::new(),
            containers: HashMap::new(),
        }
    }

    pub fn pod(&self, uid: &str) -> Option<&PodName> {
        self.pods.get(uid)
    }

    pub fn container(&self, id: &str) -> Option<&str> {
        self.containers.get(id).map(String::as_str)
    }

    /// Reads both folders again; a folder that cannot be read leaves its names empty.
    pub fn rescan(&mut self) {
        self.pods = entries(&self.pod_logs)
            .filter_map(|name| {
                let (uid, pod) = pod_folder(&name)?;
                Some((uid, pod))
            })
            .collect();
        self.containers = entries(&self.container_logs)
            .filter_map(|name| container_link(&name))
            .collect();
    }
}

fn entries(folder: &Path) -> impl Iterator<Item = String> {
    std::fs::read_dir(folder)
        .into_iter()
        .flatten()
        .flatten()
        .take(MAX_ENTRIES)
        .filter_map(|entry| entry.file_name().into_string().ok())
}

/// `<namespace>_<pod>_<uid>`: neither a namespace nor a pod name holds `_`.
fn pod_folder(name: &str) -> Option<(String, PodName)> {
    let mut parts = name.splitn(3, '_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let plausible = !namespace.is_empty() && !pod.is_empty() && uid.len() >= 8;
    plausible.then(|| {
        (
            uid.to_string(),
            PodName {
                namespace: namespace.to_string(),
                pod: pod.to_string(),
            },
        )
    })
}

/// `<pod>_<namespace>_<container>-<id>.log` to `(id, container)`.
fn container_link(name: &str) -> Option<(String, String)> {
    let stem = name.strip_suffix(".log")?;
    let (rest, id) = stem.rsplit_once('-')?;
    let container = rest.splitn(3, '_').nth(2)?;
    (!container.is_empty() && id.len() >= 12).then(|| (id.to_string(), container.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_kubelets_folders() {
        let root = tempfile::tempdir().unwrap();
        let pods = root.path().join("pods");
        let containers = root.path().join("containers");
        std::fs::create_dir_all(
            pods.join("ray-system_kuberay-operator-6bc4f7d9c8-x2k4p_0f9d8c7b-1111-2222-3333-444455556666/manager"),
        )
        .unwrap();
        std::fs::create_dir_all(&containers).unwrap();
        let id = "0a1b22ec1361a97c3511db37a4bae932d41b22264e5b97611748f8b662312574";
        std::fs::write(
            containers.join(format!(
                "kuberay-operator-6bc4f7d9c8-x2k4p_ray-system_kube-rbac-proxy-{id}.log"
            )),
            "",
        )
        .unwrap();
        let mut names = PodNames::new(pods, containers);
        assert_eq!(names.pod("0f9d8c7b-1111-2222-3333-444455556666"), None);
        names.rescan();
        assert_eq!(
            names.pod("0f9d8c7b-1111-2222-3333-444455556666"),
            Some(&PodName {
                namespace: "ray-system".into(),
                pod: "kuberay-operator-6bc4f7d9c8-x2k4p".into()
            })
        );
        assert_eq!(names.container(id), Some("kube-rbac-proxy"));
    }

    #[test]
    fn missing_folders_name_nothing() {
        let mut names = PodNames::new("/nonexistent/pods".into(), "/nonexistent/containers".into());
        names.rescan();
        assert_eq!(names.pod("0f9d8c7b-1111-2222-3333-444455556666"), None);
    }
}
