//! How every HTTP exporter reads an answer: retryable or not, `Retry-After`, a
//! bounded body.

use std::time::{Duration, UNIX_EPOCH};

use opscope_model::timestamp::now_unix_nanos;
use reqwest::header::{HeaderValue, RETRY_AFTER};

use crate::exporter::ExportError;

/// An answer read: its status, the delay it asked for, and its body (bounded).
pub struct Answer {
    pub status: reqwest::StatusCode,
    pub retry_after: Option<Duration>,
    pub body: Vec<u8>,
}

impl Answer {
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(parse_retry_after);
        let body = read_capped(response).await;
        Self {
            status,
            retry_after,
            body,
        }
    }

    /// `Ok` for a 2xx; otherwise the failure, retryable for 408, 429 and 5xx, to be
    /// sent in parts for 413.
    pub fn into_result(self) -> Result<Vec<u8>, ExportError> {
        if self.status.is_success() {
            return Ok(self.body);
        }
        let text = String::from_utf8_lossy(self.body.get(..512).unwrap_or(&self.body)).into_owned();
        let reason = format!("HTTP {}: {text}", self.status);
        if is_retryable(self.status.as_u16()) {
            Err(ExportError::Retryable {
                reason,
                retry_after: self.retry_after,
            })
        } else if self.status == reqwest::StatusCode::PAYLOAD_TOO_LARGE {
            Err(ExportError::TooLarge { reason })
        } else {
            Err(ExportError::permanent(reason))
        }
    }
}

/// A failure to send at all (connection refused, timed out) may pass later.
pub fn send_failed(error: reqwest::Error) -> ExportError {
    ExportError::retryable(format!("sending: {error}"))
}

/// Most of a response body opscope reads: a short answer or an error message.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// The body of a response, up to [`MAX_RESPONSE_BYTES`]; a body that breaks off is
/// what arrived of it.
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
    let now = UNIX_EPOCH + Duration::from_nanos(now_unix_nanos());
    Some(date.duration_since(now).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

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
    fn a_413_may_pass_in_parts() {
        let answer = Answer {
            status: reqwest::StatusCode::PAYLOAD_TOO_LARGE,
            retry_after: None,
            body: b"body too large".to_vec(),
        };
        assert_eq!(
            answer.into_result(),
            Err(ExportError::TooLarge {
                reason: "HTTP 413 Payload Too Large: body too large".into()
            })
        );
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
