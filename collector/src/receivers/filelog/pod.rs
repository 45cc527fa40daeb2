//! The pod a log file belongs to, read from the kubelet's path layout
//! `/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log`, and pod filters.

use std::path::Path;

use opscope_model::semconv::{K8S_CONTAINER_NAME, K8S_NAMESPACE_NAME, K8S_POD_NAME};
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use opscope_proto::otlp::resource::v1::Resource;
use wildmatch::WildMatch;

pub const K8S_POD_UID: &str = "k8s.pod.uid";
pub const K8S_CONTAINER_RESTART_COUNT: &str = "k8s.container.restart_count";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub container: String,
    pub restart_count: String,
}

impl PodIdentity {
    /// The pod of a kubelet log path, also of its rotated names (`0.log.20240501-120000`,
    /// `0.log.20240501-120000.gz`); `None` for any other path.
    pub fn from_path(path: &Path) -> Option<Self> {
        let mut components = path
            .components()
            .rev()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        let file = components.next()?;
        let container = components.next()?;
        let pod_directory = components.next()?;
        let restart_count = file.split('.').next()?.to_string();
        let mut parts = pod_directory.splitn(3, '_');
        let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
        let plausible = !namespace.is_empty()
            && !pod.is_empty()
            && uid.len() >= 8
            && !container.is_empty()
            && !restart_count.is_empty()
            && restart_count.bytes().all(|b| b.is_ascii_digit());
        plausible.then(|| Self {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            uid: uid.to_string(),
            container,
            restart_count,
        })
    }

    /// The resource attributes of the pod's records.
    pub fn attributes(&self) -> Vec<KeyValue> {
        vec![
            string_attribute(K8S_NAMESPACE_NAME, &self.namespace),
            string_attribute(K8S_POD_NAME, &self.pod),
            string_attribute(K8S_POD_UID, &self.uid),
            string_attribute(K8S_CONTAINER_NAME, &self.container),
            string_attribute(K8S_CONTAINER_RESTART_COUNT, &self.restart_count),
        ]
    }
}

/// The resource of a file's records: its pod when the path says, else none.
pub fn file_resource(path: &Path) -> Resource {
    Resource {
        attributes: PodIdentity::from_path(path)
            .map(|pod| pod.attributes())
            .unwrap_or_default(),
        ..Default::default()
    }
}

pub fn string_attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

/// Which pods' logs to read, by namespace, pod and container name patterns (`*`, `?`);
/// an empty list accepts every name. With any pattern set, files outside the kubelet
/// layout are not read.
#[derive(Clone)]
pub struct PodFilter {
    namespaces: Vec<WildMatch>,
    pods: Vec<WildMatch>,
    containers: Vec<WildMatch>,
}

impl PodFilter {
    pub fn new(namespaces: &[String], pods: &[String], containers: &[String]) -> Self {
        let compile = |patterns: &[String]| patterns.iter().map(|p| WildMatch::new(p)).collect();
        Self {
            namespaces: compile(namespaces),
            pods: compile(pods),
            containers: compile(containers),
        }
    }

    pub fn accepts(&self, path: &Path) -> bool {
        if self.namespaces.is_empty() && self.pods.is_empty() && self.containers.is_empty() {
            return true;
        }
        let Some(pod) = PodIdentity::from_path(path) else {
            return false;
        };
        let any = |patterns: &[WildMatch], name: &str| {
            patterns.is_empty() || patterns.iter().any(|p| p.matches(name))
        };
        any(&self.namespaces, &pod.namespace)
            && any(&self.pods, &pod.pod)
            && any(&self.containers, &pod.container)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBERAY: &str = "/var/log/pods/ray-system_kuberay-operator-6bc4f7d9c8-x2k4p_0f9d8c7b-1111-2222-3333-444455556666/manager/3.log";

    #[test]
    fn pod_identity_from_kubelet_paths() {
        let pod = PodIdentity::from_path(Path::new(KUBERAY)).expect("a kubelet path");
        assert_eq!(pod.namespace, "ray-system");
        assert_eq!(pod.pod, "kuberay-operator-6bc4f7d9c8-x2k4p");
        assert_eq!(pod.uid, "0f9d8c7b-1111-2222-3333-444455556666");
        assert_eq!(pod.container, "manager");
        assert_eq!(pod.restart_count, "3");
        let rotated = format!("{KUBERAY}.20240501-120000.gz");
        assert_eq!(PodIdentity::from_path(Path::new(&rotated)), Some(pod));
    }

    #[test]
    fn other_paths_have_no_pod() {
        for path in [
            "operator.log",
            "/var/log/syslog",
            "/var/log/pods/nouid/c/0.log",
            "/a_b_c1234567/c/x.log",
        ] {
            assert_eq!(PodIdentity::from_path(Path::new(path)), None, "{path}");
        }
    }

    #[test]
    fn resource_attributes_name_the_pod() {
        let resource = file_resource(Path::new(KUBERAY));
        let keys: Vec<&str> = resource
            .attributes
            .iter()
            .map(|kv| kv.key.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                K8S_NAMESPACE_NAME,
                K8S_POD_NAME,
                K8S_POD_UID,
                K8S_CONTAINER_NAME,
                K8S_CONTAINER_RESTART_COUNT
            ]
        );
        assert!(file_resource(Path::new("/tmp/x.log")).attributes.is_empty());
    }

    #[test]
    fn filters_by_namespace_pod_and_container() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let path = Path::new(KUBERAY);
        assert!(PodFilter::new(&[], &[], &[]).accepts(Path::new("/tmp/x.log")));
        assert!(PodFilter::new(&names(&["ray-*"]), &[], &[]).accepts(path));
        assert!(!PodFilter::new(&names(&["kube-system"]), &[], &[]).accepts(path));
        assert!(
            PodFilter::new(
                &[],
                &names(&["nope-*", "kuberay-operator-*"]),
                &names(&["manager"])
            )
            .accepts(path)
        );
        assert!(!PodFilter::new(&[], &[], &names(&["sidecar"])).accepts(path));
        assert!(!PodFilter::new(&names(&["*"]), &[], &[]).accepts(Path::new("/tmp/x.log")));
    }
}
