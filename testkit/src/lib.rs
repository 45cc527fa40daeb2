//! Test support shared by opscope's integration tests: real servers on loopback
//! (Prometheus 2 and 3, Alertmanager, Jaeger, VictoriaLogs, the OpenTelemetry
//! Collector), a recording HTTP server, an independent reader of Loki pushes,
//! malformed-input generators for the parsers' property tests, small OTLP batches
//! of a known shape, the OTLP/gRPC services of stand-in downstreams, example
//! signals, and the whole operator logs kept outside the repository (where they are,
//! their git blob hashes).
//!
//! Tests that need an installed or built server, or the whole operator logs kept outside
//! the repository, skip with a printed reason when it is absent, unless
//! `OPSCOPE_REQUIRE_BACKENDS=1`, which makes them fail instead.

pub mod alertmanager;
pub mod backend;
pub mod captures;
pub mod control_plane;
pub mod jaeger;
pub mod loki;
pub mod mutate;
pub mod operator_pod;
pub mod otel_collector;
pub mod otlp_batches;
pub mod otlp_grpc;
pub mod pki;
pub mod pod_cgroup;
pub mod prometheus;
pub mod recording;
pub mod signals;
pub mod victorialogs;
mod wire;
