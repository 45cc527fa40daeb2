//! The agent's own HTTP endpoints: its self-telemetry (`service.telemetry.metrics`)
//! and the health check extensions, each bound where its setting says, its address
//! recorded, and served on a small connection budget of its own.

use std::future::Future;
use std::sync::Arc;

use opscope_model::config::FieldError;
use opscope_net::server_tls::{Alpn, ConnectionSettings, HttpServer, ServerTlsConfig};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::ServiceError;
use crate::config::{Config, ExtensionConfig};
use crate::extensions::health_check::{self, Readiness};
use crate::listening::Listening;
use crate::self_telemetry::SelfTelemetry;

/// What the agent's own endpoints share: the telemetry they count in, where they
/// record their bound addresses, and the signal that stops them.
pub(super) struct ExpositionContext<'a> {
    pub telemetry: &'a Arc<SelfTelemetry>,
    pub listening: &'a Listening,
    pub stop: &'a CancellationToken,
}

/// Binds the agent's self-telemetry endpoint and the health check extensions the
/// service lists, and spawns their servers into `servers`.
pub(super) async fn serve_extensions(
    config: &Config,
    readiness: &Readiness,
    context: &ExpositionContext<'_>,
    servers: &mut JoinSet<()>,
) -> Result<(), ServiceError> {
    let metrics = &config.service.telemetry.metrics;
    let server = Exposition {
        what: "service.telemetry.metrics".into(),
        address: &metrics.address,
        tls: metrics.tls.as_ref(),
    };
    let router = Arc::clone(context.telemetry).router();
    servers.spawn(server.serve(router, context).await?);
    for id in &config.service.extensions {
        if let Some(ExtensionConfig::HealthCheck(health)) = config.extensions.get(id) {
            let server = Exposition {
                what: format!("extensions.{id}"),
                address: &health.endpoint,
                tls: health.tls.as_ref(),
            };
            let router = health_check::router(readiness.clone());
            servers.spawn(server.serve(router, context).await?);
        }
    }
    Ok(())
}

/// One of the agent's own HTTP endpoints (self-telemetry, health).
struct Exposition<'a> {
    /// The setting it comes from, for errors, logs and the listen report.
    what: String,
    address: &'a str,
    tls: Option<&'a ServerTlsConfig>,
}

impl Exposition<'_> {
    /// Binds the endpoint, records its address and returns the task that serves
    /// `router` until stopped.
    async fn serve(
        self,
        router: axum::Router,
        context: &ExpositionContext<'_>,
    ) -> Result<impl Future<Output = ()> + Send + 'static, ServiceError> {
        let Self { what, address, tls } = self;
        let telemetry = context.telemetry;
        let tls = tls
            .map(|tls| {
                let reloads = telemetry.certificate_reloads(&what, "http");
                tls.server_config(Alpn::Http2AndHttp1, &what, reloads)
            })
            .transpose()
            .map_err(|error| {
                FieldError::new(format!("{what}.{}", error.field()), error.to_string())
            })?;
        let bind_failed = |source| ServiceError::Bind {
            what: what.clone(),
            address: address.to_string(),
            source,
        };
        let listener = TcpListener::bind(address).await.map_err(bind_failed)?;
        let local = listener.local_addr().map_err(bind_failed)?;
        context.listening.record(what.clone(), local);
        // Its own small connection budget: probes and scrapes are answered while
        // the data servers are full.
        let server = HttpServer {
            metrics: telemetry.server_connections(&what, "http"),
            name: what,
            tls,
            settings: ConnectionSettings::exposition(),
        };
        Ok(server.serve(listener, router, context.stop.clone().cancelled_owned()))
    }
}
