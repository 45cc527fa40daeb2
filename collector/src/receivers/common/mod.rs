//! What the receivers share, apart from the receiver types themselves: the server
//! every receiver that listens runs (with its `tls` and `auth` settings), the memory
//! and reading of request bodies, the decode budget of an OTLP request and the
//! limits on what it may carry.

pub mod auth;
pub(super) mod body_memory;
pub mod decode_budget;
pub(super) mod http_body;
pub mod input_limits;
pub(super) mod server;
