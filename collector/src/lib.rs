//! opscope, the agent: configuration, receivers, pipelines, extensions and the
//! service that runs them.

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

pub mod allocator;
pub mod analyze;
pub mod config;
pub mod connectors;
pub mod consumer;
pub mod demo;
pub mod exporters;
pub mod extensions;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod handover;
pub mod listening;
pub mod pipeline;
pub mod receivers;
pub mod self_telemetry;
pub mod sending;
pub mod service;
pub mod signals;
