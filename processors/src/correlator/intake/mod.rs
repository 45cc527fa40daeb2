//! Events from records: the events the correlator works on, and their extraction
//! from tagged traces, logs and metrics, reading the attributes the tagger writes.

pub mod events;
pub(crate) mod extract;
mod tagged;
