//! Settings of the `prometheus_scrape` receiver, named as Prometheus names its
//! scrape settings: targets (listed or in a file), path, scheme, interval, auth, TLS.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use opscope_model::config::{
    FieldError, MAX_DURATION, Validate, duration, duration_in, optional_duration,
};
use opscope_net::client_tls::TlsClientConfig;
use serde::Deserialize;

use super::targets::check_target;

const MIB: usize = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrometheusScrapeConfig {
    /// `host:port` of each metrics endpoint.
    pub targets: Vec<String>,
    /// More targets, read again when the file changes: `host:port` per line, a
    /// YAML/JSON list of them, or Prometheus file_sd groups (`targets`, `labels`).
    pub targets_file: Option<PathBuf>,
    /// Written as `service.name` of the scraped series (Prometheus' `job`); the
    /// operator_tagger takes it for the operator's name.
    pub job_name: Option<String>,
    pub metrics_path: String,
    pub scheme: Scheme,
    #[serde(deserialize_with = "duration")]
    pub interval: Duration,
    /// How long one scrape may take; at most `interval`. Unset, it is the smaller
    /// of 10 s and the interval, as in Prometheus (see [`Self::scrape_timeout`]).
    #[serde(deserialize_with = "optional_duration")]
    pub timeout: Option<Duration>,
    pub bearer_token: Option<String>,
    /// Read at every scrape, so a rotated service-account token is picked up.
    pub bearer_token_file: Option<PathBuf>,
    pub tls: TlsClientConfig,
    /// Resource attributes added to every series (e.g. `k8s.namespace.name`).
    pub labels: BTreeMap<String, String>,
    /// Largest page read in bytes; a larger one fails the scrape.
    pub max_page_size: usize,
    /// Most samples (and metric families) a page may hold; a page with more fails
    /// the scrape, as Prometheus' `sample_limit` does.
    pub max_series: usize,
}

impl Default for PrometheusScrapeConfig {
    fn default() -> Self {
        Self {
            targets: Vec::new(),
            targets_file: None,
            job_name: None,
            metrics_path: "/metrics".into(),
            scheme: Scheme::Http,
            interval: Duration::from_secs(30),
            timeout: None,
            bearer_token: None,
            bearer_token_file: None,
            tls: TlsClientConfig::default(),
            labels: BTreeMap::new(),
            max_page_size: 10 * MIB,
            max_series: 20_000,
        }
    }
}

/// The shortest `interval`. A scrape is a request and the parse of a page of up to
/// `max_page_size`; more often than every 100 ms a target with a large page is scraped
/// back to back, which burns the agent's CPU and the target's (1 ns was a busy loop).
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Prometheus' `scrape_timeout` default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl PrometheusScrapeConfig {
    /// The timeout of one scrape: the one set, or the smaller of 10 s and the interval.
    pub fn scrape_timeout(&self) -> Duration {
        self.timeout
            .unwrap_or_else(|| DEFAULT_TIMEOUT.min(self.interval))
    }

    fn validate_targets(&self) -> Result<(), FieldError> {
        if self.targets.is_empty() && self.targets_file.is_none() {
            return Err(FieldError::new(
                "targets",
                "list at least one host:port, or set targets_file",
            ));
        }
        for (index, target) in self.targets.iter().enumerate() {
            check_target(target).map_err(|m| FieldError::new(format!("targets[{index}]"), m))?;
        }
        Ok(())
    }

    fn validate_names(&self) -> Result<(), FieldError> {
        if self
            .job_name
            .as_deref()
            .is_some_and(|job| job.trim().is_empty())
        {
            return Err(FieldError::new("job_name", "must not be empty"));
        }
        if self.labels.keys().any(|key| key.trim().is_empty()) {
            return Err(FieldError::new("labels", "names must not be empty"));
        }
        Ok(())
    }
}

