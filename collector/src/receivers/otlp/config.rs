//! Settings of the `otlp` receiver, named as in the OpenTelemetry Collector.

use opscope_processors::config::FieldError;
use serde::{Deserialize, Deserializer};

use crate::config::check_listen_address;
use crate::receivers::auth::AuthConfig;
use crate::receivers::input_limits::InputLimits;
use crate::receivers::server::SecuritySettings;
use opscope_exporters::server_tls::ServerTlsConfig;

const MIB: usize = 1024 * 1024;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpReceiverConfig {
    pub protocols: Protocols,
    /// What one request may carry; requests over a limit are refused whole.
    #[serde(default)]
    pub limits: InputLimits,
}

/// A protocol written with no settings (`grpc:`) is on with its defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocols {
    #[serde(default, deserialize_with = "enabled_with_defaults")]
    pub grpc: Option<GrpcConfig>,
    #[serde(default, deserialize_with = "enabled_with_defaults")]
    pub http: Option<HttpConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcConfig {
    pub endpoint: String,
    /// Largest request accepted, in MiB; larger ones get RESOURCE_EXHAUSTED.
    pub max_recv_msg_size_mib: usize,
    pub tls: Option<ServerTlsConfig>,
    pub auth: Option<AuthConfig>,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            endpoint: "127.0.0.1:4317".into(),
            max_recv_msg_size_mib: 4,
            tls: None,
            auth: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub endpoint: String,
    /// Largest request body accepted in bytes, measured after decompression.
    pub max_request_body_size: usize,
    pub tls: Option<ServerTlsConfig>,
    pub auth: Option<AuthConfig>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            endpoint: "127.0.0.1:4318".into(),
            max_request_body_size: 20 * MIB,
            tls: None,
            auth: None,
        }
    }
}

impl GrpcConfig {
    pub fn max_message_bytes(&self) -> usize {
        self.max_recv_msg_size_mib.saturating_mul(MIB)
    }

    pub fn security(&self) -> SecuritySettings<'_> {
        SecuritySettings {
            tls: self.tls.as_ref(),
            auth: self.auth.as_ref(),
            at: "protocols.grpc.",
        }
    }
}

impl HttpConfig {
    pub fn security(&self) -> SecuritySettings<'_> {
        SecuritySettings {
            tls: self.tls.as_ref(),
            auth: self.auth.as_ref(),
            at: "protocols.http.",
        }
    }
}

impl OtlpReceiverConfig {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.protocols.grpc.is_none() && self.protocols.http.is_none() {
            return Err(FieldError::new("protocols", "enable grpc, http or both"));
        }
        self.limits.validate()?;
        if let Some(grpc) = &self.protocols.grpc {
            check_listen_address(&grpc.endpoint)
                .map_err(|m| FieldError::new("protocols.grpc.endpoint", m))?;
            if grpc.max_recv_msg_size_mib == 0 {
                return Err(FieldError::new(
                    "protocols.grpc.max_recv_msg_size_mib",
                    "must be at least 1",
                ));
            }
            grpc.security().validate()?;
        }
        if let Some(http) = &self.protocols.http {
            check_listen_address(&http.endpoint)
                .map_err(|m| FieldError::new("protocols.http.endpoint", m))?;
            if http.max_request_body_size == 0 {
                return Err(FieldError::new(
                    "protocols.http.max_request_body_size",
                    "must be at least 1",
                ));
            }
            http.security().validate()?;
        }
        Ok(())
    }
}

fn enabled_with_defaults<'de, D, C>(deserializer: D) -> Result<Option<C>, D::Error>
where
    D: Deserializer<'de>,
    C: Deserialize<'de> + Default,
{
    Ok(Some(
        Option::<C>::deserialize(deserializer)?.unwrap_or_default(),
    ))
}
