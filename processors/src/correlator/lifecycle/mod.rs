//! How state and signals live over time: the life of one signal (firing, updates,
//! resolved), when tracked objects are looked at again, and the journal a restarted
//! process rebuilds its state from.

pub(crate) mod journal;
pub(crate) mod scheduler;
pub(crate) mod signal;
