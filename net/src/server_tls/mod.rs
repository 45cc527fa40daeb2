//! Every server opscope runs (receivers, exposition endpoints): the `tls` settings
//! and the rustls server config built from them (optionally verifying client
//! certificates), and the one HTTP server that serves them all within their
//! connection limits and timeouts.

mod activity;
mod certificate;
mod connections;
mod descriptors;
mod listener;
mod serve;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;

pub use activity::{ConnectionShare, ReadTimeout};
pub use certificate::ReloadMetrics;
pub use connections::{ConnectionMetrics, ConnectionSettings, Keepalive};
pub use serve::HttpServer;

use certificate::{ReloadingCertificate, load_certified_key, read_certificates};

/// `tls:` of a receiver's server settings, named as in the OpenTelemetry Collector.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsConfig {
    /// The server's certificate chain (PEM), leaf first.
    pub cert_file: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// CAs (PEM) whose client certificates are required: mutual TLS. Read at start.
    pub client_ca_file: Option<PathBuf>,
    /// How often the certificate and key files are checked for a change (on the
    /// next handshake after this much time); 0 checks on every handshake.
    #[serde(default = "default_reload_interval", deserialize_with = "duration")]
    pub reload_interval: Duration,
}

fn default_reload_interval() -> Duration {
    Duration::from_secs(60)
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        field: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: invalid PEM: {source}", path.display())]
    Pem {
        field: &'static str,
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{} holds no certificate", path.display())]
    NoCertificate { field: &'static str, path: PathBuf },
    #[error("{}: unusable certificate: {source}", path.display())]
    Certificate {
        field: &'static str,
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("{}: unusable private key: {source}", path.display())]
    Key {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("the key in {} does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    #[error("{}: cannot verify clients with these CAs: {source}", path.display())]
    ClientCa {
        path: PathBuf,
        source: rustls::server::VerifierBuilderError,
    },
    #[error("is required")]
    Missing { field: &'static str },
    #[error("cannot set up TLS: {0}")]
    Setup(rustls::Error),
}

impl TlsError {
    /// The setting at fault, relative to the server's settings (`tls.cert_file`).
    pub fn field(&self) -> &'static str {
        match self {
            Self::Read { field, .. }
            | Self::Pem { field, .. }
            | Self::NoCertificate { field, .. }
            | Self::Certificate { field, .. }
            | Self::Missing { field } => field,
            Self::Key { .. } | Self::KeyMismatch { .. } => "tls.key_file",
            Self::ClientCa { .. } => "tls.client_ca_file",
            Self::Setup(_) => "tls",
        }
    }
}

impl From<TlsError> for FieldError {
    fn from(error: TlsError) -> Self {
        FieldError::new(error.field(), error.to_string())
    }
}

/// The protocols a server offers in ALPN.
#[derive(Debug, Clone, Copy)]
pub enum Alpn {
    /// gRPC runs on HTTP/2 only.
    Http2,
    Http2AndHttp1,
}

impl ServerTlsConfig {
    fn files(&self) -> Result<(&PathBuf, &PathBuf), TlsError> {
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Ok((cert, key)),
            (Some(_), None) => Err(TlsError::Missing {
                field: "tls.key_file",
            }),
            (None, _) => Err(TlsError::Missing {
                field: "tls.cert_file",
            }),
        }
    }

    /// The rustls config of one server: its certificate reloaded on change, and
    /// client certificates required when `client_ca_file` is set.
    pub fn server_config(
        &self,
        alpn: Alpn,
        receiver: &str,
        metrics: ReloadMetrics,
    ) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let (cert, key) = self.files()?;
        let provider = crypto_provider();
        let resolver = ReloadingCertificate::load(
            cert,
            key,
            self.reload_interval,
            Arc::clone(&provider),
            receiver,
            metrics,
        )?;
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Setup)?;
        let builder = match &self.client_ca_file {
            Some(client_ca) => {
                builder.with_client_cert_verifier(client_verifier(client_ca, &provider)?)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = match alpn {
            Alpn::Http2 => vec![b"h2".to_vec()],
            Alpn::Http2AndHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        };
        Ok(Arc::new(config))
    }
}

impl Validate for ServerTlsConfig {
    /// Checks the settings and that every file reads as what it should hold.
    fn validate(&self) -> Result<(), FieldError> {
        let (cert, key) = self.files()?;
        let provider = crypto_provider();
        load_certified_key(cert, key, &provider)?;
        if let Some(client_ca) = &self.client_ca_file {
            client_verifier(client_ca, &provider)?;
        }
        Ok(())
    }
}

/// Every server uses `ring`, as the exporters' clients do.
fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_verifier(
    client_ca: &std::path::Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates("tls.client_ca_file", client_ca)? {
        roots
            .add(certificate)
            .map_err(|source| TlsError::Certificate {
                field: "tls.client_ca_file",
                path: client_ca.to_path_buf(),
                source,
            })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|source| TlsError::ClientCa {
            path: client_ca.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests;
