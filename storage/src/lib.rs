//! opscope's files on disk: the append-only [`segment_log::SegmentLog`] of framed,
//! checksummed records that a durable sending queue keeps its batches in and a
//! gateway's correlator keeps its journal in, one log to a directory.

mod dir_lock;
mod error;
mod frame;
pub mod regular_file;
mod scan;
pub mod segment_log;

pub use segment_log::{Fsync, LogError, Recovery, SegmentLog};
