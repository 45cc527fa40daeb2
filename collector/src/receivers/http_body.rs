//! What the HTTP receivers share: binding a listener, and reading a request body
//! with a limit on its inflated size.

use axum::body::{Body, Bytes, to_bytes};
use axum::http::StatusCode;
use tokio::net::TcpListener;

use super::ReceiverError;

/// A request not taken: its status, the reason counted, the message answered.
pub struct Rejection {
    pub status: StatusCode,
    pub reason: &'static str,
    pub message: String,
}

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
