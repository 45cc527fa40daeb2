//! Settings of the `k8s_objects` receiver, named as the OpenTelemetry Collector's
//! `k8sobjects` receiver names them where it has the setting.

use std::path::PathBuf;

use opscope_model::config::{FieldError, Validate};
use serde::Deserialize;

/// Objects tracked at most per watched resource: a set of their uids' hashes, to
/// tell an object's creation from its later writes.
pub const DEFAULT_MAX_OBJECTS: usize = 100_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct K8sObjectsConfig {
    /// How the API server is reached: `serviceAccount` (in a pod) or `kubeConfig`.
    #[serde(default)]
    pub auth_type: AuthType,
    /// The kubeconfig of `auth_type: kubeConfig`; else `KUBECONFIG` or `~/.kube/config`.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// The resources to list and watch.
    pub objects: Vec<WatchedObjects>,
    /// Objects remembered per resource (their uids), to tell a creation from a write.
    #[serde(default = "default_max_objects")]
    pub max_objects: usize,
}

fn default_max_objects() -> usize {
    DEFAULT_MAX_OBJECTS
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum AuthType {
    #[default]
    #[serde(rename = "serviceAccount")]
    ServiceAccount,
    #[serde(rename = "kubeConfig")]
    KubeConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchedObjects {
    /// The resource's plural name, as the API names it (`widgets`).
    pub name: String,
    /// Its API group (`e2e.opscope.dev`, `apps`); the version the API server
    /// prefers is watched.
    pub group: String,
    /// Namespaces to watch; none: all.
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub label_selector: Option<String>,
}

impl Validate for K8sObjectsConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.objects.is_empty() {
            return Err(FieldError::new("objects", "name at least one resource"));
        }
        for (index, objects) in self.objects.iter().enumerate() {
            let at = |field: &str| format!("objects[{index}].{field}");
            if objects.name.is_empty() {
                return Err(FieldError::new(at("name"), "must name a resource (plural)"));
            }
            if objects.group.is_empty() {
                return Err(FieldError::new(
                    at("group"),
                    "must name an API group: the core group's kinds are not watched yet",
                ));
            }
            if objects.namespaces.iter().any(String::is_empty) {
                return Err(FieldError::new(
                    at("namespaces"),
                    "must not hold an empty name",
                ));
            }
        }
        if self.max_objects == 0 {
            return Err(FieldError::new("max_objects", "must be at least 1"));
        }
        if self.auth_type == AuthType::ServiceAccount && self.kubeconfig.is_some() {
            return Err(FieldError::new(
                "kubeconfig",
                "is read with auth_type: kubeConfig only",
            ));
        }
        Ok(())
    }
}
