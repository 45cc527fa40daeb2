//! Settings of the `k8s_audit` receiver: where the API server's audit webhook posts,
//! how large a batch may be, and which events are taken in.

use std::path::PathBuf;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use serde::Deserialize;

use crate::receivers::common::auth::AuthConfig;
use crate::receivers::common::server::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_HEADER_TIMEOUT,
    DEFAULT_READ_TIMEOUT, HttpConnections, SecuritySettings,
};
use crate::receivers::filelog::config::{FilelogConfig, LineFormat};
use opscope_model::config::check_listen_address;
use opscope_net::server_tls::ServerTlsConfig;

const MIB: usize = 1024 * 1024;

/// The stages an audit event can be recorded at (`audit.k8s.io/v1` `Stage`).
pub const STAGES: &[&str] = &[
    "RequestReceived",
    "ResponseStarted",
    "ResponseComplete",
    "Panic",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct K8sAuditConfig {
    /// Where the webhook listens (`host:port`); every request path is accepted.
    pub endpoint: String,
    /// An audit log file (JSON lines of `Event`, as the API server's log backend
    /// writes them), tailed as the `filelog` receiver tails files: through rotation,
    /// and from a checkpoint in `storage` across restarts. The webhook's filters do
    /// not apply to it.
    pub file: Option<PathBuf>,
    /// Directory of the file's checkpoint; without it, a restart reads from the end.
    pub storage: Option<PathBuf>,
    /// Largest batch accepted in bytes, measured after decompression; larger: 413.
    pub max_request_body_size: usize,
    /// Most events in one batch; more: 413, before any is read.
    pub max_events_per_request: usize,
    /// Connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// How long a request's headers may take (and a new connection's first
    /// request); the connection is closed after. 0: no limit.
    #[serde(deserialize_with = "duration")]
    pub read_header_timeout: Duration,
    /// How long a batch may take to arrive after its headers; 408 after. 0: no limit.
    #[serde(deserialize_with = "duration")]
    pub read_timeout: Duration,
    /// A connection with no request for this long is closed. 0: never.
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// Stages whose events become records.
    pub stages: Vec<String>,
    /// Globs (`*`, `?`) on `user.username`: events of other users are skipped.
    pub users: Vec<String>,
    /// Globs on `user.username` of events skipped even when `users` matches.
    pub exclude_users: Vec<String>,
    /// Verbs taken whoever the user: a person's delete starts the wait on an
    /// object's finalizers that `finalizer_leak` measures.
    pub any_user_verbs: Vec<String>,
    /// Globs on the resource, written `resource` for the core group and
    /// `resource.group` otherwise (`rayjobs.ray.io`, `leases.coordination.k8s.io`).
    pub resources: Vec<String>,
    /// Globs on the resource of events skipped even when `resources` matches.
    pub exclude_resources: Vec<String>,
    /// The webhook's server certificate; the API server's webhook kubeconfig
    /// then names the CA in `certificate-authority`.
    pub tls: Option<ServerTlsConfig>,
    /// Credentials the API server must present (its webhook kubeconfig's `token`
    /// or `username`/`password`).
    pub auth: Option<AuthConfig>,
}

impl Default for K8sAuditConfig {
    fn default() -> Self {
        Self {
            endpoint: "127.0.0.1:9765".into(),
            file: None,
            storage: None,
            max_request_body_size: 16 * MIB,
            // The API server sends at most 400 a batch (`--audit-webhook-batch-max-size`).
            max_events_per_request: 10_000,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            read_header_timeout: DEFAULT_READ_HEADER_TIMEOUT,
            read_timeout: DEFAULT_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            stages: vec!["ResponseComplete".into()],
            // Operators act as service accounts; people and the control plane do not.
            users: vec!["system:serviceaccount:*".into()],
            exclude_users: Vec::new(),
            any_user_verbs: vec!["delete".into(), "deletecollection".into()],
            resources: vec!["*".into()],
            // Leader-election renewals and Events are frequent and say nothing about
            // the objects an operator reconciles.
            exclude_resources: vec![
                "leases.coordination.k8s.io".into(),
                "events".into(),
                "events.events.k8s.io".into(),
            ],
            tls: None,
            auth: None,
        }
    }
}

impl K8sAuditConfig {
    /// The tailing of `file`, as a filelog receiver of one file of lines.
    pub fn file_tail(&self) -> Option<FilelogConfig> {
        let file = self.file.as_ref()?;
        Some(FilelogConfig {
            include: vec![file.display().to_string()],
            format: LineFormat::Lines,
            storage: self.storage.clone(),
            ..FilelogConfig::default()
        })
    }

    pub fn security(&self) -> SecuritySettings<'_> {
        SecuritySettings {
            tls: self.tls.as_ref(),
            auth: self.auth.as_ref(),
            at: "",
        }
    }

    pub fn connections(&self) -> HttpConnections {
        HttpConnections {
            max_connections: self.max_connections,
            read_header_timeout: self.read_header_timeout,
            read_timeout: self.read_timeout,
            idle_timeout: self.idle_timeout,
            at: "",
        }
    }
}

