//! The detectors, one file per signal: each keeps what it needs of an object or an
//! instance, finds its signal in it, and says why and what to do.
//!
//! Of objects: `reconcile_loop`, `write_conflict`, `finalizer_leak`. Of operator
//! instances: `resource_leak` (runtime gauges), `api_request_storm` (the kernel
//! probe's counts) and `operator_counters` (the operator's own counters: write
//! conflicts that no object shows, and figures for the other signals).

pub(crate) mod api_request_storm;
pub(crate) mod finalizer_leak;
pub(crate) mod operator_counters;
pub(crate) mod reconcile_loop;
pub(crate) mod resource_leak;
pub(crate) mod write_conflict;
