//! The correlator: turns tagged records into events about objects and operator
//! instances, and detects reconcile loops, write conflicts, finalizer leaks and
//! resource leaks from them, on event time.

pub mod events;
pub mod signal;

pub use events::{Event, Nanos, ObjectEvent, ObjectEventKind, ObjectKey, ObjectRef, OperatorRef};
pub use signal::{Severity, Signal, SignalState, SignalType};
