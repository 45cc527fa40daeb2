//! Reading an HTTP receiver's request body: with a limit on its inflated size,
//! within the server's `read_timeout`, and counted against the memory limiter
//! while it arrives.

use axum::body::{Body, Bytes, to_bytes};
use axum::http::StatusCode;
use axum::http::header::RETRY_AFTER;
use axum::response::Response;
use opscope_net::server_tls::ReadTimeout;

use super::body_memory::{BodyMemory, Framing, OverMemoryLimit};

/// A request not taken: its status, the reason counted, the message answered.
pub struct Rejection {
    pub status: StatusCode,
    pub reason: &'static str,
    pub message: String,
}

impl Rejection {
    fn over_memory_limit() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            reason: "memory_limit",
            message: OverMemoryLimit.to_string(),
        }
    }

    /// `response`, the answer to this rejection, told when to retry if it may.
    pub fn answer(&self, mut response: Response) -> Response {
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(RETRY_AFTER, 1.into());
        }
        response
    }
}

/// Reads the body, decompressed on the fly, up to the limit: the limit applies to
/// the inflated size, so a small compressed bomb is cut off early. With `memory`,
/// the body is refused at once when a memory limiter is above its soft limit, and
/// while it arrives its bytes are held in the memory account (released when it is
/// read); a body that would take the process over the soft limit is cut off.
pub async fn read_body(
    body: Body,
    limit: usize,
    memory: Option<&BodyMemory>,
) -> Result<Bytes, Rejection> {
    let read = match memory {
        Some(memory) => {
            let announced = http_body::Body::size_hint(&body).lower();
            if !memory.admits(announced) {
                return Err(Rejection::over_memory_limit());
            }
            let counted = memory.count(body, Framing::Plain, || OverMemoryLimit.into());
            to_bytes(Body::new(counted), limit).await
        }
        None => to_bytes(body, limit).await,
    };
    read.map_err(|err| {
        let cause = |is: fn(&(dyn std::error::Error + 'static)) -> bool| {
            std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source()).any(is)
        };
        if cause(|e| e.is::<http_body_util::LengthLimitError>()) {
            Rejection {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                reason: "too_large",
                message: format!("request body exceeds {limit} bytes (after decompression)"),
            }
        } else if cause(|e| e.is::<OverMemoryLimit>()) {
            Rejection::over_memory_limit()
        } else if cause(|e| e.is::<ReadTimeout>()) {
            Rejection {
                status: StatusCode::REQUEST_TIMEOUT,
                reason: "read_timeout",
                message: format!("{err}"),
            }
        } else {
            Rejection {
                status: StatusCode::BAD_REQUEST,
                reason: "bad_request",
                message: format!("unreadable request body: {err}"),
            }
        }
    })
}