impl Validate for K8sAuditConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if let Some(tail) = self.file_tail() {
            tail.validate().map_err(|e| {
                FieldError::new(
                    if e.field == "storage" {
                        "storage"
                    } else {
                        "file"
                    },
                    e.message,
                )
            })?;
        }
        check_listen_address(&self.endpoint).map_err(|m| FieldError::new("endpoint", m))?;
        if self.max_request_body_size == 0 {
            return Err(FieldError::new(
                "max_request_body_size",
                "must be at least 1",
            ));
        }
        if self.max_events_per_request == 0 {
            return Err(FieldError::new(
                "max_events_per_request",
                "must be at least 1",
            ));
        }
        check_stages(&self.stages)?;
        self.connections().validate()?;
        self.security().validate()?;
        for (field, patterns) in [("users", &self.users), ("resources", &self.resources)] {
            if patterns.is_empty() {
                return Err(FieldError::new(
                    field,
                    "name at least one pattern (\"*\" takes all)",
                ));
            }
        }
        Ok(())
    }
}

fn check_stages(stages: &[String]) -> Result<(), FieldError> {
    if stages.is_empty() {
        return Err(FieldError::new("stages", "name at least one stage"));
    }
    for (index, stage) in stages.iter().enumerate() {
        if !STAGES.contains(&stage.as_str()) {
            return Err(FieldError::new(
                format!("stages[{index}]"),
                format!("unknown stage \"{stage}\" (known: {})", STAGES.join(", ")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<K8sAuditConfig, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_section_is_a_webhook_on_localhost_for_service_accounts() {
        let config = parse("{}").unwrap();
        assert_eq!(config.endpoint, "127.0.0.1:9765");
        assert_eq!(config.max_request_body_size, 16 * MIB);
        assert_eq!(config.stages, ["ResponseComplete"]);
        assert_eq!(config.users, ["system:serviceaccount:*"]);
        assert_eq!(config.any_user_verbs, ["delete", "deletecollection"]);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn problems_name_their_field() {
        let field = |json: &str| parse(json).unwrap().validate().unwrap_err().field;
        assert_eq!(field(r#"{"endpoint":"9765"}"#), "endpoint");
        assert_eq!(
            field(r#"{"max_request_body_size":0}"#),
            "max_request_body_size"
        );
        assert_eq!(field(r#"{"stages":[]}"#), "stages");
        assert_eq!(
            field(r#"{"stages":["ResponseComplete","Done"]}"#),
            "stages[1]"
        );
        assert_eq!(field(r#"{"users":[]}"#), "users");
        assert_eq!(field(r#"{"max_connections":0}"#), "max_connections");
        assert_eq!(field(r#"{"resources":[]}"#), "resources");
        assert!(
            parse(r#"{"endpoints":"x"}"#)
                .unwrap_err()
                .contains("unknown field")
        );
    }

    #[test]
    fn a_file_is_tailed_as_lines_with_its_checkpoint() {
        let config = parse(
            r#"{"file":"/var/log/kube-apiserver/audit.log","storage":"/var/lib/opscope/audit"}"#,
        )
        .unwrap();
        assert!(config.validate().is_ok());
        let tail = config.file_tail().expect("a file to tail");
        assert_eq!(tail.include, ["/var/log/kube-apiserver/audit.log"]);
        assert_eq!(tail.format, LineFormat::Lines);
        assert_eq!(
            tail.storage.as_deref(),
            Some(std::path::Path::new("/var/lib/opscope/audit"))
        );
    }
}
