//! The `operator_tagger` processor: recognises which operator, reconcile and object
//! each record belongs to, from the shapes real operators emit, and writes it as
//! attributes.

pub mod conflict;
mod controller_memory;
pub mod formats;
mod object_memory;
pub mod operator;
mod otlp_fields;
pub mod processor;
mod reconcile_pairing;
pub mod trace_map;

pub use processor::{OperatorTagger, Taggable, TaggerConfig};