impl Validate for PrometheusScrapeConfig {
    fn validate(&self) -> Result<(), FieldError> {
        self.validate_targets()?;
        if !self.metrics_path.starts_with('/') {
            return Err(FieldError::new("metrics_path", "must start with /"));
        }
        duration_in("interval", self.interval, MIN_INTERVAL..=MAX_DURATION)?;
        let timeout = self.scrape_timeout();
        if timeout.is_zero() || timeout > self.interval {
            return Err(FieldError::new(
                "timeout",
                "must be greater than zero and at most the interval",
            ));
        }
        if self.bearer_token.is_some() && self.bearer_token_file.is_some() {
            return Err(FieldError::new(
                "bearer_token_file",
                "set bearer_token or bearer_token_file, not both",
            ));
        }
        self.tls.validate()?;
        if self.scheme == Scheme::Https {
            self.tls.load()?;
        }
        self.validate_names()?;
        for (field, value) in [
            ("max_page_size", self.max_page_size),
            ("max_series", self.max_series),
        ] {
            if value == 0 {
                return Err(FieldError::new(field, "must be at least 1"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<PrometheusScrapeConfig, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_prometheus_defaults() {
        let config = parse(r#"{"targets":["10.244.1.17:8080"]}"#).unwrap();
        assert_eq!(config.metrics_path, "/metrics");
        assert_eq!(config.scheme, Scheme::Http);
        assert_eq!(config.interval, Duration::from_secs(30));
        assert_eq!(config.scrape_timeout(), Duration::from_secs(10));
        assert_eq!(config.max_page_size, 10 * MIB);
        assert_eq!(config.validate(), Ok(()));
        let config = parse(
            r#"{"targets_file":"/etc/opscope/targets.yaml","scheme":"https","interval":"15s","timeout":"15s","job_name":"kuberay-operator","labels":{"k8s.namespace.name":"ray-system"}}"#,
        )
        .unwrap();
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn an_unset_timeout_is_the_smaller_of_ten_seconds_and_the_interval() {
        let config = parse(r#"{"targets":["a:1"],"interval":"1s"}"#).unwrap();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.scrape_timeout(), Duration::from_secs(1));
        let config = parse(r#"{"targets":["a:1"],"interval":"1m"}"#).unwrap();
        assert_eq!(config.scrape_timeout(), Duration::from_secs(10));
        let config = parse(r#"{"targets":["a:1"],"interval":"1m","timeout":"20s"}"#).unwrap();
        assert_eq!(config.scrape_timeout(), Duration::from_secs(20));
        let config = parse(r#"{"targets":["a:1"],"interval":"1s","timeout":"2s"}"#).unwrap();
        assert_eq!(config.validate().unwrap_err().field, "timeout");
    }

    #[test]
    fn problems_name_their_field() {
        let field = |json: &str| parse(json).unwrap().validate().unwrap_err().field;
        assert_eq!(field("{}"), "targets");
        assert_eq!(field(r#"{"targets":["a:1","http://b:2"]}"#), "targets[1]");
        assert_eq!(field(r#"{"targets":["a"]}"#), "targets[0]");
        assert_eq!(
            field(r#"{"targets":["a:1"],"metrics_path":"metrics"}"#),
            "metrics_path"
        );
        assert_eq!(field(r#"{"targets":["a:1"],"interval":0}"#), "interval");
        assert_eq!(field(r#"{"targets":["a:1"],"interval":"1ns"}"#), "interval");
        assert_eq!(
            parse(r#"{"targets":["a:1"],"interval":"99ms"}"#)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string(),
            "interval: must be between 100ms and 1year, not 99ms"
        );
        assert_eq!(field(r#"{"targets":["a:1"],"timeout":"1m"}"#), "timeout");
        assert_eq!(
            field(r#"{"targets":["a:1"],"bearer_token":"t","bearer_token_file":"/t"}"#),
            "bearer_token_file"
        );
        assert_eq!(
            field(
                r#"{"targets":["a:1"],"scheme":"https","tls":{"ca_file":"/nonexistent/ca.pem"}}"#
            ),
            "tls.ca_file"
        );
        assert_eq!(field(r#"{"targets":["a:1"],"job_name":" "}"#), "job_name");
        assert_eq!(field(r#"{"targets":["a:1"],"labels":{"":"x"}}"#), "labels");
        assert_eq!(field(r#"{"targets":["a:1"],"max_series":0}"#), "max_series");
        assert!(
            parse(r#"{"scheme":"ftp"}"#)
                .unwrap_err()
                .contains("unknown variant")
        );
        assert!(
            parse(r#"{"target":["a:1"]}"#)
                .unwrap_err()
                .contains("unknown field")
        );
    }
}
