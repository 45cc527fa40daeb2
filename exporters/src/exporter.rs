//! The exporter contract: send one batch somewhere and say whether trying again
//! could help.

use std::future::Future;
use std::time::Duration;

use crate::batch::Batch;

/// What a destination answered to a batch it took.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Items the destination accepted the request for but refused to keep
    /// (OTLP partial success).
    pub rejected_items: u64,
    /// Why, as the `reason` of the failed-items count; `rejected` when not given.
    pub rejected_reason: Option<&'static str>,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// The destination may take the batch later (unavailable, throttled, timed out).
    #[error("{reason}")]
    Retryable {
        reason: String,
        /// How long the destination asked us to wait, when it said.
        retry_after: Option<Duration>,
    },
    /// Sending the same batch again cannot succeed (malformed, unauthorised, ...).
    #[error("{reason}")]
    Permanent { reason: String },
    /// The destination refused the request for its size (gRPC `RESOURCE_EXHAUSTED`
    /// without a retry delay, HTTP 413): the batch may pass in smaller parts.
    #[error("{reason}")]
    TooLarge { reason: String },
}

impl ExportError {
    pub fn retryable(reason: impl Into<String>) -> Self {
        Self::Retryable {
            reason: reason.into(),
            retry_after: None,
        }
    }

    pub fn permanent(reason: impl Into<String>) -> Self {
        Self::Permanent {
            reason: reason.into(),
        }
    }
}

/// Sends batches of one kind (an OTLP signal type, or signal changes) to one destination. The sending queue calls it
/// from several consumers at once and retries what it reports as retryable.
pub trait Exporter<T: Batch>: Send + Sync + 'static {
    fn export(&self, batch: &T) -> impl Future<Output = Result<Delivery, ExportError>> + Send;

    /// The largest request the destination takes, in [`Batch::request_size`] bytes:
    /// the queue cuts larger batches before they are sent. `None`: no limit known.
    fn max_request_size(&self) -> Option<usize> {
        None
    }
}

impl<T: Batch, E: Exporter<T>> Exporter<T> for std::sync::Arc<E> {
    fn export(&self, batch: &T) -> impl Future<Output = Result<Delivery, ExportError>> + Send {
        E::export(self, batch)
    }

    fn max_request_size(&self) -> Option<usize> {
        E::max_request_size(self)
    }
}
