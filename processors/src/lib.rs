//! Processors of the opscope pipeline: batch, resource, memory limiter, the operator
//! tagger and the correlator.

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

pub mod batch;
pub mod correlator;
pub mod cumulative;
pub mod memory_limiter;
pub mod operator_metrics;
#[cfg(test)]
pub(crate) mod otlp_builders;
pub mod processor;
pub mod resource;
pub mod tagger;

pub use correlator::CorrelatorEvents;
pub use processor::{Processor, ProcessorChain};
pub use tagger::Taggable;
