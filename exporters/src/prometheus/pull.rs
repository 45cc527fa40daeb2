//! The `prometheus` exporter: keeps the series that traces, logs, metrics and signals
//! make and serves them on `endpoint` for Prometheus to scrape.

use opscope_net::server_tls::{Alpn, ConnectionMetrics, ReloadMetrics};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use opscope_model::config::{FieldError, Validate};
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::config::PrometheusConfig;
use super::server::{self, Format, SharedState};
use super::state::{Changes, SeriesState, delivery};
use super::store::Refusals;
use crate::batch::SignalBatch;
use crate::exporter::{Delivery, ExportError, Exporter};

/// How many series an exporter holds, and what it refused since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesStats {
    pub series: usize,
    pub refused: Refusals,
}

/// One per configured `prometheus` exporter, shared (in an `Arc`) by every pipeline
/// that lists it, so that traces, logs, metrics and signals land in one endpoint.
pub struct PrometheusExporter {
    state: SharedState,
    address: SocketAddr,
    /// Stops the HTTP server when the exporter is dropped.
    _server: DropGuard,
}

impl PrometheusExporter {
    /// Binds `endpoint` and serves `GET /metrics` on a task of the current Tokio
    /// runtime until the exporter is dropped. Errors name the setting at fault
    /// (`endpoint` when it cannot be bound).
    pub fn start(
        name: &str,
        config: &PrometheusConfig,
        reloads: ReloadMetrics,
        connections: ConnectionMetrics,
    ) -> Result<Self, FieldError> {
        config.validate()?;
        let endpoint_error = |why: String| {
            FieldError::new(
                "endpoint",
                format!("cannot serve on {}: {why}", config.endpoint),
            )
        };
        tokio::runtime::Handle::try_current()
            .map_err(|_| endpoint_error("no Tokio runtime to serve on".into()))?;
        let listener = std::net::TcpListener::bind(&config.endpoint)
            .map_err(|e| endpoint_error(e.to_string()))?;
        let address = listener
            .local_addr()
            .map_err(|e| endpoint_error(e.to_string()))?;
        let state = Arc::new(Mutex::new(SeriesState::new(
            name,
            config.limits(),
            &config.const_labels,
        )));
        let tls = config
            .tls
            .as_ref()
            .map(|tls| tls.server_config(Alpn::Http2AndHttp1, name, reloads))
            .transpose()
            .map_err(FieldError::from)?;
        let stop = CancellationToken::new();
        server::serve(
            listener,
            tls,
            Arc::clone(&state),
            stop.clone(),
            name,
            connections,
        )
        .map_err(|e| endpoint_error(e.to_string()))?;
        tracing::info!(exporter = %name, %address, "prometheus endpoint serving /metrics");
        Ok(Self {
            state,
            address,
            _server: stop.drop_guard(),
        })
    }

    /// The address served (the bound port when `endpoint` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// What a scrape in `format` would return now.
    pub fn render(&self, format: Format) -> String {
        server::render(&self.state, format)
    }

    pub fn stats(&self) -> SeriesStats {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        SeriesStats {
            series: state.store().len(),
            refused: state.store().refused(),
        }
    }

    fn update(&self, changes_of: impl FnOnce(&SeriesState) -> Changes) -> Delivery {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let changes = changes_of(&state);
        delivery(&state.apply(changes, Instant::now()))
    }
}

impl Exporter<ExportMetricsServiceRequest> for PrometheusExporter {
    async fn export(&self, batch: &ExportMetricsServiceRequest) -> Result<Delivery, ExportError> {
        Ok(self.update(|state| state.metric_changes(batch)))
    }
}

impl Exporter<SignalBatch> for PrometheusExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        Ok(self.update(|state| state.signal_changes(batch)))
    }
}
