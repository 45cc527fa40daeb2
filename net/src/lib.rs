//! The network edges every opscope component shares: client TLS and the HTTP client
//! built from an exporter's or scraper's settings, server TLS and the one HTTP
//! server all receivers and exposition endpoints run on, and the watching of
//! certificate files for a reload.

pub mod client_tls;
pub mod file_watch;
pub mod http_client;
pub mod server_tls;
