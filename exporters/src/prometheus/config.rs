//! Settings of the `prometheus` (pull endpoint) and `prometheusremotewrite`
//! exporters, named as in the OpenTelemetry Collector.

use std::collections::BTreeMap;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use serde::Deserialize;
use url::Url;

use super::names::is_valid_label_name;
use super::store::SeriesLimits;
use crate::queue::{QueueConfig, RetryConfig};
use crate::settings::SharedSettings;
use opscope_net::client_tls::TlsClientConfig;
use opscope_net::server_tls::ServerTlsConfig;

fn default_endpoint() -> String {
    "127.0.0.1:8889".into()
}

fn default_expiration() -> Duration {
    Duration::from_secs(300)
}

fn default_max_series() -> usize {
    50_000
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// `host:port` to serve `GET /metrics` on.
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// Series of converted metrics and reconcile counts not updated for this long
    /// are dropped. Signal series stay while their signal fires.
    #[serde(default = "default_expiration", deserialize_with = "duration")]
    pub metric_expiration: Duration,
    /// Labels added to every series that does not set them.
    #[serde(default)]
    pub const_labels: BTreeMap<String, String>,
    /// Series exposed at most; more are refused and counted.
    #[serde(default = "default_max_series")]
    pub max_series: usize,
    /// Serve `/metrics` over TLS.
    #[serde(default)]
    pub tls: Option<ServerTlsConfig>,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        Self {
            endpoint: default_endpoint(),
            metric_expiration: default_expiration(),
            const_labels: BTreeMap::new(),
            max_series: default_max_series(),
            tls: None,
        }
    }
}

impl PrometheusConfig {
    pub fn limits(&self) -> SeriesLimits {
        SeriesLimits {
            max_series: self.max_series,
            expiration: self.metric_expiration,
        }
    }
}

impl Validate for PrometheusConfig {
    fn validate(&self) -> Result<(), FieldError> {
        let port = self
            .endpoint
            .rsplit_once(':')
            .filter(|(host, _)| !host.is_empty())
            .and_then(|(_, port)| port.parse::<u16>().ok());
        if port.is_none() {
            return Err(FieldError::new(
                "endpoint",
                format!("\"{}\" is not host:port", self.endpoint),
            ));
        }
        validate_labels("const_labels", &self.const_labels)?;
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        validate_limits(self.metric_expiration, self.max_series)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteConfig {
    /// The full URL of the receiver: `http://prometheus:9090/api/v1/write`.
    pub endpoint: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub tls: TlsClientConfig,
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub sending_queue: QueueConfig,
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
    /// Labels added to every series that does not set them (`cluster`, `replica`).
    #[serde(default)]
    pub external_labels: BTreeMap<String, String>,
    /// As for `prometheus`: state of series not updated for this long is dropped.
    #[serde(default = "default_expiration", deserialize_with = "duration")]
    pub metric_expiration: Duration,
    #[serde(default = "default_max_series")]
    pub max_series: usize,
}

impl RemoteWriteConfig {
    /// The endpoint, checked: `http` or `https` with a host.
    pub fn url(&self) -> Result<Url, FieldError> {
        let invalid = |why: String| {
            FieldError::new(
                "endpoint",
                format!("invalid URL \"{}\": {why}", self.endpoint),
            )
        };
        let url = Url::parse(self.endpoint.trim()).map_err(|e| invalid(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "scheme {}:// is not http or https",
                url.scheme()
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host".into()));
        }
        Ok(url)
    }

    pub fn limits(&self) -> SeriesLimits {
        SeriesLimits {
            max_series: self.max_series,
            expiration: self.metric_expiration,
        }
    }
}

impl Validate for RemoteWriteConfig {
    fn validate(&self) -> Result<(), FieldError> {
        SharedSettings {
            tls: &self.tls,
            https: self.url()?.scheme() == "https",
            headers: &self.headers,
            timeout: self.timeout,
            sending_queue: &self.sending_queue,
            retry_on_failure: &self.retry_on_failure,
        }
        .validate()?;
        validate_labels("external_labels", &self.external_labels)?;
        validate_limits(self.metric_expiration, self.max_series)
    }
}

/// Names the exposition gives bucket and quantile samples; a series cannot carry them.
const SAMPLE_LABELS: [&str; 2] = ["le", "quantile"];

fn validate_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for name in labels.keys() {
        let field = || format!("{field}.{name}");
        if !is_valid_label_name(name) {
            return Err(FieldError::new(
                field(),
                "is not a valid Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)",
            ));
        }
        if SAMPLE_LABELS.contains(&name.as_str()) {
            return Err(FieldError::new(
                field(),
                "is reserved for histogram buckets and summary quantiles",
            ));
        }
    }
    Ok(())
}

fn validate_limits(expiration: Duration, max_series: usize) -> Result<(), FieldError> {
    if expiration.is_zero() {
        return Err(FieldError::new(
            "metric_expiration",
            "must be greater than zero",
        ));
    }
    if max_series == 0 {
        return Err(FieldError::new("max_series", "must be at least 1"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pull(json: serde_json::Value) -> Result<PrometheusConfig, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    fn push(json: serde_json::Value) -> RemoteWriteConfig {
        serde_json::from_value(json).expect("valid remote write config")
    }

    #[test]
    fn pull_defaults_and_checks() {
        let config = pull(serde_json::json!({})).expect("empty section is valid");
        assert_eq!(config.endpoint, "127.0.0.1:8889");
        assert_eq!(config.metric_expiration, Duration::from_secs(300));
        assert_eq!(config.max_series, 50_000);
        assert!(config.validate().is_ok());
        let unknown = pull(serde_json::json!({"namespace": "x"})).unwrap_err();
        assert!(unknown.contains("unknown field `namespace`"), "{unknown}");
        let bad = pull(serde_json::json!({"endpoint": "8889"})).expect("parses");
        assert_eq!(bad.validate().unwrap_err().field, "endpoint");
        let label = pull(serde_json::json!({"const_labels": {"a-b": "x"}})).expect("parses");
        assert_eq!(label.validate().unwrap_err().field, "const_labels.a-b");
        let reserved = pull(serde_json::json!({"const_labels": {"le": "1"}})).expect("parses");
        assert_eq!(reserved.validate().unwrap_err().field, "const_labels.le");
        let zero = pull(serde_json::json!({"metric_expiration": 0})).expect("parses");
        assert_eq!(zero.validate().unwrap_err().field, "metric_expiration");
    }

    #[test]
    fn push_endpoint_must_be_an_http_url() {
        let config = push(serde_json::json!({"endpoint": "http://prom:9090/api/v1/write"}));
        assert!(config.validate().is_ok());
        assert_eq!(config.timeout, Duration::from_secs(5));
        let bad = push(serde_json::json!({"endpoint": "prom:9090"}));
        assert_eq!(bad.validate().unwrap_err().field, "endpoint");
        let queue = push(serde_json::json!({
            "endpoint": "http://prom:9090/api/v1/write",
            "sending_queue": {"queue_size": 0}
        }));
        assert_eq!(
            queue.validate().unwrap_err().field,
            "sending_queue.queue_size"
        );
    }
}
