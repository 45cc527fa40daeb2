//! opscope's files on disk: the append-only [`segment_log::SegmentLog`] of framed,
//! checksummed records that a durable sending queue keeps its batches in and a
//! gateway's correlator keeps its journal in.

pub mod segment_log;

pub use segment_log::{Fsync, LogError, Recovery, SegmentLog};
