//! Processors of the opscope pipeline and the telemetry model they work on.

pub mod batch;
pub mod config;
pub mod processor;
pub mod resource;
pub mod telemetry;

pub use processor::{Processor, ProcessorChain};
pub use telemetry::{Telemetry, TelemetryKind};
