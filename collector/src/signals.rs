//! Where signals go once the correlators emit them: counted in self-telemetry and
//! handed, in order, to the exporters of the `signals` pipelines, each behind its
//! own sending queue. A timer here ticks the correlators by the wall clock and reports
//! their figures after each tick.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use opscope_exporters::{QueueSender, SendingQueue, SignalBatch};
use opscope_model::config::FieldError;
use opscope_model::memory::MemoryAccount;
use opscope_model::signal::{Signal, SignalState};
use opscope_model::timestamp::now_unix_nanos;
use opscope_processors::correlator::processor::SignalSink;
use opscope_processors::correlator::{
    CorrelatorStats, JournalStats, SharedCorrelator, TICK_INTERVAL, Ticker,
};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::exporters::{Exporters, QueueFor};
use crate::self_telemetry::SelfTelemetry;

/// Signal changes waiting for the consumer.
const SIGNAL_QUEUE: usize = 1024;

/// Least time between two warnings about events dropped as late.
const LATE_WARNING_INTERVAL: Duration = Duration::from_secs(60);

pub struct SignalOutput {
    consumer: Option<JoinHandle<()>>,
    ticker: Option<JoinHandle<()>>,
    queues: Vec<SendingQueue>,
}

impl SignalOutput {
    /// Starts the exporters of the `signals` pipelines and the consumer that feeds
    /// them; returns the sink the correlators emit into. The consumer ends when every
    /// copy of the sink is dropped. Signal changes queued in memory count in `memory`.
    pub fn start(
        config: &Config,
        telemetry: &Arc<SelfTelemetry>,
        exporters: &Exporters,
        memory: &MemoryAccount,
        abort_exports: &CancellationToken,
    ) -> Result<(Self, SignalSink), FieldError> {
        let (sender, receiver) = mpsc::channel(SIGNAL_QUEUE);
        let dropped = telemetry.signals_dropped.clone();
        let sink: SignalSink = Arc::new(move |signals: Vec<Signal>| {
            for signal in signals {
                if sender.try_send(signal).is_err() {
                    dropped.inc();
                }
            }
        });
        let mut outputs = Vec::new();
        let mut queues = Vec::new();
        for (pipeline, name) in config.signal_exporters() {
            let metrics = telemetry.signal_queue(name, pipeline);
            let (output, queue) = exporters.start::<SignalBatch>(QueueFor {
                exporter: name,
                pipeline,
                metrics,
                memory,
                abort: abort_exports.clone(),
            })?;
            outputs.push(output);
            queues.push(queue);
        }
        let consumer = tokio::spawn(consume(receiver, outputs, Arc::clone(telemetry)));
        let output = Self {
            consumer: Some(consumer),
            ticker: None,
            queues,
        };
        Ok((output, sink))
    }

    /// Starts the wall-clock ticker of the correlators, until `stop_ticking`.
    pub fn start_ticking(
        &mut self,
        correlators: BTreeMap<String, SharedCorrelator>,
        telemetry: &Arc<SelfTelemetry>,
        stop_ticking: CancellationToken,
    ) {
        let ticker = tick(
            Ticker::new(correlators),
            Arc::clone(telemetry),
            stop_ticking,
        );
        self.ticker = Some(tokio::spawn(ticker));
    }

    /// Polls for a task of the signal output that panicked (the consumer, the ticker,
    /// a queue consumer of a signals exporter): ready with what it was and its error.
    /// The consumer ends by itself when no correlator emits: that loses nothing.
    pub fn poll_panicked(&mut self, cx: &mut Context<'_>) -> Poll<(String, JoinError)> {
        let tasks = [
            ("the signal output", &mut self.consumer),
            ("the correlators' ticker", &mut self.ticker),
        ];
        for (name, slot) in tasks {
            let Some(handle) = slot.as_mut() else {
                continue;
            };
            if let Poll::Ready(ended) = Pin::new(handle).poll(cx) {
                *slot = None;
                if let Err(error) = ended
                    && error.is_panic()
                {
                    return Poll::Ready((name.to_string(), error));
                }
            }
        }
        for queue in &mut self.queues {
            if let Poll::Ready(error) = queue.poll_panicked(cx) {
                let task = format!("exporter {} of the signals", queue.exporter());
                return Poll::Ready((task, error));
            }
        }
        Poll::Pending
    }

