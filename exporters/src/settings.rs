//! Checks of the settings every network exporter shares — TLS, headers, timeout,
//! sending queue, retry — with errors named as the user wrote them.

use std::collections::BTreeMap;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate};

use crate::queue::{QueueConfig, RetryConfig};
use opscope_net::client_tls::TlsClientConfig;

/// The shared settings of one exporter.
pub struct SharedSettings<'a> {
    pub tls: &'a TlsClientConfig,
    /// Whether the endpoint uses TLS (then the TLS files must be readable).
    pub https: bool,
    pub headers: &'a BTreeMap<String, String>,
    pub timeout: Duration,
    pub sending_queue: &'a QueueConfig,
    pub retry_on_failure: &'a RetryConfig,
}

impl Validate for SharedSettings<'_> {
    fn validate(&self) -> Result<(), FieldError> {
        self.tls.validate()?;
        if self.https {
            self.tls.load()?;
        }
        if self.timeout.is_zero() {
            return Err(FieldError::new("timeout", "must be greater than zero"));
        }
        validate_headers(self.headers)?;
        self.sending_queue
            .validate()
            .map_err(|e| e.within("sending_queue"))?;
        self.retry_on_failure
            .validate()
            .map_err(|e| e.within("retry_on_failure"))
    }
}

/// Header names and values as HTTP (and gRPC metadata) accept them.
pub fn validate_headers(headers: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for (name, value) in headers {
        let field = format!("headers.{name}");
        http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map_err(|_| FieldError::new(&field, "is not a valid header name"))?;
        http::HeaderValue::from_str(value)
            .map_err(|_| FieldError::new(&field, "value is not a valid header value"))?;
    }
    Ok(())
}
