//! The correlator: turns tagged records into events about objects and operator
//! instances, and detects reconcile loops, write conflicts, finalizer leaks, resource
//! leaks and API request storms from them, on event time.
//!
//! Its parts, each a folder:
//!
//! * `intake`: the events, and their extraction from tagged traces, logs and metrics;
//! * `objects`: what is kept about one object (its reconciles, writers, evidence) and
//!   the table of tracked objects;
//! * `instances`: what is kept about one operator instance (pod) and the table of them;
//! * `detectors`: one file per signal, each finding its signal in that state;
//! * `lifecycle`: the life of a signal (firing, updates, resolved), when objects are
//!   looked at again, the journal that rebuilds state after a restart, and the tick
//!   that moves event time along with the wall clock.
//!
//! `engine` builds the [`Correlator`] from them; `processor` shares one in the
//! pipeline. `config` holds its settings; `compact` (bounded text, hashes) and `window`
//! (time buckets) are shared by every part.

mod compact;
mod config;
mod detectors;
mod engine;
mod instances;
mod intake;
mod lifecycle;
mod objects;
pub mod processor;
mod window;

#[cfg(test)]
mod test_support;

pub use config::{CorrelatorConfig, HandoverConfig};
pub use detectors::api_request_storm::ApiRequestStormConfig;
pub use detectors::finalizer_leak::FinalizerLeakConfig;
pub use detectors::reconcile_loop::ReconcileLoopConfig;
pub use detectors::resource_leak::ResourceLeakConfig;
pub use detectors::write_conflict::WriteConflictConfig;
pub use engine::{Correlator, CorrelatorStats};
pub use intake::events;
pub use intake::events::{Event, ObjectEvent, ObjectEventKind, RecordPlace};
pub use intake::extract::{CorrelatorEvents, Origin};
pub use lifecycle::journal::{Journal, JournalConfig, JournalStats, Journaled};
pub use lifecycle::tick::{TICK_INTERVAL, Ticker};
pub use processor::SharedCorrelator;
