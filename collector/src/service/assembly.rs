//! Assembling the agent from a config: its exporters and signal output, the
//! processors pipelines share, the pipelines and the connectors between them, the
//! memory watches, the agent's own endpoints and, last, the receivers, each handed
//! the inputs of the pipelines that list it.

use std::collections::BTreeMap;
use std::sync::Arc;

use opscope_exporters::SendingQueue;
use opscope_exporters::loadbalancing::LoadBalancingExporter;
use opscope_exporters::queue::SheddableQueue;
use opscope_model::TelemetryKind;
use opscope_model::config::FieldError;
use opscope_model::memory::MemoryAccount;
use opscope_processors::memory_limiter::SystemMemory;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::ServiceError;
use super::exposition::{ExpositionContext, serve_extensions};
use super::shutdown::{Draining, PipelineTask, Receiving};
use crate::config::{Config, Pipeline as PipelineSpec, ProcessorConfig};
use crate::connectors;
use crate::consumer::{Consumer, OtlpBatch, PipelineInput};
use crate::exporters::Exporters;
use crate::extensions::health_check::Readiness;
use crate::handover;
use crate::listening::Listening;
use crate::pipeline::memory_watch::MemoryWatch;
use crate::pipeline::{Pipeline, SharedProcessors};
use crate::receivers::{Consumers, ReceiverContext};
use crate::self_telemetry::SelfTelemetry;
use crate::signals::SignalOutput;

/// The agent once assembled: what runs, and the signals that stop it, which
/// [`Agent::shut_down`](super::shutdown) fires in order.
pub(super) struct Agent {
    pub readiness: Readiness,
    pub stops: Stops,
    pub receiving: Receiving,
    pub draining: Draining,
    pub shared: SharedProcessors,
    pub handovers: Vec<JoinHandle<()>>,
    pub signals: SignalOutput,
    /// The memory watches and the agent's own endpoints.
    pub servers: JoinSet<()>,
    /// Kept to the end: an exporter that serves (Prometheus) serves until then.
    pub exporters: Exporters,
    pub telemetry: Arc<SelfTelemetry>,
}

/// The signals that stop the agent's parts.
#[derive(Default)]
pub(super) struct Stops {
    /// The receivers stop taking data.
    pub receiving: CancellationToken,
    /// The inputs of the pipelines that receivers feed close, when receivers did not
    /// stop in time.
    pub inputs: CancellationToken,
    /// Sending queues and signal consumers count what they hold as dropped.
    pub exports: CancellationToken,
    /// The correlators' ticker and hand-overs stop.
    pub ticking: CancellationToken,
    /// The memory watches and the agent's own endpoints stop.
    pub servers: CancellationToken,
}

/// Builds and starts every part of the agent `config` describes; the receivers last,
/// once everything they hand data to runs.
pub(super) async fn assemble(
    config: &Config,
    telemetry: &Arc<SelfTelemetry>,
    listening: &Listening,
) -> Result<Agent, ServiceError> {
    let stops = Stops::default();
    let mut exporters = Exporters::build(config, telemetry, listening)?;
    let memory = memory_account(config);
    let (mut signals, sink) =
        SignalOutput::start(config, telemetry, &exporters, &memory, &stops.exports)?;
    let shared = SharedProcessors::new(config, &sink, memory)?;
    // From now on only the correlators hold the sink: the signal consumer ends once
    // they are dropped.
    drop(sink);
    signals.start_ticking(shared.correlators.clone(), telemetry, stops.ticking.clone());
    let handovers = start_handovers(config, &shared, &exporters, &stops.ticking);

    let mut builder = PipelineBuilder {
        config,
        telemetry,
        shared: &shared,
        abort: &stops.exports,
        consumers: BTreeMap::new(),
        sheddable: BTreeMap::new(),
    };
    let draining = builder.build_all(&mut exporters, &stops.inputs)?;
    let PipelineBuilder {
        mut consumers,
        mut sheddable,
        ..
    } = builder;

    let mut servers = JoinSet::new();
    for (id, limiter) in &shared.memory_limiters {
        let watch = MemoryWatch {
            id: id.clone(),
            limiter: limiter.clone(),
            system: SystemMemory::default(),
            queues: sheddable.remove(id).unwrap_or_default(),
            metrics: telemetry.memory_limiter(id),
        };
        servers.spawn(watch.run(stops.servers.clone()));
    }
    let readiness = Readiness::default();
    let exposition = ExpositionContext {
        telemetry,
        listening,
        stop: &stops.servers,
    };
    serve_extensions(config, &readiness, &exposition, &mut servers).await?;
    // Journals are taken again once `/healthz` answers and the memory watches run:
    // a large journal takes seconds, which a liveness probe must not kill the
    // process for. The receivers start after.
    replay_journals(&shared).await?;

    let mut receiving = Receiving::default();
    for (id, receiver) in &config.receivers {
        let context = ReceiverContext {
            id: id.clone(),
            consumers: consumers.remove(id).unwrap_or_default(),
            telemetry: Arc::clone(telemetry),
            shutdown: stops.receiving.clone(),
            readiness: readiness.clone(),
            listening: listening.clone(),
        };
        let mut tasks = JoinSet::new();
        receiver.start(context, &mut tasks).await?;
        receiving.add(id, tasks);
    }
    Ok(Agent {
        readiness,
        stops,
        receiving,
        draining,
        shared,
        handovers,
        signals,
        servers,
        exporters,
        telemetry: Arc::clone(telemetry),
    })
}

