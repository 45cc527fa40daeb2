//! How state and signals live over time: the life of one signal (firing, updates,
//! resolved), when tracked objects are looked at again, the journal a restarted
//! process rebuilds its state from, and the tick that moves event time along with
//! the wall clock while no event comes.

pub(crate) mod journal;
pub(crate) mod scheduler;
pub(crate) mod signal;
pub(crate) mod tick;
