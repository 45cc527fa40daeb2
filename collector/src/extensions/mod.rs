//! Extensions: services of the agent itself rather than of the data.

pub mod health_check;
