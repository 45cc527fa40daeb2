//! The running agent: builds pipelines, exporters and receivers from a config,
//! serves health and self-telemetry, and shuts down in order (stop receiving,
//! drain the pipelines, deliver what is queued within the shutdown timeout).

use opscope_exporters::server_tls::{Alpn, ConnectionSettings, HttpServer, ServerTlsConfig};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use opscope_exporters::SendingQueue;
use opscope_exporters::queue::SheddableQueue;
use opscope_processors::memory_limiter::{MemoryAccount, SystemMemory};
use opscope_processors::{Telemetry, TelemetryKind};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{
    Config, ConfigError, ExtensionConfig, Pipeline as PipelineSpec, ProcessorConfig,
};
use crate::exporters::{Exporters, PipelineData};
use crate::extensions::health_check::{self, Readiness};
use crate::pipeline::memory_watch::MemoryWatch;
use crate::pipeline::{Consumer, Pipeline, PipelineInput, SharedProcessors};
use crate::receivers::{self, Consumers, ReceiverContext, ReceiverError};
use crate::self_telemetry::SelfTelemetry;
use crate::signals::SignalOutput;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Receiver(#[from] ReceiverError),
    #[error("{what}: cannot listen on {address}: {source}")]
    Bind {
        what: &'static str,
        address: String,
        source: std::io::Error,
    },
}

/// Runs the agent until `stop` completes, then shuts down gracefully.
pub async fn run(config: Config, stop: impl Future<Output = ()>) -> Result<(), ServiceError> {
    let telemetry = Arc::new(SelfTelemetry::new());
    let abort_exports = CancellationToken::new();
    let stop_receiving = CancellationToken::new();
    let stop_servers = CancellationToken::new();

    let exporters = Exporters::build(&config, &telemetry)?;
    // Data is sized for the memory account only when a memory limiter reads it.
    let limited = (config.processors.values())
        .any(|processor| matches!(processor, ProcessorConfig::MemoryLimiter(_)));
    let memory = if limited {
        MemoryAccount::default()
    } else {
        MemoryAccount::not_counting()
    };
    let stop_ticking = CancellationToken::new();
    let (mut signals, correlators) = SignalOutput::start(
        &config,
        &telemetry,
        stop_ticking.clone(),
        &exporters,
        &memory,
        &abort_exports,
    )?;

    let mut consumers: BTreeMap<String, Consumers> = BTreeMap::new();
    let mut pipelines = JoinSet::new();
    let mut queues = Vec::new();
    let mut sheddable = BTreeMap::new();
    let shared = SharedProcessors::new(&config, correlators, memory)?;
    let mut builder = PipelineBuilder {
        config: &config,
        telemetry: &telemetry,
        shared: &shared,
        exporters: &exporters,
        abort: &abort_exports,
        consumers: &mut consumers,
        sheddable: &mut sheddable,
    };
    for spec in config.pipelines() {
        let (task, mut sending) = match spec.kind {
            TelemetryKind::Traces => builder.build(&spec, |c| &mut c.traces)?,
            TelemetryKind::Logs => builder.build(&spec, |c| &mut c.logs)?,
            TelemetryKind::Metrics => builder.build(&spec, |c| &mut c.metrics)?,
        };
        pipelines.spawn(task);
        queues.append(&mut sending);
    }

    let mut servers = JoinSet::new();
    for (id, limiter) in &shared.memory_limiters {
        let watch = MemoryWatch {
            id: id.clone(),
            limiter: limiter.clone(),
            system: SystemMemory::default(),
            queues: sheddable.remove(id).unwrap_or_default(),
            metrics: telemetry.memory_limiter(id),
        };
        servers.spawn(watch.run(stop_servers.clone()));
    }
    let readiness = Readiness::default();
    serve_extensions(&config, &readiness, &telemetry, &stop_servers, &mut servers).await?;

    let mut receiving = JoinSet::new();
    for (id, receiver) in &config.receivers {
        let context = ReceiverContext {
            id: id.clone(),
            consumers: consumers.remove(id).unwrap_or_default(),
            telemetry: Arc::clone(&telemetry),
            shutdown: stop_receiving.clone(),
        };
        receivers::start(receiver, context, &mut receiving).await?;
    }
    drop(consumers);
    readiness.set(true);
    tracing::info!("opscope is ready");

    stop.await;
    tracing::info!("shutting down: receivers stop, queued data is delivered");
    readiness.set(false);
    stop_receiving.cancel();
    let mut draining = Draining {
        receiving,
        pipelines,
        queues,
    };
    let deadline = tokio::time::Instant::now() + config.service.shutdown_timeout;
    if tokio::time::timeout_at(deadline, draining.finish())
        .await
        .is_err()
    {
        tracing::error!(
            timeout = ?config.service.shutdown_timeout,
            "shutdown timeout reached; what is still queued is dropped and counted"
        );
        // Consumers now count what they hold as dropped, which frees the pipelines.
        abort_exports.cancel();
        if tokio::time::timeout(LAST_GRACE, draining.finish())
            .await
            .is_err()
        {
            tracing::error!("stopping tasks that did not finish after the shutdown timeout");
            draining.abort().await;
        }
    }
    // The correlators' last signals go out once nothing can feed them any more.
    drop(draining);
    drop(shared);
    stop_ticking.cancel();
    let deadline = deadline.max(tokio::time::Instant::now() + LAST_GRACE);
    if tokio::time::timeout_at(deadline, signals.finish())
        .await
        .is_err()
    {
        abort_exports.cancel();
        if tokio::time::timeout(LAST_GRACE, signals.finish())
            .await
            .is_err()
        {
            tracing::error!("signal exporters did not finish after the shutdown timeout");
        }
    }
    stop_servers.cancel();
    while servers.join_next().await.is_some() {}
    tracing::info!("opscope stopped");
    Ok(())
}

