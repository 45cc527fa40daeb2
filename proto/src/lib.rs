//! Wire types of opscope. The pipeline carries the OTLP protobuf model itself; this
//! crate is the one place that pins which OTLP crate provides it, so every other
//! crate names `opscope_proto::otlp::...` and a version bump touches one file.
//! [`otlp_encode`] writes OTLP trace and log requests as prost does, faster;
//! [`varint`] is the one reader and writer of the wire format's varints.

pub mod loki;
pub mod otlp_encode;
pub mod otlp_service;
pub mod remote_write;
pub mod varint;

pub use opentelemetry_proto::tonic as otlp;
pub use otlp_service::ExportService;
pub use prost;
