//! Kubernetes audit events (`audit.k8s.io/v1`), read in one place: the webhook's
//! `EventList` split into its events with the header fields a receiver filters on
//! (`event_list`), and the facts a completed request shows about the caller and the
//! object, read from an event wherever it came from: the webhook, an audit log
//! file, a record another agent forwarded (`facts`).

pub mod event_list;
pub mod facts;

pub use event_list::{AuditEvent, EventHeader, EventList, ListError};
pub use facts::{AuditFacts, operator_of_user, parse_audit, parse_audit_line};

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
