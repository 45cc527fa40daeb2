//! OTLP over HTTP with protobuf bodies: `POST <endpoint>/v1/<signal>`.

use std::io::Write;
use std::time::{Duration, SystemTime};

use flate2::Compression as GzipLevel;
use flate2::write::GzEncoder;
use opscope_processors::Telemetry;
use opscope_processors::config::FieldError;
use opscope_proto::prost::Message;
use reqwest::header::{
    CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER,
};

use super::config::{Compression, OtlpExporterConfig, OtlpProtocol};
use super::signals::{signal_logs, signal_spans};
use crate::batch::SignalBatch;
use crate::exporter::{Delivery, ExportError, Exporter};
use crate::tls::install_crypto_provider;

const PROTOBUF: &str = "application/x-protobuf";

pub struct HttpExporter {
    client: reqwest::Client,
    base_url: String,
    gzip: bool,
}

impl HttpExporter {
    pub fn new(config: &OtlpExporterConfig) -> Result<Self, FieldError> {
        let target = config.target(OtlpProtocol::Http)?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let field = || FieldError::new(format!("headers.{name}"), "is not a valid HTTP header");
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| field())?;
            headers.insert(name, HeaderValue::from_str(value).map_err(|_| field())?);
        }
        install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .danger_accept_invalid_certs(config.tls.insecure_skip_verify);
        let material = config.tls.load()?;
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
        let client = builder
            .build()
            .map_err(|e| FieldError::new("tls", format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            client,
            base_url: target.url,
            gzip: config.compression == Compression::Gzip,
        })
    }

    fn body<T: Telemetry>(&self, batch: &T) -> Result<Vec<u8>, ExportError> {
        let encoded = batch.encode_to_vec();
        if !self.gzip {
            return Ok(encoded);
        }
        let mut encoder = GzEncoder::new(Vec::with_capacity(encoded.len() / 4), GzipLevel::fast());
        encoder
            .write_all(&encoded)
            .and_then(|()| encoder.finish())
            .map_err(|e| ExportError::permanent(format!("gzip: {e}")))
    }
}

/// Signals go out as signal spans, then as log records.
impl Exporter<SignalBatch> for HttpExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        self.export(&signal_spans(batch)).await?;
        self.export(&signal_logs(batch)).await
    }
}

impl<T: Telemetry> Exporter<T> for HttpExporter {
    async fn export(&self, batch: &T) -> Result<Delivery, ExportError> {
        let mut request = self
            .client
            .post(format!("{}{}", self.base_url, T::HTTP_PATH))
            .header(CONTENT_TYPE, PROTOBUF)
            .body(self.body(batch)?);
        if self.gzip {
            request = request.header(CONTENT_ENCODING, "gzip");
        }
        let response = request
            .send()
            .await
            .map_err(|e| ExportError::retryable(format!("sending: {e}")))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(parse_retry_after);
        let body = read_capped(response).await;
        if status.is_success() {
            // A success whose body says nothing readable is a full success.
            let decoded = T::Response::decode(body.as_slice()).unwrap_or_default();
            let (rejected_items, message) = T::rejected_items(&decoded);
            return Ok(Delivery {
                rejected_items,
                message,
            });
        }
        let reason = format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(512)])
        );
        if is_retryable(status.as_u16()) {
            Err(ExportError::Retryable {
                reason,
                retry_after,
            })
        } else {
            Err(ExportError::permanent(reason))
        }
    }
}

/// Most of a response body opscope reads: an OTLP response or an error message.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// The body of a response, up to [`MAX_RESPONSE_BYTES`]; a body that breaks off
/// is what arrived of it.
async fn read_capped(mut response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = MAX_RESPONSE_BYTES.saturating_sub(body.len());
        body.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
        if body.len() >= MAX_RESPONSE_BYTES {
            break;
        }
    }
    body
}

/// 408, 429 and 5xx may pass later; other answers will not change.
fn is_retryable(code: u16) -> bool {
    matches!(code, 408 | 429) || (500..600).contains(&code)
}

/// `Retry-After` as delay-seconds or as an HTTP date.
fn parse_retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(text).ok()?;
    Some(date.duration_since(SystemTime::now()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_in_seconds_and_as_date() {
        let header = |s: &str| HeaderValue::from_str(s).expect("valid header");
        assert_eq!(
            parse_retry_after(&header("7")),
            Some(Duration::from_secs(7))
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(60));
        let delay = parse_retry_after(&header(&later)).expect("date parses");
        assert!(delay > Duration::from_secs(50) && delay <= Duration::from_secs(60));
        assert_eq!(parse_retry_after(&header("soon")), None);
    }

    #[test]
    fn retryable_status_codes() {
        for code in [408, 429, 500, 502, 503, 504] {
            assert!(is_retryable(code), "{code}");
        }
        for code in [400, 401, 403, 404, 413, 415] {
            assert!(!is_retryable(code), "{code}");
        }
    }
}
