//! Per-operator-instance state: the operator pods the detectors of instance signals
//! follow, what each detector keeps of every one (who it is, when last seen, its
//! signal) and what they measure of each (running totals of counters, gauge series).

pub(crate) mod gauge_series;
pub(crate) mod instance_state;
pub(crate) mod instance_table;
pub(crate) mod running_totals;
