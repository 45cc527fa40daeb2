//! Which operator a resource belongs to: `operator.name` if the producer set it,
//! else a configured mapping by namespace and pod name, else `service.name`, the
//! deployment (given, or derived from a ReplicaSet pod name), the container.

use opscope_proto::otlp::common::v1::KeyValue;
use serde::Deserialize;
use wildmatch::WildMatch;

use opscope_model::attributes::get_str;
use opscope_model::config::{FieldError, Validate};
use opscope_model::semconv::{
    K8S_CONTAINER_NAME, K8S_DEPLOYMENT_NAME, K8S_NAMESPACE_NAME, K8S_POD_NAME, OPERATOR_NAME,
    SERVICE_NAME,
};

/// Maps pods (by namespace and pod-name glob, `*` and `?`) to an operator name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorMapping {
    #[serde(default = "any")]
    pub namespace: String,
    #[serde(default = "any")]
    pub pod: String,
    /// The operator name written to `operator.name`.
    pub operator: String,
}

fn any() -> String {
    "*".into()
}

impl Validate for OperatorMapping {
    fn validate(&self) -> Result<(), FieldError> {
        if self.operator.trim().is_empty() {
            return Err(FieldError::new("operator", "must not be empty"));
        }
        Ok(())
    }
}

pub struct OperatorResolver {
    mappings: Vec<(WildMatch, WildMatch, String)>,
}

impl OperatorResolver {
    pub fn new(mappings: &[OperatorMapping]) -> Self {
        Self {
            mappings: mappings
                .iter()
                .map(|m| {
                    (
                        WildMatch::new(&m.namespace),
                        WildMatch::new(&m.pod),
                        m.operator.clone(),
                    )
                })
                .collect(),
        }
    }

    /// The operator of a resource, or `None` when nothing names one.
    pub fn resolve(&self, resource: &[KeyValue]) -> Option<String> {
        if let Some(name) = get_str(resource, OPERATOR_NAME) {
            return Some(name.to_string());
        }
        let namespace = get_str(resource, K8S_NAMESPACE_NAME).unwrap_or_default();
        let pod = get_str(resource, K8S_POD_NAME).unwrap_or_default();
        let mapped = self
            .mappings
            .iter()
            .find(|(ns, p, _)| ns.matches(namespace) && p.matches(pod))
            .map(|(_, _, operator)| operator.clone());
        mapped
            .or_else(|| {
                get_str(resource, SERVICE_NAME)
                    .filter(|s| !s.starts_with("unknown_service"))
                    .map(str::to_string)
            })
            .or_else(|| get_str(resource, K8S_DEPLOYMENT_NAME).map(str::to_string))
            .or_else(|| deployment_of_pod(pod).map(str::to_string))
            .or_else(|| get_str(resource, K8S_CONTAINER_NAME).map(str::to_string))
    }
}

/// The Deployment of a pod named `<deployment>-<replicaset hash>-<pod suffix>`,
/// as the Deployment controller names them.
pub fn deployment_of_pod(pod: &str) -> Option<&str> {
    let (rest, suffix) = pod.rsplit_once('-')?;
    let (deployment, hash) = rest.rsplit_once('-')?;
    let alphanumeric = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let looks_generated = suffix.len() == 5
        && (6..=10).contains(&hash.len())
        && alphanumeric(suffix)
        && alphanumeric(hash)
        && !deployment.is_empty();
    looks_generated.then_some(deployment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::attributes::set_str;

    fn resource(pairs: &[(&str, &str)]) -> Vec<KeyValue> {
        let mut attributes = Vec::new();
        for (key, value) in pairs {
            set_str(&mut attributes, key, value);
        }
        attributes
    }

    #[test]
    fn first_rule_that_names_an_operator_wins() {
        let mapping = OperatorMapping {
            namespace: "ray-*".into(),
            pod: "kuberay-operator-*".into(),
            operator: "kuberay".into(),
        };
        let resolver = OperatorResolver::new(&[mapping]);
        let pod = [
            (K8S_NAMESPACE_NAME, "ray-system"),
            (K8S_POD_NAME, "kuberay-operator-6bc4f7d9c8-x2k4p"),
        ];
        assert_eq!(
            resolver.resolve(&resource(&pod)).as_deref(),
            Some("kuberay")
        );
        let named = [
            (OPERATOR_NAME, "explicit"),
            (K8S_NAMESPACE_NAME, "ray-system"),
        ];
        assert_eq!(
            resolver.resolve(&resource(&named)).as_deref(),
            Some("explicit")
        );
        let sdk = [(SERVICE_NAME, "cert-manager"), (K8S_DEPLOYMENT_NAME, "cm")];
        assert_eq!(
            resolver.resolve(&resource(&sdk)).as_deref(),
            Some("cert-manager")
        );
        let default_service = [
            (SERVICE_NAME, "unknown_service:manager"),
            (K8S_POD_NAME, "widget-controller-7d9f8b5c4-abcde"),
        ];
        assert_eq!(
            resolver.resolve(&resource(&default_service)).as_deref(),
            Some("widget-controller")
        );
        let container = [
            (K8S_CONTAINER_NAME, "manager"),
            (K8S_POD_NAME, "single-pod"),
        ];
        assert_eq!(
            resolver.resolve(&resource(&container)).as_deref(),
            Some("manager")
        );
        assert_eq!(resolver.resolve(&[]), None);
    }

    #[test]
    fn deployment_names_come_from_generated_pod_names_only() {
        assert_eq!(
            deployment_of_pod("cert-manager-webhook-5d6b8c9f7-q8w2z"),
            Some("cert-manager-webhook")
        );
        assert_eq!(deployment_of_pod("etcd-0"), None);
        assert_eq!(deployment_of_pod("my-pod"), None);
        assert_eq!(deployment_of_pod(""), None);
    }
}
