//! The nouns every opscope crate shares: the telemetry a pipeline carries, the
//! signals the correlator concludes, the Kubernetes objects and operators both are
//! about, the attribute names and timestamps they are written with, the memory
//! account, the pieces every component's config is made of, and the pace of a
//! repeated warning. Nothing here imports a processor, an exporter or the collector.

pub mod attributes;
pub mod config;
pub mod decoded_size;
pub mod hash;
pub mod kubernetes;
pub mod memory;
pub mod repeated_warning;
pub mod semconv;
pub mod signal;
pub mod telemetry;
pub mod timestamp;

pub use telemetry::{Telemetry, TelemetryKind};
