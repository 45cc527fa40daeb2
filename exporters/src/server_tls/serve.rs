//! Serving an HTTP router on a bound listener, in plain text or over TLS: one
//! function for every HTTP server opscope runs.

use std::future::Future;
use std::io;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;

use super::TlsListener;

/// Serves `router` until `shutdown` completes and in-flight requests are answered;
/// over TLS when `tls` is set. `server` names it in logs.
pub async fn serve_http(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    server: &str,
) -> io::Result<()> {
    match tls {
        Some(config) => {
            let listener = TlsListener::new(listener, config, server);
            axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await
        }
        None => {
            axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}
