//! Settings of the `loadbalancing` exporter, in the shape of the OpenTelemetry
//! Collector's: a routing key, the protocol to each gateway, and the resolver that
//! says which gateways there are.

use std::time::Duration;

use opscope_model::config::{FieldError, MAX_DURATION, Validate, duration, duration_in, positive};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::otlp::{OtlpExporterConfig, OtlpProtocol};
use crate::queue::{QueueConfig, RetryConfig};

/// The one routing key: each record to the gateway owning its object, records that
/// name none by their pod.
pub const ROUTING_BY_OBJECT: &str = "k8s.object";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancingConfig {
    #[serde(default = "default_routing_key")]
    pub routing_key: String,
    pub protocol: ProtocolConfig,
    pub resolver: ResolverConfig,
    /// The queue of whole batches in front of the routing.
    #[serde(default)]
    pub sending_queue: QueueConfig,
    /// Retries of a batch no gateway took, and of the parts a gateway refused while
    /// the others took theirs.
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
}

fn default_routing_key() -> String {
    ROUTING_BY_OBJECT.to_string()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolConfig {
    /// The `otlp` exporter's settings to each gateway, without `endpoint` (the
    /// resolver gives it) and without a queue of their own.
    pub otlp: Map<String, Value>,
}

/// One of `static` and `dns`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolverConfig {
    #[serde(rename = "static")]
    pub fixed: Option<StaticResolver>,
    pub dns: Option<DnsResolverConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsResolverConfig {
    /// A name whose A/AAAA records are the gateways: a headless Service's.
    pub hostname: String,
    #[serde(default = "default_port")]
    pub port: u16,
    /// How often the name is resolved again.
    #[serde(default = "default_interval", deserialize_with = "duration")]
    pub interval: Duration,
    /// How long one resolution may take; a failed one keeps the last gateways.
    #[serde(default = "default_resolve_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
}

/// The shortest `resolver.dns.interval`. Each resolution is a query to the cluster's
/// DNS from every agent; more often than every 100 ms a node's agents flood it and
/// learn nothing new (1 ns was a busy loop).
const MIN_RESOLVE_INTERVAL: Duration = Duration::from_millis(100);

fn default_port() -> u16 {
    4317
}

fn default_interval() -> Duration {
    Duration::from_secs(5)
}

fn default_resolve_timeout() -> Duration {
    Duration::from_secs(1)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticResolver {
    /// `host:port` of each gateway's OTLP/gRPC receiver.
    pub hostnames: Vec<String>,
}

impl LoadBalancingConfig {
    /// The gateways the static resolver names (none for the DNS resolver).
    pub fn endpoints(&self) -> &[String] {
        self.resolver
            .fixed
            .as_ref()
            .map_or(&[], |fixed| fixed.hostnames.as_slice())
    }

    /// The `otlp` exporter settings to the gateway at `endpoint`.
    pub fn destination(&self, endpoint: &str) -> Result<OtlpExporterConfig, FieldError> {
        let mut settings = self.protocol.otlp.clone();
        settings.insert("endpoint".into(), Value::String(endpoint.to_string()));
        let config: OtlpExporterConfig = serde_path_to_error::deserialize(Value::Object(settings))
            .map_err(|error| {
                let field = match error.path().to_string().as_str() {
                    "." => "protocol.otlp".to_string(),
                    path => format!("protocol.otlp.{path}"),
                };
                FieldError::new(field, error.into_inner().to_string())
            })?;
        config
            .validate(OtlpProtocol::Grpc)
            .map_err(|error| error.within("protocol.otlp"))?;
        Ok(config)
    }
}

impl Validate for LoadBalancingConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.routing_key != ROUTING_BY_OBJECT {
            return Err(FieldError::new(
                "routing_key",
                format!(
                    "\"{}\" is not a routing key (known: {ROUTING_BY_OBJECT})",
                    self.routing_key
                ),
            ));
        }
        for key in ["endpoint", "sending_queue", "retry_on_failure"] {
            if self.protocol.otlp.contains_key(key) {
                return Err(FieldError::new(
                    format!("protocol.otlp.{key}"),
                    "is set by the loadbalancing exporter itself (endpoint: the resolver; \
                     queue and retries: its own sending_queue and retry_on_failure)",
                ));
            }
        }
        let fixed = match (&self.resolver.fixed, &self.resolver.dns) {
            (Some(fixed), None) => fixed,
            (None, Some(dns)) => return self.validate_dns(dns),
            _ => {
                return Err(FieldError::new(
                    "resolver",
                    "name the gateways with one of static: { hostnames: [...] } and \
                     dns: { hostname: ..., port: ... }",
                ));
            }
        };
        if fixed.hostnames.is_empty() {
            return Err(FieldError::new(
                "resolver.static.hostnames",
                "at least one is required",
            ));
        }
        for (index, endpoint) in fixed.hostnames.iter().enumerate() {
            self.destination(endpoint).map_err(|error| {
                if error.field.starts_with("protocol") {
                    error
                } else {
                    error.within(&format!("resolver.static.hostnames[{index}]"))
                }
            })?;
        }
        self.validate_queue()
    }
}

