//! Operator-shaped telemetry, generated: reconcile traces with their client API
//! calls, controller-runtime JSON log records and controller metrics. `opscope demo`
//! plays a small scripted fleet with it ([`SimulatedFleet`]); the load generator
//! plays thousands of objects with it ([`OperatorWorkload`]).

mod attributes;
pub mod fleet;
mod random;
pub mod reconcile;
pub mod workload;

pub use fleet::{SimulatedFleet, TICK_MILLIS};
pub use reconcile::{ApiCall, ObjectRef, OperatorPod, Reconcile, SpanIds};
pub use workload::{Behaviour, OperatorWorkload, WorkloadConfig, WorkloadConfigError};
