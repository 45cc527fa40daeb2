//! The HTTP client every exporter and scraper builds from its settings: the
//! configured TLS, default headers and timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use opscope_model::config::FieldError;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::client_tls::{TlsClientConfig, install_crypto_provider};

/// Builds a client; errors name the setting at fault (`headers.x`, `tls.ca_file`).
pub fn build_client(
    tls: &TlsClientConfig,
    headers: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<reqwest::Client, FieldError> {
    let mut default_headers = HeaderMap::new();
    for (name, value) in headers {
        let field = || FieldError::new(format!("headers.{name}"), "is not a valid HTTP header");
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| field())?;
        default_headers.insert(name, HeaderValue::from_str(value).map_err(|_| field())?);
    }
    install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .default_headers(default_headers)
        .timeout(timeout)
        .connect_timeout(timeout)
        .danger_accept_invalid_certs(tls.insecure_skip_verify);
    let material = tls.load()?;
    if let Some(ca) = material.ca {
        let certs = reqwest::Certificate::from_pem_bundle(&ca)
            .map_err(|e| FieldError::new("tls.ca_file", format!("invalid PEM: {e}")))?;
        builder = builder.tls_certs_only(certs);
    }
    if let Some((cert, key)) = material.identity {
        let pem = [cert, key].concat();
        let identity = reqwest::Identity::from_pem(&pem)
            .map_err(|e| FieldError::new("tls.cert_file", format!("invalid PEM: {e}")))?;
        builder = builder.identity(identity);
    }
    builder
        .build()
        .map_err(|e| FieldError::new("tls", format!("cannot build the HTTP client: {e}")))
}
