//! Settings of the `loki` exporter: where to push, as which tenant and with which
//! credentials, which stream labels, and the shared queue and retry settings.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use serde::Deserialize;
use url::Url;

use super::labels::StreamLabel;
use crate::queue::{QueueConfig, RetryConfig};
use crate::settings::SharedSettings;
use opscope_net::client_tls::TlsClientConfig;

/// Loki's push path, appended to an `endpoint` that does not end with it.
pub const PUSH_PATH: &str = "/loki/api/v1/push";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LokiConfig {
    /// Loki's base URL (`http://loki:3100`), or the full push URL.
    pub endpoint: String,
    /// Sent as `X-Scope-OrgID` for a multi-tenant Loki.
    #[serde(default)]
    pub tenant_id: Option<String>,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub tls: TlsClientConfig,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// The stream labels; identifiers go to structured metadata instead.
    #[serde(default = "default_labels")]
    pub labels: Vec<StreamLabel>,
    #[serde(default)]
    pub sending_queue: QueueConfig,
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
}

/// At most one of HTTP basic authentication and a bearer token.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub basic: Option<BasicAuth>,
    pub bearer_token: Option<String>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    pub password: String,
}

/// Says which credentials are set, never what they are.
impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("basic", &self.basic.as_ref().map(|basic| &basic.username))
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_labels() -> Vec<StreamLabel> {
    StreamLabel::DEFAULT_SET.to_vec()
}

impl LokiConfig {
    /// The URL requests go to: `endpoint` with [`PUSH_PATH`] appended unless it
    /// already ends with it.
    pub fn push_url(&self) -> Result<Url, FieldError> {
        let endpoint = self.endpoint.trim();
        let invalid =
            |why: &str| FieldError::new("endpoint", format!("invalid URL \"{endpoint}\": {why}"));
        if endpoint.is_empty() {
            return Err(FieldError::new("endpoint", "is required"));
        }
        if !endpoint.starts_with("http://") && !endpoint.starts_with("https://") {
            return Err(invalid("needs http:// or https://"));
        }
        let mut url = Url::parse(endpoint).map_err(|e| invalid(&e.to_string()))?;
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host"));
        }
        let path = url.path().trim_end_matches('/');
        let push_path = if path.ends_with(PUSH_PATH) {
            path.to_string()
        } else {
            format!("{path}{PUSH_PATH}")
        };
        url.set_path(&push_path);
        Ok(url)
    }

    fn validate_tenant(&self) -> Result<(), FieldError> {
        match self.tenant_id.as_deref() {
            Some(tenant) if tenant.trim().is_empty() => {
                Err(FieldError::new("tenant_id", "must not be empty when set"))
            }
            Some(tenant) if http::HeaderValue::from_str(tenant).is_err() => Err(FieldError::new(
                "tenant_id",
                "is not a valid HTTP header value",
            )),
            _ => Ok(()),
        }
    }

    fn validate_auth(&self) -> Result<(), FieldError> {
        if let Some(basic) = &self.auth.basic {
            if basic.username.is_empty() {
                return Err(FieldError::new("auth.basic.username", "is required"));
            }
            if self.auth.bearer_token.is_some() {
                return Err(FieldError::new(
                    "auth",
                    "set either basic or bearer_token, not both",
                ));
            }
        }
        if let Some(token) = &self.auth.bearer_token {
            let header = http::HeaderValue::from_str(&format!("Bearer {token}"));
            if token.is_empty() || header.is_err() {
                return Err(FieldError::new(
                    "auth.bearer_token",
                    "must be a non-empty token that fits an HTTP header",
                ));
            }
        }
        Ok(())
    }

    /// An `Authorization` header would be overwritten by `auth`.
    fn validate_headers(&self) -> Result<(), FieldError> {
        let has_auth = self.auth.basic.is_some() || self.auth.bearer_token.is_some();
        match self
            .headers
            .keys()
            .find(|name| name.eq_ignore_ascii_case("authorization"))
        {
            Some(name) if has_auth => Err(FieldError::new(
                format!("headers.{name}"),
                "conflicts with auth",
            )),
            _ => Ok(()),
        }
    }

    fn validate_labels(&self) -> Result<(), FieldError> {
        if self.labels.is_empty() {
            return Err(FieldError::new(
                "labels",
                "must name at least one label (Loki refuses streams without labels)",
            ));
        }
        let mut seen = Vec::with_capacity(self.labels.len());
        for label in &self.labels {
            if seen.contains(label) {
                return Err(FieldError::new(
                    "labels",
                    format!("{} is listed twice", label.name()),
                ));
            }
            seen.push(*label);
        }
        Ok(())
    }
}

