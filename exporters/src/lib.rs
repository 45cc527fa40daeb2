//! Exporters of opscope and the sending queue every exporter sits behind.

// Input must never crash the agent: no panicking shortcuts outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

pub mod alertmanager;
pub mod batch;
pub mod debug;
pub mod exporter;
pub mod file_watch;
pub mod http_client;
pub mod loki;
pub mod otlp;
pub mod prometheus;
pub mod queue;
pub mod server_tls;
pub mod settings;
pub mod split;
pub mod tls;

pub use batch::{Batch, Encoded, SignalBatch};
pub use exporter::{Delivery, ExportError, Exporter};
pub use queue::{
    LogError, QueueConfig, QueueMetrics, QueueSender, QueueStore, RetryConfig, SendingQueue,
};