/// How long, after the shutdown timeout, tasks get to count what they drop.
const LAST_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Everything that has to finish, in order, for a clean shutdown.
struct Draining {
    receiving: JoinSet<()>,
    pipelines: JoinSet<()>,
    queues: Vec<SendingQueue>,
}

impl Draining {
    /// Stops receivers and pipelines where they are; what they held is lost, so this
    /// is only for tasks that ignored the shutdown timeout.
    async fn abort(&mut self) {
        self.receiving.abort_all();
        self.pipelines.abort_all();
        while self.receiving.join_next().await.is_some() {}
        while self.pipelines.join_next().await.is_some() {}
    }

    /// Waits for receivers to stop, pipelines to drain and queues to deliver. Can be
    /// abandoned and called again: it only waits by reference.
    async fn finish(&mut self) {
        while self.receiving.join_next().await.is_some() {}
        while self.pipelines.join_next().await.is_some() {}
        for queue in &mut self.queues {
            queue.join().await;
        }
    }
}

type PipelineTask = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Builds pipelines and connects them to the receivers they list.
struct PipelineBuilder<'a> {
    config: &'a Config,
    telemetry: &'a SelfTelemetry,
    shared: &'a SharedProcessors,
    exporters: &'a Exporters,
    abort: &'a CancellationToken,
    consumers: &'a mut BTreeMap<String, Consumers>,
    /// The in-memory sending queues of the pipelines that list each memory limiter.
    sheddable: &'a mut BTreeMap<String, Vec<Arc<dyn SheddableQueue>>>,
}

impl PipelineBuilder<'_> {
    /// Builds one pipeline of signal type `T` and registers its input with the
    /// consumers of the receivers it lists.
    fn build<T: Telemetry + PipelineData>(
        &mut self,
        spec: &PipelineSpec<'_>,
        consumer_of: fn(&mut Consumers) -> &mut Consumer<T>,
    ) -> Result<(PipelineTask, Vec<SendingQueue>), ConfigError> {
        let config = self.config;
        let processors: Vec<_> = spec
            .config
            .processors
            .iter()
            .filter_map(|id| config.processors.get(id).map(|p| (id.as_str(), p)))
            .collect();
        let exporters: Vec<&str> = spec.config.exporters.iter().map(String::as_str).collect();
        let (pipeline, input, queues): (Pipeline<T>, PipelineInput<T>, _) = Pipeline::build(
            spec.id,
            &processors,
            self.shared,
            &exporters,
            self.exporters,
            self.telemetry,
            self.abort,
        )?;
        if let Some((limiter, _)) = self.shared.memory_limiter_of(&processors) {
            let sheddable = self.sheddable.entry(limiter.to_string()).or_default();
            sheddable.extend(queues.iter().filter_map(SendingQueue::sheddable));
        }
        for receiver in &spec.config.receivers {
            consumer_of(self.consumers.entry(receiver.clone()).or_default())
                .add_input(input.clone());
        }
        Ok((Box::pin(pipeline.run()), queues))
    }
}

async fn serve_extensions(
    config: &Config,
    readiness: &Readiness,
    telemetry: &Arc<SelfTelemetry>,
    stop: &CancellationToken,
    servers: &mut JoinSet<()>,
) -> Result<(), ServiceError> {
    let metrics = &config.service.telemetry.metrics;
    let server = Exposition {
        what: "service.telemetry.metrics",
        address: &metrics.address,
        tls: metrics.tls.as_ref(),
    };
    servers.spawn(
        server
            .serve(Arc::clone(telemetry).router(), telemetry, stop)
            .await?,
    );
    for id in &config.service.extensions {
        if let Some(ExtensionConfig::HealthCheck(health)) = config.extensions.get(id) {
            let server = Exposition {
                what: "extensions.health_check",
                address: &health.endpoint,
                tls: health.tls.as_ref(),
            };
            let router = health_check::router(readiness.clone());
            servers.spawn(server.serve(router, telemetry, stop).await?);
        }
    }
    Ok(())
}

/// One of the agent's own HTTP endpoints (self-telemetry, health).
struct Exposition<'a> {
    /// The setting it comes from, for errors and logs.
    what: &'static str,
    address: &'a str,
    tls: Option<&'a ServerTlsConfig>,
}

impl Exposition<'_> {
    /// Binds the endpoint and returns the task that serves `router` until `stop`.
    async fn serve(
        self,
        router: axum::Router,
        telemetry: &SelfTelemetry,
        stop: &CancellationToken,
    ) -> Result<impl Future<Output = ()> + Send + 'static, ServiceError> {
        let what = self.what;
        let tls = self
            .tls
            .map(|tls| {
                let reloads = telemetry.certificate_reloads(what, "http");
                tls.server_config(Alpn::Http2AndHttp1, what, reloads)
            })
            .transpose()
            .map_err(|error| {
                ConfigError::new(format!("{what}.{}", error.field()), error.to_string())
            })?;
        let listener =
            TcpListener::bind(self.address)
                .await
                .map_err(|source| ServiceError::Bind {
                    what,
                    address: self.address.to_string(),
                    source,
                })?;
        if let Ok(local) = listener.local_addr() {
            tracing::info!(%what, address = %local, tls = tls.is_some(), "listening");
        }
        // Its own small connection budget: probes and scrapes are answered while
        // the data servers are full.
        let server = HttpServer {
            name: what.to_string(),
            tls,
            settings: ConnectionSettings::exposition(),
            metrics: telemetry.server_connections(what, "http"),
        };
        Ok(server.serve(listener, router, stop.clone().cancelled_owned()))
    }
}