    /// Waits for the last signals to be delivered; call after the correlators were
    /// dropped and the ticker was told to stop. Can be abandoned and called again.
    pub async fn finish(&mut self) {
        if let Some(ticker) = self.ticker.as_mut() {
            let _ = ticker.await;
            self.ticker = None;
        }
        if let Some(consumer) = self.consumer.as_mut() {
            let _ = consumer.await;
            self.consumer = None;
        }
        for queue in &mut self.queues {
            queue.join().await;
        }
    }
}

async fn consume(
    mut receiver: mpsc::Receiver<Signal>,
    outputs: Vec<QueueSender<SignalBatch>>,
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
            SignalState::Resolved | SignalState::HandedOver => {
                firing.remove(&signal.id);
            }
            SignalState::Firing => {}
        }
        let batch = SignalBatch(vec![signal]);
        for output in &outputs {
            // A queue only refuses once it has shut down, which happens after this task.
            let _ = output.send(batch.clone()).await;
        }
    }
}

/// When to warn about late events: at the first drop, then at most once a
/// [`LATE_WARNING_INTERVAL`], with the events dropped since the last warning.
#[derive(Debug, Default)]
struct LateWarning {
    warned_total: u64,
    warned_at: Option<Instant>,
}

impl LateWarning {
    fn due(&mut self, total: u64, now: Instant) -> Option<u64> {
        let since = total.saturating_sub(self.warned_total);
        let quiet = self
            .warned_at
            .is_none_or(|at| now.duration_since(at) >= LATE_WARNING_INTERVAL);
        if since == 0 || !quiet {
            return None;
        }
        self.warned_total = total;
        self.warned_at = Some(now);
        Some(since)
    }
}

/// Brings a counter up to a total the correlator keeps.
fn catch_up(counter: &Counter, total: u64) {
    counter.inc_by(total.saturating_sub(counter.get()));
}

/// Ticks the correlators every [`TICK_INTERVAL`] of the wall clock until `stop`, and
/// reports their figures after each tick.
async fn tick(ticker: Ticker, telemetry: Arc<SelfTelemetry>, stop: CancellationToken) {
    let mut interval = tokio::time::interval(TICK_INTERVAL);
    let mut late_warnings: BTreeMap<&str, LateWarning> = BTreeMap::new();
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = stop.cancelled() => return,
        }
        for (id, stats) in ticker.tick(now_unix_nanos()) {
            let warning = late_warnings.entry(id).or_default();
            report(id, &stats, &telemetry, warning);
        }
    }
}

/// A correlator's figures in self-telemetry, and a warning about late events when due.
fn report(id: &str, stats: &CorrelatorStats, telemetry: &SelfTelemetry, warning: &mut LateWarning) {
    let labels = vec![("processor".to_string(), id.to_string())];
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
    if let Some(dropped) = warning.due(stats.late_events_dropped, Instant::now()) {
        tracing::warn!(
            processor = %id,
            dropped,
            "events older than the correlator's lateness were dropped; raise `lateness` if the senders deliver late, or read captured files with `opscope analyze`, which takes them in any order"
        );
    }
    catch_up(
        &telemetry.correlator_future_events.get_or_create(&labels),
        stats.future_events_dropped,
    );
    if stats.journal != JournalStats::default() {
        let journal = &stats.journal;
        telemetry
            .correlator_journal_bytes
            .get_or_create(&labels)
            .set(i64::try_from(journal.bytes).unwrap_or(i64::MAX));
        for (reason, count) in [("full", journal.dropped_for_size), ("io", journal.failed)] {
            let labels = vec![
                ("processor".to_string(), id.to_string()),
                ("reason".to_string(), reason.to_string()),
            ];
            catch_up(
                &telemetry.correlator_journal_lost.get_or_create(&labels),
                count,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_events_are_warned_about_at_most_once_a_minute_with_the_count_since() {
        let start = Instant::now();
        let mut warning = LateWarning::default();
        assert_eq!(warning.due(0, start), None);
        assert_eq!(warning.due(3, start), Some(3));
        assert_eq!(warning.due(10, start + Duration::from_secs(30)), None);
        assert_eq!(warning.due(12, start + Duration::from_secs(60)), Some(9));
        assert_eq!(warning.due(12, start + Duration::from_secs(200)), None);
        assert_eq!(warning.due(13, start + Duration::from_secs(201)), Some(1));
    }
}
