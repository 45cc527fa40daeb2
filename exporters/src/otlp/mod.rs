//! The `otlp` (gRPC) and `otlphttp` exporters: the way to Jaeger, which ingests OTLP,
//! and to any OpenTelemetry collector.

pub mod config;
pub mod grpc;
pub mod http;
pub mod signals;

pub use config::{OtlpExporterConfig, OtlpProtocol};
pub use grpc::GrpcExporter;
pub use http::HttpExporter;
