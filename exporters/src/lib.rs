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
pub mod http_answer;
pub mod loadbalancing;
pub mod loki;
pub mod otlp;
pub mod prometheus;
pub mod queue;
pub mod settings;
pub mod split;

pub use batch::{Batch, Encoded, SignalBatch};
pub use exporter::{Delivery, ExportError, Exporter};
pub use queue::{
    LogError, QueueConfig, QueueMetrics, QueueSender, QueueStore, RetryConfig, SendingQueue,
};