impl LoadBalancingConfig {
    fn validate_dns(&self, dns: &DnsResolverConfig) -> Result<(), FieldError> {
        if dns.hostname.is_empty() {
            return Err(FieldError::new("resolver.dns.hostname", "is required"));
        }
        duration_in(
            "resolver.dns.interval",
            dns.interval,
            MIN_RESOLVE_INTERVAL..=MAX_DURATION,
        )?;
        positive("resolver.dns.timeout", dns.timeout)?;
        self.destination(&format!("{}:{}", dns.hostname, dns.port))?;
        self.validate_queue()
    }

    fn validate_queue(&self) -> Result<(), FieldError> {
        self.sending_queue
            .validate()
            .map_err(|error| error.within("sending_queue"))?;
        self.retry_on_failure
            .validate()
            .map_err(|error| error.within("retry_on_failure"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: Value) -> Result<LoadBalancingConfig, String> {
        serde_json::from_value(json).map_err(|error| error.to_string())
    }

    #[test]
    fn the_collector_shape_is_read_and_checked() {
        let good = serde_json::json!({
            "protocol": { "otlp": { "tls": { "insecure": true }, "timeout": "5s", "compression": "gzip" } },
            "resolver": { "static": { "hostnames": ["10.0.0.5:4317", "10.0.0.6:4317"] } },
        });
        let loaded = config(good.clone()).expect("reads");
        assert!(loaded.validate().is_ok());
        assert_eq!(loaded.routing_key, "k8s.object");
        let destination = loaded.destination("10.0.0.6:4317").expect("a destination");
        assert_eq!(destination.endpoint, "10.0.0.6:4317");

        let mut keyed = good.clone();
        keyed["routing_key"] = "traceID".into();
        assert_eq!(
            config(keyed).expect("reads").validate().unwrap_err().field,
            "routing_key"
        );
        let mut queued = good.clone();
        queued["protocol"]["otlp"]["sending_queue"] = serde_json::json!({});
        assert_eq!(
            config(queued).expect("reads").validate().unwrap_err().field,
            "protocol.otlp.sending_queue"
        );
        let mut bad_option = good.clone();
        bad_option["protocol"]["otlp"]["compresion"] = "gzip".into();
        assert_eq!(
            config(bad_option)
                .expect("reads")
                .validate()
                .unwrap_err()
                .field,
            "protocol.otlp.compresion"
        );
        let mut overflowing = good.clone();
        overflowing["protocol"]["otlp"]["timeout"] = "300000000000years".into();
        let error = config(overflowing).expect("reads").validate().unwrap_err();
        assert_eq!(error.field, "protocol.otlp.timeout");
        assert!(
            error.message.contains("longer than any setting takes"),
            "{error}"
        );
        let mut dns = good.clone();
        dns["resolver"] =
            serde_json::json!({ "dns": { "hostname": "opscope-gateway", "interval": "10s" } });
        let dns = config(dns).expect("reads");
        assert!(dns.validate().is_ok());
        let mut hammering = dns.clone();
        if let Some(resolver) = hammering.resolver.dns.as_mut() {
            resolver.interval = Duration::from_nanos(1);
        }
        assert_eq!(
            hammering.validate().unwrap_err().to_string(),
            "resolver.dns.interval: must be between 100ms and 1year, not 1ns"
        );
        assert_eq!(dns.resolver.dns.as_ref().map(|d| d.port), Some(4317));
        let mut both = good.clone();
        both["resolver"]["dns"] = serde_json::json!({ "hostname": "opscope-gateway" });
        assert_eq!(
            config(both).expect("reads").validate().unwrap_err().field,
            "resolver"
        );
        let mut none = good;
        none["resolver"] = serde_json::json!({});
        assert_eq!(
            config(none).expect("reads").validate().unwrap_err().field,
            "resolver"
        );
    }
}
