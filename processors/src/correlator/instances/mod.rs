//! Per-operator-instance state: the operator pods the detectors of instance signals
//! follow, and what they measure of each (running totals of counters, gauge series).

pub(crate) mod gauge_series;
pub(crate) mod instance_table;
pub(crate) mod running_totals;
