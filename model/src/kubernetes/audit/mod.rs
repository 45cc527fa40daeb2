//! Kubernetes audit events (`audit.k8s.io/v1`), each read once per layer that needs
//! it: the webhook's `EventList` split into its events, each deserialized once into
//! the borrowed header a receiver filters on (`event_list`); and an event's facts
//! about the caller and the object, read in one pass over its text wherever it came
//! from: the webhook, an audit log file, a record another agent forwarded (`facts`,
//! from the typed `event`). Both skip the members they do not name (`lenient_json`)
//! and check whole only what skipping may let through (`decodable`).

mod decodable;
mod event;
pub mod event_list;
pub mod facts;
mod lenient_json;

pub use event_list::{AuditEvent, EventHeader, EventList, ListError};
pub use facts::{
    AuditDocument, AuditFacts, operator_of_user, parse_audit, parse_audit_line, read_audit,
};

use crate::timestamp::parse_rfc3339;

/// The `apiVersion` of every audit document: `audit.k8s.io/v1` (or a later version).
const API_VERSION_PREFIX: &str = "audit.k8s.io/";

/// When an event happened: its `stageTimestamp`, else its `requestReceivedTimestamp`,
/// in nanoseconds since the epoch; `None` when neither is a valid time.
fn event_time(stage_timestamp: Option<&str>, request_received: Option<&str>) -> Option<u64> {
    [stage_timestamp, request_received]
        .into_iter()
        .find_map(|time| parse_rfc3339(time?))
}
