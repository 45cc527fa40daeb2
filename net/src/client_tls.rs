//! Client TLS settings shared by the exporters, named as in the OpenTelemetry
//! Collector (`tls: {insecure, ca_file, cert_file, key_file}`).

use std::path::{Path, PathBuf};

use opscope_model::config::{FieldError, Validate};
use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsClientConfig {
    /// Plain text instead of TLS (for endpoints given without a scheme).
    pub insecure: bool,
    /// Accept any server certificate. Only for tests against self-signed servers.
    pub insecure_skip_verify: bool,
    /// CA bundle (PEM) to verify the server with, instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// PEM material read from the configured files.
pub struct TlsMaterial {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsClientConfig {
    pub fn load(&self) -> Result<TlsMaterial, FieldError> {
        let ca = self
            .ca_file
            .as_deref()
            .map(|p| read("tls.ca_file", p))
            .transpose()?;
        let identity = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                Some((read("tls.cert_file", cert)?, read("tls.key_file", key)?))
            }
            _ => None,
        };
        Ok(TlsMaterial { ca, identity })
    }
}

impl Validate for TlsClientConfig {
    fn validate(&self) -> Result<(), FieldError> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err(FieldError::new(
                "tls.key_file",
                "is required with tls.cert_file",
            )),
            (None, Some(_)) => Err(FieldError::new(
                "tls.cert_file",
                "is required with tls.key_file",
            )),
            _ => Ok(()),
        }
    }
}

/// Reads a PEM file, checking that it holds PEM.
fn read(field: &str, path: &Path) -> Result<Vec<u8>, FieldError> {
    let pem = std::fs::read(path)
        .map_err(|err| FieldError::new(field, format!("cannot read {}: {err}", path.display())))?;
    if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(FieldError::new(
            field,
            format!("{} holds no PEM block", path.display()),
        ));
    }
    Ok(pem)
}

/// Makes rustls use `ring` in this process. The HTTP client needs a process-wide
/// provider; installing one twice is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
