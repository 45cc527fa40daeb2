//! Settings of the `ebpf` receiver: which API-server addresses to watch, whose pods
//! to report, how often, and where the host's cgroups and pod log folders are.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use serde::Deserialize;

/// Most API-server addresses: the kernel's table of them has this many slots.
pub const MAX_API_SERVERS: usize = 64;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EbpfConfig {
    /// `ip:port` of the API server as the operators' sockets see it: the service
    /// address pods are given (`KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT`),
    /// and the endpoints too where the CNI rewrites the socket's destination.
    pub api_servers: Vec<String>,
    /// Only pods in namespaces matching one of these patterns (`*`, `?`), as the
    /// filelog receiver takes them; empty: all.
    pub namespaces: Vec<String>,
    /// Pods in namespaces matching one of these are left out even when `namespaces`
    /// takes them: by default `kube-system`, whose cluster add-ons (DNS, kube-proxy,
    /// the CNI's agents) watch the API server heavily by design and are no operators.
    pub exclude_namespaces: Vec<String>,
    /// How often the kernel's counts become metric points.
    #[serde(deserialize_with = "duration")]
    pub interval: Duration,
    /// Where the host's cgroup hierarchy is mounted: cgroup v2 when it holds
    /// `cgroup.controllers`, else v1 with its `memory` controller under it.
    pub cgroup_root: PathBuf,
    /// The kubelet's pod log folders, `<namespace>_<pod>_<uid>/`: a pod UID's name.
    pub pod_logs: PathBuf,
    /// The kubelet's links `<pod>_<namespace>_<container>-<id>.log`: a container
    /// id's name.
    pub container_logs: PathBuf,
    /// Also report processes outside pods, by their cgroup and command name (for
    /// bare hosts and tests).
    pub include_host_processes: bool,
}

impl Default for EbpfConfig {
    fn default() -> Self {
        Self {
            api_servers: service_address(&|name| std::env::var(name).ok())
                .into_iter()
                .collect(),
            namespaces: vec!["*-system".into(), "*-operator*".into(), "operators".into()],
            exclude_namespaces: vec!["kube-system".into()],
            interval: Duration::from_secs(10),
            cgroup_root: "/sys/fs/cgroup".into(),
            pod_logs: "/var/log/pods".into(),
            container_logs: "/var/log/containers".into(),
            include_host_processes: false,
        }
    }
}

impl EbpfConfig {
    /// The API-server addresses ([`Validate`] has checked that each parses).
    pub fn api_server_addresses(&self) -> Vec<SocketAddr> {
        self.api_servers
            .iter()
            .filter_map(|address| parse_address(address).ok())
            .collect()
    }
}

/// The API server's service address every pod is given in its environment.
fn service_address(lookup: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let host = lookup("KUBERNETES_SERVICE_HOST")?;
    let port = lookup("KUBERNETES_SERVICE_PORT")?;
    Some(match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    })
}

fn parse_address(address: &str) -> Result<SocketAddr, String> {
    address.parse().map_err(|_| {
        format!(
            "{address:?} is not an ip:port ([v6]:port); the kernel compares addresses, not names"
        )
    })
}

impl Validate for EbpfConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.api_servers.is_empty() {
            return Err(FieldError::new(
                "api_servers",
                "list at least one ip:port (the default, KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, is not set outside a pod)",
            ));
        }
        if self.api_servers.len() > MAX_API_SERVERS {
            return Err(FieldError::new(
                "api_servers",
                format!("at most {MAX_API_SERVERS} addresses"),
            ));
        }
        for (index, address) in self.api_servers.iter().enumerate() {
            parse_address(address)
                .map_err(|m| FieldError::new(format!("api_servers[{index}]"), m))?;
        }
        for (field, patterns) in [
            ("namespaces", &self.namespaces),
            ("exclude_namespaces", &self.exclude_namespaces),
        ] {
            if patterns.iter().any(|n| n.trim().is_empty()) {
                return Err(FieldError::new(field, "patterns must not be empty"));
            }
        }
        if self.interval < Duration::from_secs(1) || self.interval > Duration::from_secs(300) {
            return Err(FieldError::new("interval", "must be between 1s and 5m"));
        }
        for (field, path) in [
            ("cgroup_root", &self.cgroup_root),
            ("pod_logs", &self.pod_logs),
            ("container_logs", &self.container_logs),
        ] {
            if path.as_os_str().is_empty() {
                return Err(FieldError::new(field, "must name a directory"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<EbpfConfig, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn the_default_address_is_the_pods_service_address() {
        let env = |host: &'static str| {
            move |name: &str| match name {
                "KUBERNETES_SERVICE_HOST" => Some(host.to_string()),
                "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
                _ => None,
            }
        };
        assert_eq!(service_address(&env("10.96.0.1")).unwrap(), "10.96.0.1:443");
        assert_eq!(
            service_address(&env("fd00:10:96::1")).unwrap(),
            "[fd00:10:96::1]:443"
        );
        assert_eq!(service_address(&|_| None), None);
    }

    #[test]
    fn defaults_report_operator_namespaces() {
        let config = parse(r#"{"api_servers":["10.96.0.1:443"]}"#).unwrap();
        assert_eq!(config.namespaces, ["*-system", "*-operator*", "operators"]);
        assert_eq!(config.exclude_namespaces, ["kube-system"]);
        assert_eq!(config.interval, Duration::from_secs(10));
        assert!(!config.include_host_processes);
        let config = parse(r#"{"api_servers":["10.96.0.1:443","[fd00::1]:6443"]}"#).unwrap();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.api_server_addresses().len(), 2);
    }

    #[test]
    fn problems_name_their_field() {
        let field = |json: &str| parse(json).unwrap().validate().unwrap_err().field;
        assert_eq!(field(r#"{"api_servers":[]}"#), "api_servers");
        assert_eq!(
            field(r#"{"api_servers":["10.96.0.1:443","kubernetes.default:443"]}"#),
            "api_servers[1]"
        );
        assert_eq!(field(r#"{"api_servers":["10.96.0.1"]}"#), "api_servers[0]");
        let ok = r#""api_servers":["10.96.0.1:443"]"#;
        assert_eq!(
            field(&format!(r#"{{{ok},"interval":"100ms"}}"#)),
            "interval"
        );
        assert_eq!(
            field(&format!(r#"{{{ok},"namespaces":[""]}}"#)),
            "namespaces"
        );
        assert_eq!(
            field(&format!(r#"{{{ok},"cgroup_root":""}}"#)),
            "cgroup_root"
        );
        assert!(
            parse(r#"{"api_server":[]}"#)
                .unwrap_err()
                .contains("unknown field")
        );
    }
}
