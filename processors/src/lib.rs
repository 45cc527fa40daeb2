//! Processors of the opscope pipeline and the telemetry model they work on.

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

pub mod attributes;
pub mod batch;
pub mod config;
pub mod correlator;
pub mod decoded_size;
pub mod kinds;
pub mod memory_limiter;
pub mod name;
#[cfg(test)]
pub(crate) mod otlp_builders;
pub mod processor;
pub mod resource;
pub mod semconv;
pub mod tagger;
pub mod telemetry;
pub mod timestamp;

pub use processor::{Processor, ProcessorChain};
pub use telemetry::{Telemetry, TelemetryKind};
