//! Settings of the `otlp` (gRPC) and `otlphttp` exporters, named as in the
//! OpenTelemetry Collector.

use std::collections::BTreeMap;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use serde::Deserialize;
use url::Url;

use crate::queue::{QueueConfig, RetryConfig};
use crate::settings::SharedSettings;
use opscope_net::client_tls::TlsClientConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    Http,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Gzip,
    Zstd,
    None,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpExporterConfig {
    /// gRPC: `host:port` (TLS unless `tls.insecure`) or `http(s)://host:port`.
    /// HTTP: the base URL; `/v1/traces`, `/v1/logs`, `/v1/metrics` are appended.
    pub endpoint: String,
    #[serde(default)]
    pub tls: TlsClientConfig,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub compression: Compression,
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// The largest request sent, in bytes of protobuf before compression: larger
    /// batches go in several requests. 4 MiB is what gRPC servers take by default;
    /// 0 sends batches whole.
    #[serde(default = "default_max_request_size")]
    pub max_request_size: usize,
    #[serde(default)]
    pub sending_queue: QueueConfig,
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_max_request_size() -> usize {
    4 * 1024 * 1024
}

/// Where and how to connect, derived from `endpoint` and `tls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http(s)://host:port[/base]`, without a trailing slash.
    pub url: String,
    pub tls: bool,
}

impl OtlpExporterConfig {
    /// `max_request_size` as a limit, `None` for none.
    pub fn request_size_limit(&self) -> Option<usize> {
        (self.max_request_size > 0).then_some(self.max_request_size)
    }

    pub fn validate(&self, protocol: OtlpProtocol) -> Result<(), FieldError> {
        let target = self.target(protocol)?;
        if target.tls && protocol == OtlpProtocol::Grpc && self.tls.insecure_skip_verify {
            return Err(FieldError::new(
                "tls.insecure_skip_verify",
                "is not supported by the gRPC exporter; give the server's CA in tls.ca_file",
            ));
        }
        if protocol == OtlpProtocol::Http && self.compression == Compression::Zstd {
            return Err(FieldError::new(
                "compression",
                "zstd is not supported by otlphttp; use gzip or none",
            ));
        }
        SharedSettings {
            tls: &self.tls,
            https: target.tls,
            headers: &self.headers,
            timeout: self.timeout,
            sending_queue: &self.sending_queue,
            retry_on_failure: &self.retry_on_failure,
        }
        .validate()
    }

    pub fn target(&self, protocol: OtlpProtocol) -> Result<Target, FieldError> {
        let invalid = |why: &str| {
            FieldError::new(
                "endpoint",
                format!("invalid URL \"{}\": {why}", self.endpoint),
            )
        };
        let endpoint = self.endpoint.trim();
        if endpoint.is_empty() {
            return Err(FieldError::new("endpoint", "is required"));
        }
        let has_scheme = endpoint.contains("://");
        if !has_scheme && protocol == OtlpProtocol::Http {
            return Err(invalid("otlphttp needs http:// or https://"));
        }
        let url = if has_scheme {
            Url::parse(endpoint).map_err(|e| invalid(&e.to_string()))?
        } else {
            Url::parse(&format!("http://{endpoint}")).map_err(|e| invalid(&e.to_string()))?
        };
        let tls = match url.scheme() {
            "https" => true,
            "http" if has_scheme => false,
            "http" => !self.tls.insecure,
            other => return Err(invalid(&format!("scheme {other}:// is not http or https"))),
        };
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host"));
        }
        if protocol == OtlpProtocol::Grpc && url.port_or_known_default().is_none() {
            return Err(invalid("no port"));
        }
        let scheme = if tls { "https" } else { "http" };
        let authority = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        let path = url.path().trim_end_matches('/');
        Ok(Target {
            url: format!("{scheme}://{authority}{path}"),
            tls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(endpoint: &str, insecure: bool) -> OtlpExporterConfig {
        let json = serde_json::json!({"endpoint": endpoint, "tls": {"insecure": insecure}});
        serde_json::from_value(json).expect("valid test config")
    }

    #[test]
    fn grpc_endpoints_follow_collector_rules() {
        let target = |e, insecure| config(e, insecure).target(OtlpProtocol::Grpc);
        assert_eq!(
            target("jaeger:4317", false).unwrap().url,
            "https://jaeger:4317"
        );
        assert_eq!(
            target("jaeger:4317", true).unwrap().url,
            "http://jaeger:4317"
        );
        assert!(!target("http://10.0.0.1:4317", false).unwrap().tls);
        assert!(target("https://j.example:4317/", false).unwrap().tls);
        let err = target("htp://x", false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "endpoint: invalid URL \"htp://x\": scheme htp:// is not http or https"
        );
    }

    #[test]
    fn http_endpoints_need_a_scheme_and_keep_their_path() {
        let target = |e| config(e, false).target(OtlpProtocol::Http);
        assert_eq!(
            target("http://gw:4318/otlp/").unwrap().url,
            "http://gw:4318/otlp"
        );
        assert!(target("gw:4318").is_err());
    }

    #[test]
    fn zstd_is_grpc_only() {
        let mut c = config("http://x:4318", false);
        c.compression = Compression::Zstd;
        assert_eq!(
            c.validate(OtlpProtocol::Http).unwrap_err().field,
            "compression"
        );
        assert!(c.validate(OtlpProtocol::Grpc).is_ok());
    }
}
