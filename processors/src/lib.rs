//! Processors of the opscope pipeline and the telemetry model they work on.

pub mod attributes;
pub mod batch;
pub mod config;
pub mod correlator;
pub mod kinds;
pub mod memory_limiter;
pub mod processor;
pub mod resource;
pub mod semconv;
pub mod tagger;
pub mod telemetry;
pub mod timestamp;

pub use processor::{Processor, ProcessorChain};
pub use telemetry::{Telemetry, TelemetryKind};
