//! The running agent: builds pipelines, exporters and receivers from a config,
//! serves health and self-telemetry, and shuts down in order (stop receiving,
//! drain the pipelines, deliver what is queued within the shutdown timeout).

use opscope_model::config::FieldError;
use opscope_net::server_tls::{Alpn, ConnectionSettings, HttpServer, ServerTlsConfig};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use opscope_exporters::SendingQueue;
use opscope_exporters::loadbalancing::LoadBalancingExporter;
use opscope_exporters::queue::SheddableQueue;
use opscope_model::TelemetryKind;
use opscope_model::memory::MemoryAccount;
use opscope_processors::memory_limiter::SystemMemory;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ExtensionConfig, Pipeline as PipelineSpec, ProcessorConfig};
use crate::connectors;
use crate::consumer::{Consumer, OtlpBatch, PipelineInput};
use crate::exporters::Exporters;
use crate::extensions::health_check::{self, Readiness};
use crate::handover;
use crate::listening::Listening;
use crate::pipeline::memory_watch::MemoryWatch;
use crate::pipeline::{Pipeline, SharedProcessors};
use crate::receivers::{Consumers, ReceiverContext, ReceiverError};
use crate::self_telemetry::SelfTelemetry;
use crate::signals::SignalOutput;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Config(#[from] FieldError),
    #[error(transparent)]
    Receiver(#[from] ReceiverError),
    #[error("{what}: cannot listen on {address}: {source}")]
    Bind {
        what: String,
        address: String,
        source: std::io::Error,
    },
    #[error("--listen-report {}: {source}", path.display())]
    ListenReport {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a caller of [`run`] asks beyond the config: where the listeners' bound
/// addresses go once every listener is bound.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// A file to write the addresses to, as JSON (`--listen-report`).
    pub listen_report: Option<PathBuf>,
    /// Told the addresses, by setting, once the agent is ready.
    pub on_ready: Option<oneshot::Sender<BTreeMap<String, SocketAddr>>>,
}

/// Runs the agent until `stop` completes, then shuts down gracefully.
pub async fn run(
    config: Config,
    options: RunOptions,
    stop: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    let telemetry = Arc::new(SelfTelemetry::new());
    let listening = Listening::default();
    let abort_exports = CancellationToken::new();
    let stop_receiving = CancellationToken::new();
    let stop_servers = CancellationToken::new();
    let close_inputs = CancellationToken::new();

    let mut exporters = Exporters::build(&config, &telemetry, &listening)?;
    // Data is sized for the memory account only when a memory limiter reads it.
    let limited = (config.processors.values())
        .any(|processor| matches!(processor, ProcessorConfig::MemoryLimiter(_)));
    let memory = if limited {
        MemoryAccount::default()
    } else {
        MemoryAccount::not_counting()
    };
    let stop_ticking = CancellationToken::new();
    let (mut signals, sink) =
        SignalOutput::start(&config, &telemetry, &exporters, &memory, &abort_exports)?;

    let mut consumers: BTreeMap<String, Consumers> = BTreeMap::new();
    let mut sheddable = BTreeMap::new();
    let shared = SharedProcessors::new(&config, &sink, memory)?;
    // From now on only the correlators hold the sink: the signal consumer ends once
    // they are dropped.
    drop(sink);
    signals.start_ticking(shared.correlators.clone(), &telemetry, stop_ticking.clone());
    let handovers = start_handovers(&config, &shared, &exporters, &stop_ticking);
    // What connectors feed drains after what feeds them, so its inputs close later.
    let close_connected = CancellationToken::new();
    let mut draining = Draining::default();
    // A connector is built from the inputs of the pipelines it feeds (those of a type
    // its row `feeds` that list it as a receiver), so those come first; the pipelines
    // that list it as an exporter come after it.
    let (connected, others): (Vec<_>, Vec<_>) = config
        .pipelines()
        .partition(|spec| fed_by_a_connector(&config, spec));
    let mut builder = PipelineBuilder {
        config: &config,
        telemetry: &telemetry,
        shared: &shared,
        exporters: &exporters,
        abort: &abort_exports,
        close_inputs: &close_connected,
        consumers: &mut consumers,
        sheddable: &mut sheddable,
    };
    for spec in connected {
        draining.connected.add(builder.build_any(&spec)?);
    }
    for (id, connector) in &config.connectors {
        let fed = consumers.remove(id).unwrap_or_default();
        exporters.add_connector(id, connectors::build(id, connector, fed));
    }
    let mut builder = PipelineBuilder {
        config: &config,
        telemetry: &telemetry,
        shared: &shared,
        exporters: &exporters,
        abort: &abort_exports,
        close_inputs: &close_inputs,
        consumers: &mut consumers,
        sheddable: &mut sheddable,
    };
    for spec in others {
        draining.upstream.add(builder.build_any(&spec)?);
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
    let exposition = ExpositionContext {
        telemetry: &telemetry,
        listening: &listening,
        stop: &stop_servers,
    };
    serve_extensions(&config, &readiness, &exposition, &mut servers).await?;

    let mut receiving = Receiving::default();
    for (id, receiver) in &config.receivers {
        let context = ReceiverContext {
            id: id.clone(),
            consumers: consumers.remove(id).unwrap_or_default(),
            telemetry: Arc::clone(&telemetry),
            shutdown: stop_receiving.clone(),
            readiness: readiness.clone(),
            listening: listening.clone(),
        };
        let mut tasks = JoinSet::new();
        receiver.start(context, &mut tasks).await?;
        receiving.add(id, tasks);
    }
    drop(consumers);
    readiness.set(true);
    tracing::info!("opscope is ready");
    // Written once ready: a script that sees the file may use every address in it.
    if let Some(path) = &options.listen_report {
        listening
            .write_report(path)
            .map_err(|source| ServiceError::ListenReport {
                path: path.clone(),
                source,
            })?;
    }
    if let Some(ready) = options.on_ready {
        let _ = ready.send(listening.addresses());
    }

    stop.await;
    tracing::info!("shutting down: receivers stop, queued data is delivered");
    readiness.set(false);
    stop_receiving.cancel();
    let shutdown_timeout = config.service.shutdown_timeout;
    let started = tokio::time::Instant::now();
    let deadline = started + shutdown_timeout;
    // Half the time for receivers to stop: one stuck (in a file operation, say) must
    // not keep the pipelines from draining what the others handed on.
    let stuck = receiving.stop(started + shutdown_timeout / 2).await;
    if !stuck.is_empty() {
        tracing::error!(receivers = ?stuck, timeout = ?shutdown_timeout / 2,
            "receivers did not stop within half the shutdown timeout and are left behind: \
            what they had not handed on is not drained (a filelog receiver reads it again \
            from its last checkpoint)");
    }
    close_inputs.cancel();
    draining.close_connected = close_connected;
    let timed_out = tokio::time::timeout_at(deadline, draining.finish())
        .await
        .is_err();
    if timed_out {
        tracing::error!(timeout = ?shutdown_timeout,
            "shutdown timeout reached; what is not delivered yet is dropped (or kept, in a durable queue)");
        // Consumers now count what they hold as dropped, which frees the pipelines.
        abort_exports.cancel();
        if tokio::time::timeout(LAST_GRACE, draining.finish())
            .await
            .is_err()
        {
            tracing::error!(
                "pipelines did not drain after the shutdown timeout; what they held is lost"
            );
            draining.abort().await;
        }
    }
    // The correlators' last signals go out once nothing can feed them any more.
    drop(draining);
    drop(shared);
    stop_ticking.cancel();
    for handover in handovers {
        // A hand-over still sending is cut short: its records stay in the journal.
        handover.abort();
        let _ = handover.await;
    }
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
    report_dropped(&telemetry, timed_out || abort_exports.is_cancelled());
    stop_servers.cancel();
    while servers.join_next().await.is_some() {}
    tracing::info!("opscope stopped");
    Ok(())
}

/// The hand-over of each correlator that has one (a gateway's), following the ring of
/// its `loadbalancing` exporter.
fn start_handovers(
    config: &Config,
    shared: &SharedProcessors,
    exporters: &Exporters,
    stop: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handovers = Vec::new();
    for (id, processor) in &config.processors {
        let ProcessorConfig::Correlator(settings) = processor else {
            continue;
        };
        let (Some(handover), Some(correlator)) = (&settings.handover, shared.correlators.get(id))
        else {
            continue;
        };
        // Validation made sure it is a loadbalancing exporter.
        let Some(exporter) = exporters.instance::<LoadBalancingExporter>(&handover.exporter) else {
            continue;
        };
        handovers.push(handover::start(
            id.clone(),
            correlator.clone(),
            exporter,
            handover.endpoint.clone(),
            stop.clone(),
        ));
    }
    handovers
}

/// The running receivers: one task each, named by the receiver's id.
#[derive(Default)]
struct Receiving {
    tasks: JoinSet<()>,
    names: HashMap<tokio::task::Id, String>,
}

impl Receiving {
    /// Runs the tasks a receiver started as one task, named `id`.
    fn add(&mut self, id: &str, mut tasks: JoinSet<()>) {
        let handle = self
            .tasks
            .spawn(async move { while tasks.join_next().await.is_some() {} });
        self.names.insert(handle.id(), id.to_string());
    }

    /// Waits until `deadline` for every receiver to stop; aborts those still running
    /// then and returns their ids, sorted. A receiver whose work is stuck on a blocking
    /// thread leaves that thread behind.
    async fn stop(&mut self, deadline: tokio::time::Instant) -> Vec<String> {
        let _ = tokio::time::timeout_at(deadline, async {
            while let Some(ended) = self.tasks.join_next_with_id().await {
                let id = match ended {
                    Ok((id, ())) => id,
                    Err(err) => err.id(),
                };
                self.names.remove(&id);
            }
        })
        .await;
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        let mut stuck: Vec<String> = self.names.drain().map(|(_, name)| name).collect();
        stuck.sort();
        stuck
    }
}

/// Says what shutdown dropped, per exporter and pipeline, or that it dropped nothing.
fn report_dropped(telemetry: &SelfTelemetry, cut_short: bool) {
    let dropped = telemetry.dropped_at_shutdown();
    for queue in &dropped {
        tracing::error!(exporter = %queue.exporter, pipeline = %queue.pipeline, items = queue.count,
            "dropped at shutdown: {} {} not delivered", queue.count, queue.item);
    }
    if dropped.is_empty() && cut_short {
        tracing::info!("the shutdown timeout cut sending short, but nothing in memory was dropped");
    } else if dropped.is_empty() {
        tracing::info!("everything queued was delivered");
    }
}

/// How long, after the shutdown timeout, tasks get to count what they drop.
const LAST_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Everything that has to finish, in order, for a clean shutdown once the receivers
/// stopped: the pipelines receivers feed and their queues, then the pipelines that
/// connectors feed (whose inputs close only then) and theirs.
#[derive(Default)]
struct Draining {
    upstream: Tier,
    connected: Tier,
    close_connected: CancellationToken,
}

/// Pipelines and the sending queues they feed.
#[derive(Default)]
struct Tier {
    pipelines: JoinSet<()>,
    queues: Vec<SendingQueue>,
}

impl Tier {
    fn add(&mut self, (task, mut queues): (PipelineTask, Vec<SendingQueue>)) {
        self.pipelines.spawn(task);
        self.queues.append(&mut queues);
    }

    async fn finish(&mut self) {
        while self.pipelines.join_next().await.is_some() {}
        for queue in &mut self.queues {
            queue.join().await;
        }
    }

    async fn abort(&mut self) {
        self.pipelines.abort_all();
        while self.pipelines.join_next().await.is_some() {}
    }
}

impl Draining {
    /// Stops pipelines where they are; what they held is lost, so this is only for
    /// tasks that ignored the shutdown timeout.
    async fn abort(&mut self) {
        self.upstream.abort().await;
        self.connected.abort().await;
    }

    /// Waits for pipelines to drain and queues to deliver, tier by tier. Can be
    /// abandoned and called again: it only waits by reference.
    async fn finish(&mut self) {
        self.upstream.finish().await;
        self.close_connected.cancel();
        self.connected.finish().await;
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
    /// Closes the pipelines' inputs when receivers did not stop in time.
    close_inputs: &'a CancellationToken,
    consumers: &'a mut BTreeMap<String, Consumers>,
    /// The in-memory sending queues of the pipelines that list each memory limiter.
    sheddable: &'a mut BTreeMap<String, Vec<Arc<dyn SheddableQueue>>>,
}

impl PipelineBuilder<'_> {
    /// Builds one pipeline, of the signal type its id says.
    fn build_any(
        &mut self,
        spec: &PipelineSpec<'_>,
    ) -> Result<(PipelineTask, Vec<SendingQueue>), FieldError> {
        match spec.kind {
            TelemetryKind::Traces => self.build(spec, |c| &mut c.traces),
            TelemetryKind::Logs => self.build(spec, |c| &mut c.logs),
            TelemetryKind::Metrics => self.build(spec, |c| &mut c.metrics),
        }
    }

    /// Builds one pipeline of signal type `T` and registers its input with the
    /// consumers of the receivers it lists.
    fn build<T: OtlpBatch>(
        &mut self,
        spec: &PipelineSpec<'_>,
        consumer_of: fn(&mut Consumers) -> &mut Consumer<T>,
    ) -> Result<(PipelineTask, Vec<SendingQueue>), FieldError> {
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
        Ok((Box::pin(pipeline.run(self.close_inputs.clone())), queues))
    }
}

/// Whether a connector feeds the pipeline: it lists one as a receiver, and that
/// connector's row `feeds` the pipeline's type.
fn fed_by_a_connector(config: &Config, spec: &PipelineSpec<'_>) -> bool {
    (spec.config.receivers.iter())
        .filter_map(|id| config.connectors.get(id))
        .any(|connector| connector.feeds(spec.kind))
}

/// What the agent's own endpoints share: the telemetry they count in, where they
/// record their bound addresses, and the signal that stops them.
struct ExpositionContext<'a> {
    telemetry: &'a Arc<SelfTelemetry>,
    listening: &'a Listening,
    stop: &'a CancellationToken,
}

async fn serve_extensions(
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_receiver_stuck_on_a_blocking_thread_is_named_and_left_behind() {
        let mut receiving = Receiving::default();
        let mut quick = JoinSet::new();
        quick.spawn(async {});
        receiving.add("otlp", quick);
        let (release, stuck_until) = std::sync::mpsc::channel::<()>();
        let mut stuck = JoinSet::new();
        stuck.spawn(async move {
            let _ = tokio::task::spawn_blocking(move || stuck_until.recv()).await;
        });
        receiving.add("filelog", stuck);
        let started = tokio::time::Instant::now();
        let left = receiving.stop(started + Duration::from_millis(100)).await;
        assert_eq!(left, ["filelog"]);
        assert!(started.elapsed() < Duration::from_secs(2));
        let _ = release.send(());
    }
}
