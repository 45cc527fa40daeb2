//! opscope's load generator and benchmark harness (the `loadgen` and `harness`
//! binaries), and payloads shaped like an operator's telemetry for the criterion
//! benchmarks.

pub mod ceiling;
pub mod load;
mod payloads;
pub mod proc_stats;
pub mod report;
pub mod scenario;
pub mod signal;
pub mod sink;

pub use payloads::{
    controller_runtime_logs, reconcile_events, reconcile_traces, workload_payloads,
};
pub use signal::{Payload, Signal};
