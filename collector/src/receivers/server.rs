//! What every receiver that listens shares: binding its address, the `tls` and
//! `auth` settings of its server and what they build, and serving an HTTP router
//! in plain text or over TLS.

use std::sync::Arc;

use axum::Router;
use opscope_processors::config::FieldError;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::auth::{AuthConfig, Authenticator};
use super::{ReceiverContext, ReceiverError};
use opscope_exporters::server_tls::{self, Alpn, ServerTlsConfig};

/// Binds a receiver's listener; a port in use fails the start with the address.
pub async fn bind(receiver: &str, address: &str) -> Result<TcpListener, ReceiverError> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| ReceiverError::Bind {
            receiver: receiver.to_string(),
            address: address.to_string(),
            source,
        })?;
    if let Ok(local) = listener.local_addr() {
        tracing::info!(receiver = receiver, address = %local, "listening");
    }
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
    pub fn validate(&self) -> Result<(), FieldError> {
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

/// Serves `router` on `listener`, over TLS when `tls` is set, until `shutdown`
/// fires and in-flight requests are answered.
pub async fn serve_http(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    shutdown: CancellationToken,
    receiver: String,
) {
    let stopped = shutdown.cancelled_owned();
    if let Err(err) = server_tls::serve_http(listener, tls, router, stopped, &receiver).await {
        tracing::error!(receiver = %receiver, %err, "HTTP server failed");
    }
}