/// Takes again what each correlator's journal holds, off the runtime's threads.
async fn replay_journals(shared: &SharedProcessors) -> Result<(), ServiceError> {
    for (id, correlator) in &shared.correlators {
        let correlator = correlator.clone();
        let replayed = tokio::task::spawn_blocking(move || correlator.replay_journal()).await;
        let why = match replayed {
            Ok(Ok(())) => continue,
            Ok(Err(error)) => error.to_string(),
            Err(error) => error.to_string(),
        };
        return Err(FieldError::new(
            format!("processors.{id}.storage"),
            format!("the journal cannot be read back: {why}"),
        )
        .into());
    }
    Ok(())
}

/// The memory account data is sized in: counting only when a memory limiter reads it.
fn memory_account(config: &Config) -> MemoryAccount {
    let limited = (config.processors.values())
        .any(|processor| matches!(processor, ProcessorConfig::MemoryLimiter(_)));
    if limited {
        MemoryAccount::default()
    } else {
        MemoryAccount::not_counting()
    }
}

/// The hand-over of each correlator that has one (a gateway's), following the ring of
/// its `loadbalancing` exporter.
fn start_handovers(
    config: &Config,
    shared: &SharedProcessors,
    exporters: &Exporters,
    stop: &CancellationToken,
) -> Vec<JoinHandle<()>> {
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

/// Builds pipelines and connects them to the receivers and connectors they list.
struct PipelineBuilder<'a> {
    config: &'a Config,
    telemetry: &'a SelfTelemetry,
    shared: &'a SharedProcessors,
    abort: &'a CancellationToken,
    /// The inputs each receiver and connector hands data to.
    consumers: BTreeMap<String, Consumers>,
    /// The in-memory sending queues of the pipelines that list each memory limiter.
    sheddable: BTreeMap<String, Vec<Arc<dyn SheddableQueue>>>,
}

impl PipelineBuilder<'_> {
    /// Builds every pipeline and every connector, and adds the connectors to
    /// `exporters`. A connector is built from the inputs of the pipelines it feeds
    /// (those of a type its row `feeds` that list it as a receiver), so those come
    /// first; the pipelines that list it as an exporter come after it. Those it feeds
    /// drain after those that feed it: their inputs close with the returned
    /// [`Draining`], the others' with `close_inputs`.
    fn build_all(
        &mut self,
        exporters: &mut Exporters,
        close_inputs: &CancellationToken,
    ) -> Result<Draining, FieldError> {
        let mut draining = Draining::default();
        let config = self.config;
        let (connected, others): (Vec<_>, Vec<_>) = config
            .pipelines()
            .partition(|spec| fed_by_a_connector(config, spec));
        for spec in connected {
            let built = self.build(&spec, exporters, &draining.close_connected)?;
            draining.connected.add(spec.id, built);
        }
        for (id, connector) in &config.connectors {
            let fed = self.consumers.remove(id).unwrap_or_default();
            exporters.add_connector(id, connectors::build(id, connector, fed));
        }
        for spec in others {
            draining
                .upstream
                .add(spec.id, self.build(&spec, exporters, close_inputs)?);
        }
        Ok(draining)
    }

    /// Builds one pipeline; its inputs close with `close_inputs`.
    fn build(
        &mut self,
        spec: &PipelineSpec<'_>,
        exporters: &Exporters,
        close_inputs: &CancellationToken,
    ) -> Result<(PipelineTask, Vec<SendingQueue>), FieldError> {
        match spec.kind {
            TelemetryKind::Traces => {
                self.build_of(spec, exporters, close_inputs, |c| &mut c.traces)
            }
            TelemetryKind::Logs => self.build_of(spec, exporters, close_inputs, |c| &mut c.logs),
            TelemetryKind::Metrics => {
                self.build_of(spec, exporters, close_inputs, |c| &mut c.metrics)
            }
        }
    }

    /// Builds one pipeline of signal type `T` and registers its input with the
    /// consumers of the receivers and connectors it lists.
    fn build_of<T: OtlpBatch>(
        &mut self,
        spec: &PipelineSpec<'_>,
        exporters: &Exporters,
        close_inputs: &CancellationToken,
        consumer_of: fn(&mut Consumers) -> &mut Consumer<T>,
    ) -> Result<(PipelineTask, Vec<SendingQueue>), FieldError> {
        let config = self.config;
        let processors: Vec<_> = spec
            .config
            .processors
            .iter()
            .filter_map(|id| config.processors.get(id).map(|p| (id.as_str(), p)))
            .collect();
        let exporter_ids: Vec<&str> = spec.config.exporters.iter().map(String::as_str).collect();
        let (pipeline, input, queues): (Pipeline<T>, PipelineInput<T>, _) = Pipeline::build(
            spec.id,
            &processors,
            self.shared,
            &exporter_ids,
            exporters,
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
        Ok((Box::pin(pipeline.run(close_inputs.clone())), queues))
    }
}

/// Whether a connector feeds the pipeline: it lists one as a receiver, and that
/// connector's row `feeds` the pipeline's type.
fn fed_by_a_connector(config: &Config, spec: &PipelineSpec<'_>) -> bool {
    (spec.config.receivers.iter())
        .filter_map(|id| config.connectors.get(id))
        .any(|connector| connector.feeds(spec.kind))
}
