//! opscope, the agent: configuration, receivers, pipelines, extensions and the
//! service that runs them.

pub mod analyze;
pub mod config;
pub mod demo;
pub mod exporters;
pub mod extensions;
pub mod pipeline;
pub mod receivers;
pub mod self_telemetry;
pub mod service;
pub mod signals;
