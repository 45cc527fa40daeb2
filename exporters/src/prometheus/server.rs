//! The scrape endpoint: `GET /metrics` in the format the scraper's `Accept` header
//! asks for (OpenMetrics 1.0 or text 0.0.4), served on a task that stops when its
//! token is cancelled.

use opscope_net::server_tls::{ConnectionMetrics, ConnectionSettings, HttpServer};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::state::SeriesState;
use super::{openmetrics, text};

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Text,
    /// `application/openmetrics-text; version=1.0.0`, with exemplars.
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the `Accept` header ranks it at least as high as plain text
    /// (as Prometheus does); plain text otherwise, and without a header.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let mut open_metrics = 0.0f32;
        let mut text = 0.0f32;
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let quality = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => open_metrics = open_metrics.max(quality),
                "text/plain" | "text/*" | "*/*" => text = text.max(quality),
                _ => {}
            }
        }
        if open_metrics > 0.0 && open_metrics >= text {
            Self::OpenMetrics
        } else {
            Self::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::Text => text::CONTENT_TYPE,
            Self::OpenMetrics => openmetrics::CONTENT_TYPE,
        }
    }
}

pub type SharedState = Arc<Mutex<SeriesState>>;

/// The exposition of the current series, after dropping the idle ones.
pub fn render(state: &SharedState, format: Format) -> String {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    state.expire(Instant::now());
    match format {
        Format::Text => text::encode(state.store()),
        Format::OpenMetrics => openmetrics::encode(state.store()),
    }
}

/// Serves `GET /metrics` on the listener until `stop` is cancelled, with the small
/// connection budget of an exposition endpoint. Needs a Tokio runtime.
pub fn serve(
    listener: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    state: SharedState,
    stop: CancellationToken,
    name: &str,
    connections: ConnectionMetrics,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let router = Router::new()
        .route("/metrics", get(scrape))
        .with_state(state);
    let server = HttpServer {
        name: name.to_string(),
        tls,
        settings: ConnectionSettings::exposition(),
        metrics: connections,
    };
    tokio::spawn(server.serve(listener, router, stop.cancelled_owned()));
    Ok(())
}

async fn scrape(State(state): State<SharedState>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers.get(ACCEPT).and_then(|value| value.to_str().ok());
    let format = Format::negotiate(accept);
    (
        [(CONTENT_TYPE, format.content_type())],
        render(&state, format),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_negotiation() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(
            Format::negotiate(Some("text/plain;version=0.0.4")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
    }
}
