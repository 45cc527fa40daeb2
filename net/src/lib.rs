//! The network edges every opscope component shares: client TLS and the HTTP client
//! built from an exporter's or scraper's settings, server TLS and the one HTTP
//! server all receivers and exposition endpoints run on, and the watching of
//! certificate files for a reload.

// Input must never crash the agent: no panicking shortcuts outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::string_slice
    )
)]

pub mod client_tls;
pub mod file_watch;
pub mod http_client;
pub mod server_tls;