impl Validate for LokiConfig {
    fn validate(&self) -> Result<(), FieldError> {
        let push_url = self.push_url()?;
        SharedSettings {
            tls: &self.tls,
            https: push_url.scheme() == "https",
            headers: &self.headers,
            timeout: self.timeout,
            sending_queue: &self.sending_queue,
            retry_on_failure: &self.retry_on_failure,
        }
        .validate()?;
        self.validate_tenant()?;
        self.validate_auth()?;
        self.validate_headers()?;
        self.validate_labels()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> LokiConfig {
        serde_json::from_value(json).expect("valid test config")
    }

    fn error_field(json: serde_json::Value) -> String {
        config(json).validate().expect_err("invalid").field
    }

    #[test]
    fn defaults() {
        let loki = config(serde_json::json!({"endpoint": "http://loki:3100"}));
        assert!(loki.validate().is_ok());
        assert_eq!(loki.timeout, Duration::from_secs(5));
        assert_eq!(loki.labels, StreamLabel::DEFAULT_SET);
        assert!(loki.tenant_id.is_none());
    }

    #[test]
    fn push_path_appended_unless_present() {
        let url = |endpoint: &str| {
            config(serde_json::json!({ "endpoint": endpoint }))
                .push_url()
                .map(|url| url.to_string())
        };
        let expected = "http://loki:3100/loki/api/v1/push";
        assert_eq!(url("http://loki:3100").as_deref(), Ok(expected));
        assert_eq!(url("http://loki:3100/").as_deref(), Ok(expected));
        assert_eq!(
            url(" http://loki:3100/loki/api/v1/push/").as_deref(),
            Ok(expected)
        );
        assert_eq!(
            url("https://gw.example/tenant-a?org=1").as_deref(),
            Ok("https://gw.example/tenant-a/loki/api/v1/push?org=1")
        );
        assert!(url("loki:3100").is_err());
        assert!(url("ftp://loki").is_err());
        assert!(url("").is_err());
    }

    #[test]
    fn invalid_settings_name_their_field() {
        let with = |extra: serde_json::Value| {
            let mut json = serde_json::json!({"endpoint": "http://loki:3100"});
            if let (Some(json), Some(extra)) = (json.as_object_mut(), extra.as_object()) {
                json.extend(extra.clone());
            }
            error_field(json)
        };
        assert_eq!(with(serde_json::json!({"tenant_id": " "})), "tenant_id");
        assert_eq!(with(serde_json::json!({"tenant_id": "a\nb"})), "tenant_id");
        assert_eq!(with(serde_json::json!({"timeout": "0s"})), "timeout");
        assert_eq!(with(serde_json::json!({"labels": []})), "labels");
        assert_eq!(
            with(serde_json::json!({"labels": ["level", "level"]})),
            "labels"
        );
        let both =
            serde_json::json!({"basic": {"username": "u", "password": "p"}, "bearer_token": "t"});
        assert_eq!(with(serde_json::json!({ "auth": both })), "auth");
        let bearer = serde_json::json!({"bearer_token": "t"});
        let header = serde_json::json!({"Authorization": "x"});
        assert_eq!(
            with(serde_json::json!({"auth": bearer, "headers": header})),
            "headers.Authorization"
        );
        assert_eq!(
            with(serde_json::json!({"sending_queue": {"queue_size": 0}})),
            "sending_queue.queue_size"
        );
    }

    #[test]
    fn unknown_keys_and_labels_are_refused() {
        let parse = |json| serde_json::from_value::<LokiConfig>(json).map(|_| ());
        assert!(parse(serde_json::json!({"endpoint": "http://l", "tenant": "a"})).is_err());
        assert!(
            parse(serde_json::json!({"endpoint": "http://l", "labels": ["trace_id"]})).is_err()
        );
    }

    #[test]
    fn credentials_stay_out_of_debug_output() {
        let loki = config(serde_json::json!({
            "endpoint": "http://loki:3100",
            "auth": {"basic": {"username": "agent", "password": "hunter2"}},
        }));
        let printed = format!("{loki:?}");
        assert!(printed.contains("agent") && !printed.contains("hunter2"));
    }
}
