//! Settings of the `otlp` receiver, named as in the OpenTelemetry Collector.

use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use serde::{Deserialize, Deserializer};

use crate::receivers::common::auth::AuthConfig;
use crate::receivers::common::input_limits::InputLimits;
use crate::receivers::common::server::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_HEADER_TIMEOUT,
    DEFAULT_READ_TIMEOUT, HttpConnections, SecuritySettings, check_max_connections,
};
use opscope_model::config::check_listen_address;
use opscope_net::server_tls::{ConnectionSettings, Keepalive, ServerTlsConfig};

const MIB: usize = 1024 * 1024;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpReceiverConfig {
    pub protocols: Protocols,
    /// What one request may carry; requests over a limit are refused whole.
    #[serde(default)]
    pub limits: InputLimits,
    /// Whether records marked as handed over by a peer gateway keep the mark (see
    /// `internal_markers.rs`): a gateway's receiver only, which clients cannot reach.
    #[serde(default)]
    pub accept_handover: bool,
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
    /// Requests (HTTP/2 streams) one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    pub keepalive: GrpcKeepalive,
    /// How long a request's message may take to arrive after its headers; the
    /// stream is cut off after. 0: no limit.
    #[serde(deserialize_with = "duration")]
    pub read_timeout: Duration,
    pub tls: Option<ServerTlsConfig>,
    pub auth: Option<AuthConfig>,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            endpoint: "127.0.0.1:4317".into(),
            max_recv_msg_size_mib: 4,
            max_concurrent_streams: 100,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            keepalive: GrpcKeepalive::default(),
            read_timeout: DEFAULT_READ_TIMEOUT,
            tls: None,
            auth: None,
        }
    }
}

/// `keepalive:` of the gRPC server, as the Collector's `configgrpc` names it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcKeepalive {
    pub server_parameters: KeepaliveServerParameters,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeepaliveServerParameters {
    /// A connection with no request in service for this long is closed (GOAWAY);
    /// 0: never.
    #[serde(deserialize_with = "duration")]
    pub max_connection_idle: Duration,
    /// A connection the client has sent nothing on for this long is pinged; 0: never.
    #[serde(deserialize_with = "duration")]
    pub time: Duration,
    /// How long the answer to a ping may take before the connection is closed.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
}

impl Default for KeepaliveServerParameters {
    fn default() -> Self {
        // gRPC's own defaults for `time` and `timeout`; idle connections are closed
        // (gRPC keeps them forever) so that silent ones cannot hold the connection slots.
        Self {
            max_connection_idle: Duration::from_secs(300),
            time: Duration::from_secs(2 * 60 * 60),
            timeout: Duration::from_secs(20),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub endpoint: String,
    /// Largest request body accepted in bytes, measured after decompression.
    pub max_request_body_size: usize,
    /// Connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// How long a request's headers may take (and a new connection's first
    /// request); the connection is closed after. 0: no limit.
    #[serde(deserialize_with = "duration")]
    pub read_header_timeout: Duration,
    /// How long a request's body may take after its headers; 408 after. 0: no limit.
    #[serde(deserialize_with = "duration")]
    pub read_timeout: Duration,
    /// A connection with no request for this long is closed. 0: never.
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    pub tls: Option<ServerTlsConfig>,
    pub auth: Option<AuthConfig>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            endpoint: "127.0.0.1:4318".into(),
            max_request_body_size: 20 * MIB,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            read_header_timeout: DEFAULT_READ_HEADER_TIMEOUT,
            read_timeout: DEFAULT_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
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

    /// HTTP/2 only; a new connection has `max_connection_idle` to send its first
    /// request, as gRPC clients connect before they have anything to send.
    pub fn connections(&self) -> ConnectionSettings {
        let parameters = &self.keepalive.server_parameters;
        let limit = |timeout: Duration| (!timeout.is_zero()).then_some(timeout);
        ConnectionSettings {
            max_connections: self.max_connections,
            read_header_timeout: None,
            read_timeout: limit(self.read_timeout),
            // Set by the server from the memory limiter, when there is one.
            max_arriving_bytes: None,
            idle_timeout: limit(parameters.max_connection_idle),
            http2_only: true,
            max_concurrent_streams: Some(self.max_concurrent_streams),
            keepalive: limit(parameters.time).map(|time| Keepalive {
                time,
                timeout: parameters.timeout,
            }),
            takes_data: true,
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

    pub fn connections(&self) -> HttpConnections {
        HttpConnections {
            max_connections: self.max_connections,
            read_header_timeout: self.read_header_timeout,
            read_timeout: self.read_timeout,
            idle_timeout: self.idle_timeout,
            at: "protocols.http.",
        }
    }
}

impl Validate for OtlpReceiverConfig {
    fn validate(&self) -> Result<(), FieldError> {
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
            if grpc.max_concurrent_streams == 0 {
                return Err(FieldError::new(
                    "protocols.grpc.max_concurrent_streams",
                    "must be at least 1",
                ));
            }
            check_max_connections(grpc.max_connections, "protocols.grpc.")?;
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
            http.connections().validate()?;
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
