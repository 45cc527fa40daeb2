//! Per-object state: what the correlator keeps about one object (its recent
//! reconciles, its writers, the status fields that churn, reconciles that overlap, the
//! evidence to show) and the table of the objects it tracks.

pub(crate) mod evidence;
pub(crate) mod field_churn;
pub(crate) mod object_state;
pub(crate) mod object_table;
pub(crate) mod overlap;
pub(crate) mod recent_reconciles;
pub(crate) mod writers;
