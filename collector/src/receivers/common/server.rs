//! What every receiver that listens shares: binding its address, the `tls` and
//! `auth` settings of its server and what they build, the connection settings of
//! an HTTP server, and the server that serves it all.

use std::sync::Arc;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate};
use tokio::net::TcpListener;

use super::auth::{AuthConfig, Authenticator};
use crate::receivers::{ReceiverContext, ReceiverError};
use opscope_net::server_tls::{Alpn, ConnectionSettings, HttpServer, ServerTlsConfig};

/// Connections one receiver's server keeps open at once, unless configured.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;
/// `read_header_timeout` unless configured: a client sends its headers at once.
pub const DEFAULT_READ_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// `read_timeout` unless configured: 20 MiB at 350 KB/s.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// `idle_timeout` unless configured, as in the OpenTelemetry Collector.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Binds a receiver's listener at `address` (port 0 takes any free port) and records
/// the bound address under the receiver's setting `at` (`protocols.grpc`, or empty for
/// the receiver's own `endpoint`); a port in use fails the start with the address.
pub async fn bind(
    context: &ReceiverContext,
    at: &str,
    address: &str,
) -> Result<TcpListener, ReceiverError> {
    let receiver = &context.id;
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| ReceiverError::Bind {
            receiver: receiver.clone(),
            address: address.to_string(),
            source,
        })?;
    let local = listener
        .local_addr()
        .map_err(|source| ReceiverError::Bind {
            receiver: receiver.clone(),
            address: address.to_string(),
            source,
        })?;
    let setting = match at {
        "" => format!("receivers.{receiver}"),
        at => format!("receivers.{receiver}.{at}"),
    };
    context.listening.record(setting, local);
    Ok(listener)
}

/// The `tls` and `auth` settings of one server, as written.
#[derive(Debug, Clone, Copy)]
pub struct SecuritySettings<'a> {
    pub tls: Option<&'a ServerTlsConfig>,
    pub auth: Option<&'a AuthConfig>,
    /// Where the server's settings sit inside the receiver's (`protocols.grpc.`),
    /// for error paths; empty when they are the receiver's own.
    pub at: &'static str,
}

/// What the settings build: the TLS config (certificate reloaded on change) and
/// the credentials check, each absent when not configured.
pub struct ServerSecurity {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub authenticator: Option<Arc<Authenticator>>,
}

impl SecuritySettings<'_> {
    /// Builds the server's TLS config and authenticator; a file that no longer
    /// reads as it did at validation fails the start with its setting's path.
    pub fn build(
        &self,
        alpn: Alpn,
        transport: &str,
        context: &ReceiverContext,
    ) -> Result<ServerSecurity, ReceiverError> {
        let failed = |source: FieldError| ReceiverError::Security {
            receiver: context.id.clone(),
            at: self.at,
            source,
        };
        let tls = self
            .tls
            .map(|tls| {
                let metrics = context
                    .telemetry
                    .certificate_reloads(&context.id, transport);
                tls.server_config(alpn, &context.id, metrics)
                    .map_err(|error| failed(error.into()))
            })
            .transpose()?;
        let authenticator = self
            .auth
            .map(|auth| {
                Authenticator::new(auth, &context.id)
                    .map(Arc::new)
                    .map_err(failed)
            })
            .transpose()?;
        Ok(ServerSecurity { tls, authenticator })
    }
}

impl Validate for SecuritySettings<'_> {
    fn validate(&self) -> Result<(), FieldError> {
        let in_server_settings = |error: FieldError| {
            FieldError::new(format!("{}{}", self.at, error.field), error.message)
        };
        if let Some(tls) = self.tls {
            tls.validate().map_err(in_server_settings)?;
        }
        if let Some(auth) = self.auth {
            auth.validate().map_err(in_server_settings)?;
        }
        Ok(())
    }
}

/// The connection settings of an HTTP receiver's server, as written (the
/// OpenTelemetry Collector's `confighttp` names, and `max_connections`); a
/// timeout of 0 is none.
#[derive(Debug, Clone, Copy)]
pub struct HttpConnections {
    pub max_connections: usize,
    pub read_header_timeout: Duration,
    pub read_timeout: Duration,
    pub idle_timeout: Duration,
    /// Where the settings sit inside the receiver's, for error paths.
    pub at: &'static str,
}

impl HttpConnections {
    pub fn settings(&self) -> ConnectionSettings {
        let limit = |timeout: Duration| (!timeout.is_zero()).then_some(timeout);
        ConnectionSettings {
            max_connections: self.max_connections,
            read_header_timeout: limit(self.read_header_timeout),
            read_timeout: limit(self.read_timeout),
            max_arriving_bytes: None,
            idle_timeout: limit(self.idle_timeout),
            http2_only: false,
            // hyper's default: HTTP/2 clients of an HTTP receiver are rare.
            max_concurrent_streams: Some(200),
            keepalive: None,
            takes_data: true,
        }
    }
}

impl Validate for HttpConnections {
    fn validate(&self) -> Result<(), FieldError> {
        check_max_connections(self.max_connections, self.at)
    }
}

pub fn check_max_connections(max_connections: usize, at: &str) -> Result<(), FieldError> {
    if max_connections == 0 {
        return Err(FieldError::new(
            format!("{at}max_connections"),
            "must be at least 1",
        ));
    }
    Ok(())
}

/// The server of one receiver's endpoint, its connections counted under the
/// receiver's id and `transport`.
pub fn server(
    context: &ReceiverContext,
    transport: &str,
    tls: Option<Arc<rustls::ServerConfig>>,
    settings: ConnectionSettings,
) -> HttpServer {
    HttpServer {
        name: context.id.clone(),
        tls,
        settings,
        metrics: context.telemetry.server_connections(&context.id, transport),
    }
}
