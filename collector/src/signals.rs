//! Where signals go once the correlator emits them: counted in self-telemetry and
//! printed by the configured `debug` exporters, in order, by one consumer task.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opscope_exporters::debug::DebugExporter;
use opscope_processors::correlator::processor::SignalSink;
use opscope_processors::correlator::{SharedCorrelator, Signal, SignalState};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::analyze::report::signal_json;
use crate::config::{Config, ExporterConfig, ProcessorConfig};
use crate::self_telemetry::SelfTelemetry;

/// Signal changes waiting for the consumer.
const SIGNAL_QUEUE: usize = 1024;

/// How often the correlators' event time follows the wall clock when idle.
const TICK: Duration = Duration::from_secs(1);

pub struct SignalOutput {
    pub correlators: BTreeMap<String, SharedCorrelator>,
    consumer: JoinHandle<()>,
    ticker: JoinHandle<()>,
}

impl SignalOutput {
    /// Starts one shared correlator per configured `correlator` processor, the
    /// consumer of their signals, and the wall-clock ticker.
    pub fn start(
        config: &Config,
        telemetry: &Arc<SelfTelemetry>,
        stop_ticking: CancellationToken,
    ) -> Self {
        let (sender, receiver) = mpsc::channel(SIGNAL_QUEUE);
        let dropped = telemetry.signals_dropped.clone();
        let sink: SignalSink = Arc::new(move |signals: Vec<Signal>| {
            for signal in signals {
                if sender.try_send(signal).is_err() {
                    dropped.inc();
                }
            }
        });
        let correlators: BTreeMap<String, SharedCorrelator> = config
            .processors
            .iter()
            .filter_map(|(id, processor)| match processor {
                ProcessorConfig::Correlator(correlator) => Some((
                    id.clone(),
                    SharedCorrelator::new(correlator.clone(), Arc::clone(&sink)),
                )),
                _ => None,
            })
            .collect();
        drop(sink);
        let printers = debug_exporters(config);
        let consumer = tokio::spawn(consume(receiver, printers, Arc::clone(telemetry)));
        let ticker = tokio::spawn(tick(
            correlators.clone(),
            Arc::clone(telemetry),
            stop_ticking,
        ));
        Self {
            correlators,
            consumer,
            ticker,
        }
    }

    /// Waits for the last signals to be printed; call after the pipelines drained
    /// and the ticker was told to stop.
    pub async fn finish(self) {
        drop(self.correlators);
        let _ = self.ticker.await;
        let _ = self.consumer.await;
    }
}

fn debug_exporters(config: &Config) -> Vec<DebugExporter> {
    config
        .exporters
        .iter()
        .filter_map(|(id, exporter)| match exporter {
            ExporterConfig::Debug(debug) => Some(DebugExporter::new(id, debug)),
            _ => None,
        })
        .collect()
}

async fn consume(
    mut receiver: mpsc::Receiver<Signal>,
    printers: Vec<DebugExporter>,
    telemetry: Arc<SelfTelemetry>,
) {
    let mut firing = HashSet::new();
    while let Some(signal) = receiver.recv().await {
        match signal.state {
            SignalState::Firing if firing.insert(signal.id.clone()) => {
                let labels = vec![
                    ("signal".to_string(), signal.signal.name().to_string()),
                    ("cause".to_string(), signal.cause.clone()),
                ];
                telemetry.signals.get_or_create(&labels).inc();
            }
            SignalState::Resolved => {
                firing.remove(&signal.id);
            }
            SignalState::Firing => {}
        }
        let json = signal_json(&signal);
        for printer in &printers {
            printer.print_signal(&signal, &json);
        }
    }
}

/// Brings a counter up to a total the correlator keeps.
fn catch_up(counter: &Counter, total: u64) {
    counter.inc_by(total.saturating_sub(counter.get()));
}

async fn tick(
    correlators: BTreeMap<String, SharedCorrelator>,
    telemetry: Arc<SelfTelemetry>,
    stop: CancellationToken,
) {
    let mut interval = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = stop.cancelled() => return,
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        for (id, correlator) in &correlators {
            correlator.tick(now);
            let stats = correlator.stats();
            let labels = vec![("processor".to_string(), id.clone())];
            telemetry
                .correlator_tracked_objects
                .get_or_create(&labels)
                .set(stats.tracked_objects as i64);
            catch_up(
                &telemetry.correlator_evicted_objects.get_or_create(&labels),
                stats.evicted_objects,
            );
            catch_up(
                &telemetry.correlator_late_events.get_or_create(&labels),
                stats.late_events_dropped,
            );
        }
    }
}
