//! Reading an HTTP receiver's request body with a limit on its inflated size.

use axum::body::{Body, Bytes, to_bytes};
use axum::http::StatusCode;

/// A request not taken: its status, the reason counted, the message answered.
pub struct Rejection {
    pub status: StatusCode,
    pub reason: &'static str,
    pub message: String,
}

/// Reads the body, decompressed on the fly, up to the limit: the limit applies to
/// the inflated size, so a small compressed bomb is cut off early.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, Rejection> {
    to_bytes(body, limit).await.map_err(|err| {
        let too_large = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
            .any(|e| e.is::<http_body_util::LengthLimitError>());
        if too_large {
            Rejection {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                reason: "too_large",
                message: format!("request body exceeds {limit} bytes (after decompression)"),
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
