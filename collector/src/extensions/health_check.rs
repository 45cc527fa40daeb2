//! The `health_check` extension: `GET /healthz` answers while the process runs,
//! `GET /readyz` once every receiver listens (and until shutdown begins).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use opscope_exporters::server_tls::ServerTlsConfig;
use opscope_processors::config::FieldError;
use serde::Deserialize;

use crate::config::check_listen_address;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthCheckConfig {
    pub endpoint: String,
    /// Serve the probes over TLS (kubelet probes then need `scheme: HTTPS`).
    pub tls: Option<ServerTlsConfig>,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        Self {
            endpoint: "127.0.0.1:13133".into(),
            tls: None,
        }
    }
}

impl HealthCheckConfig {
    pub fn validate(&self) -> Result<(), FieldError> {
        check_listen_address(&self.endpoint).map_err(|m| FieldError::new("endpoint", m))?;
        self.tls.as_ref().map_or(Ok(()), ServerTlsConfig::validate)
    }
}

/// Whether the agent takes data; shared by the service and the health endpoints.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

pub fn router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { (StatusCode::OK, "ok\n") }))
        .route("/readyz", get(ready))
        .with_state(readiness)
}

async fn ready(State(readiness): State<Readiness>) -> (StatusCode, &'static str) {
    if readiness.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
