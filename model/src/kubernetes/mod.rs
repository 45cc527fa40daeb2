//! Kubernetes facts every part of opscope shares: names, kinds and resources, object
//! and operator references, API calls, audit events and status digests.

pub mod api_call;
pub mod audit;
pub mod kinds;
pub mod name;
pub mod object;
pub mod status_digest;

pub use name::Name;
pub use object::{ObjectKey, ObjectRef, OperatorRef};
