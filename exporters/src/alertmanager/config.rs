//! Settings of the `alertmanager` exporter: which Alertmanagers get the alerts, how often
//! firing alerts are re-sent, and the HTTP client settings every exporter shares.

use std::collections::BTreeMap;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use serde::Deserialize;
use url::Url;

use crate::queue::{QueueConfig, RetryConfig};
use crate::settings::SharedSettings;
use opscope_net::client_tls::TlsClientConfig;

/// The path of Alertmanager's API that takes alerts, below its base URL.
const ALERTS_PATH: &str = "/api/v2/alerts";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerConfig {
    /// One Alertmanager's base URL (`http://alertmanager:9093`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Several Alertmanagers (the members of an HA cluster): each gets every alert.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// How often firing alerts are sent again, so that Alertmanager does not time
    /// them out (its `resolve_timeout`, 5 m by default, must be longer).
    #[serde(default = "default_resend_interval", deserialize_with = "duration")]
    pub resend_interval: Duration,
    /// The `generatorURL` of every alert: where a user sees more (a Grafana dashboard).
    #[serde(default)]
    pub generator_url: Option<String>,
    #[serde(default)]
    pub tls: TlsClientConfig,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub sending_queue: QueueConfig,
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
}

fn default_resend_interval() -> Duration {
    Duration::from_secs(60)
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

impl AlertmanagerConfig {
    /// `<base URL>/api/v2/alerts` of every configured Alertmanager. A URL that
    /// already ends in `/api/v2/alerts` is used as it is.
    pub fn alerts_urls(&self) -> Result<Vec<String>, FieldError> {
        match (&self.endpoint, self.endpoints.is_empty()) {
            (Some(_), false) => Err(FieldError::new(
                "endpoints",
                "give either endpoint or endpoints, not both",
            )),
            (Some(endpoint), true) => Ok(vec![alerts_url("endpoint", endpoint)?]),
            (None, true) => Err(FieldError::new(
                "endpoint",
                "is required (or endpoints, for several Alertmanagers)",
            )),
            (None, false) => self.endpoints_urls(),
        }
    }

    fn endpoints_urls(&self) -> Result<Vec<String>, FieldError> {
        let mut urls: Vec<String> = Vec::with_capacity(self.endpoints.len());
        for (index, endpoint) in self.endpoints.iter().enumerate() {
            let field = format!("endpoints[{index}]");
            let url = alerts_url(&field, endpoint)?;
            if let Some(first) = urls.iter().position(|known| *known == url) {
                return Err(FieldError::new(
                    field,
                    format!("repeats endpoints[{first}]"),
                ));
            }
            urls.push(url);
        }
        Ok(urls)
    }
}

impl Validate for AlertmanagerConfig {
    fn validate(&self) -> Result<(), FieldError> {
        let urls = self.alerts_urls()?;
        if let Some(generator_url) = &self.generator_url {
            parse_http_url("generator_url", generator_url)?;
        }
        require_positive("resend_interval", self.resend_interval)?;
        SharedSettings {
            tls: &self.tls,
            https: urls.iter().any(|url| url.starts_with("https://")),
            headers: &self.headers,
            timeout: self.timeout,
            sending_queue: &self.sending_queue,
            retry_on_failure: &self.retry_on_failure,
        }
        .validate()
    }
}

fn alerts_url(field: &str, endpoint: &str) -> Result<String, FieldError> {
    let url = parse_http_url(field, endpoint)?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err(FieldError::new(
            field,
            format!("\"{endpoint}\" is a base URL: it takes no query or fragment"),
        ));
    }
    let base = url.as_str().trim_end_matches('/');
    if base.ends_with(ALERTS_PATH) {
        Ok(base.to_string())
    } else {
        Ok(format!("{base}{ALERTS_PATH}"))
    }
}

fn parse_http_url(field: &str, text: &str) -> Result<Url, FieldError> {
    let invalid = |why: &str| FieldError::new(field, format!("invalid URL \"{text}\": {why}"));
    if text.trim().is_empty() {
        return Err(FieldError::new(field, "is empty"));
    }
    let url = Url::parse(text.trim()).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(&format!(
            "scheme {}:// is not http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    Ok(url)
}

fn require_positive(field: &str, value: Duration) -> Result<(), FieldError> {
    if value.is_zero() {
        return Err(FieldError::new(field, "must be greater than zero"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> AlertmanagerConfig {
        serde_json::from_value(json).expect("valid test config")
    }

    fn field_at_fault(json: serde_json::Value) -> String {
        config(json).validate().expect_err("invalid config").field
    }

    #[test]
    fn defaults() {
        let config = config(serde_json::json!({"endpoint": "http://am:9093"}));
        assert_eq!(config.resend_interval, Duration::from_secs(60));
        assert_eq!(config.timeout, Duration::from_secs(5));
        assert_eq!(config.generator_url, None);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn alerts_urls_append_the_api_path_once() {
        let urls = config(serde_json::json!({"endpoints": [
            "http://am-0:9093",
            "https://am-1.example/alertmanager/",
            "http://am-2:9093/api/v2/alerts",
        ]}))
        .alerts_urls()
        .expect("valid endpoints");
        assert_eq!(
            urls,
            [
                "http://am-0:9093/api/v2/alerts",
                "https://am-1.example/alertmanager/api/v2/alerts",
                "http://am-2:9093/api/v2/alerts",
            ]
        );
    }

    #[test]
    fn endpoint_errors_name_the_field() {
        assert_eq!(field_at_fault(serde_json::json!({})), "endpoint");
        assert_eq!(
            field_at_fault(
                serde_json::json!({"endpoint": "http://a:9093", "endpoints": ["http://b:9093"]})
            ),
            "endpoints"
        );
        assert_eq!(
            field_at_fault(serde_json::json!({"endpoints": ["http://a:9093", "am:9093"]})),
            "endpoints[1]"
        );
        assert_eq!(
            field_at_fault(serde_json::json!({"endpoints": ["http://a:9093", "http://a:9093/"]})),
            "endpoints[1]"
        );
        assert_eq!(
            field_at_fault(serde_json::json!({"endpoint": "ftp://a:9093"})),
            "endpoint"
        );
        assert_eq!(
            field_at_fault(serde_json::json!({"endpoint": "http://a:9093?x=1"})),
            "endpoint"
        );
    }

    #[test]
    fn other_settings_are_checked() {
        let with = |key: &str, value: serde_json::Value| {
            let mut json = serde_json::json!({"endpoint": "http://am:9093"});
            json[key] = value;
            field_at_fault(json)
        };
        assert_eq!(with("generator_url", "grafana".into()), "generator_url");
        assert_eq!(with("resend_interval", "0s".into()), "resend_interval");
        assert_eq!(with("timeout", "0s".into()), "timeout");
        assert_eq!(
            with("headers", serde_json::json!({"bad name": "x"})),
            "headers.bad name"
        );
        assert_eq!(
            with("sending_queue", serde_json::json!({"queue_size": 0})),
            "sending_queue.queue_size"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let json = serde_json::json!({"endpoint": "http://am:9093", "resend": "1m"});
        assert!(serde_json::from_value::<AlertmanagerConfig>(json).is_err());
    }
}
