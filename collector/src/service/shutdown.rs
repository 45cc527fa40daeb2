//! Shutting the agent down in order: receivers stop (within half the shutdown
//! timeout), the pipelines drain tier by tier and their queues deliver, the
//! correlators' last signals go out, and what could not be delivered in time is
//! said, per exporter and pipeline. The running receivers and pipelines it stops are
//! kept here, each able to say when one of its tasks ended early (`supervision.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use opscope_exporters::SendingQueue;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use super::assembly::Agent;
use super::supervision::{Ending, TaskEnd};
use crate::self_telemetry::SelfTelemetry;

/// How long, after the shutdown timeout, tasks get to count what they drop.
const LAST_GRACE: Duration = Duration::from_secs(2);

impl Agent {
    /// Stops receiving, drains the pipelines and delivers what is queued within
    /// `shutdown_timeout`; what is left then is dropped (or kept, in a durable queue)
    /// and counted. After a task ended unexpectedly (`task_ended`), what it held is
    /// lost uncounted, and the report says so.
    pub(super) async fn shut_down(self, shutdown_timeout: Duration, task_ended: bool) {
        let Agent {
            readiness,
            stops,
            mut receiving,
            mut draining,
            shared,
            handovers,
            exporters,
            mut signals,
            mut servers,
            telemetry,
        } = self;
        tracing::info!("shutting down: receivers stop, queued data is delivered");
        readiness.set(false);
        stops.receiving.cancel();
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
        stops.inputs.cancel();
        let timed_out = tokio::time::timeout_at(deadline, draining.finish())
            .await
            .is_err();
        if timed_out {
            tracing::error!(timeout = ?shutdown_timeout,
                "shutdown timeout reached; what is not delivered yet is dropped (or kept, in a durable queue)");
            // Consumers now count what they hold as dropped, which frees the pipelines.
            stops.exports.cancel();
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
        stops.ticking.cancel();
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
            stops.exports.cancel();
            if tokio::time::timeout(LAST_GRACE, signals.finish())
                .await
                .is_err()
            {
                tracing::error!("signal exporters did not finish after the shutdown timeout");
            }
        }
        report_dropped(
            &telemetry,
            timed_out || stops.exports.is_cancelled(),
            task_ended,
        );
        stops.servers.cancel();
        while servers.join_next().await.is_some() {}
        tracing::info!("opscope stopped");
        // The signal output and the exporters go last: a Prometheus exporter serves
        // until then.
        drop(signals);
        drop(exporters);
    }
}

/// The running receivers: one task each, named by the receiver's id.
#[derive(Default)]
pub(super) struct Receiving {
    tasks: JoinSet<ReceiverEnd>,
    names: HashMap<tokio::task::Id, String>,
}

/// How the tasks of one receiver ended.
enum ReceiverEnd {
    /// It started none: a receiver that cannot run here (the kernel probe) stays idle.
    Idle,
    /// Every one ended: at shutdown, or by itself.
    Ended,
    /// One panicked; the others were stopped with it.
    Panicked(JoinError),
}

impl Receiving {
    /// Runs the tasks a receiver started as one task, named `id`.
    pub(super) fn add(&mut self, id: &str, mut tasks: JoinSet<()>) {
        let handle = self.tasks.spawn(async move {
            if tasks.is_empty() {
                return ReceiverEnd::Idle;
            }
            while let Some(ended) = tasks.join_next().await {
                if let Err(error) = ended
                    && error.is_panic()
                {
                    return ReceiverEnd::Panicked(error);
                }
            }
            ReceiverEnd::Ended
        });
        self.names.insert(handle.id(), id.to_string());
    }

    /// Polls for a receiver that ended while the agent runs: one of its tasks
    /// panicked, or all ended by themselves (a receiver stops only at shutdown).
    pub(super) fn poll_ended(&mut self, cx: &mut Context<'_>) -> Poll<TaskEnd> {
        while let Poll::Ready(Some(ended)) = self.tasks.poll_join_next_with_id(cx) {
            let (id, ending) = match ended {
                Ok((id, ReceiverEnd::Idle)) => {
                    self.names.remove(&id);
                    continue;
                }
                Ok((id, ReceiverEnd::Ended)) => (id, Ending::Returned),
                Ok((id, ReceiverEnd::Panicked(error))) => (id, Ending::panicked(error)),
                Err(error) => (error.id(), Ending::panicked(error)),
            };
            let name = self.names.remove(&id).unwrap_or_default();
            return Poll::Ready(TaskEnd::new(format!("receiver {name}"), ending));
        }
        Poll::Pending
    }

    /// Waits until `deadline` for every receiver to stop; aborts those still running
    /// then and returns their ids, sorted. A receiver whose work is stuck on a blocking
    /// thread leaves that thread behind.
    async fn stop(&mut self, deadline: tokio::time::Instant) -> Vec<String> {
        let _ = tokio::time::timeout_at(deadline, async {
            while let Some(ended) = self.tasks.join_next_with_id().await {
                let id = match ended {
                    Ok((id, _)) => id,
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

/// Says what shutdown dropped, per exporter and pipeline, or that it dropped nothing;
/// never the latter after a task ended unexpectedly, whose data no count holds.
fn report_dropped(telemetry: &SelfTelemetry, cut_short: bool, task_ended: bool) {
    let dropped = telemetry.dropped_at_shutdown();
    for queue in &dropped {
        tracing::error!(exporter = %queue.exporter, pipeline = %queue.pipeline, items = queue.count,
            "dropped at shutdown: {} {} not delivered", queue.count, queue.item);
    }
    if task_ended {
        tracing::error!(
            "a task of the agent ended unexpectedly: what it held then is lost and not counted above"
        );
    } else if dropped.is_empty() && cut_short {
        tracing::info!("the shutdown timeout cut sending short, but nothing in memory was dropped");
    } else if dropped.is_empty() {
        tracing::info!("everything queued was delivered");
    }
}

/// Everything that has to finish, in order, for a clean shutdown once the receivers
/// stopped: the pipelines receivers feed and their queues, then the pipelines that
/// connectors feed (whose inputs close only then) and theirs.
#[derive(Default)]
pub(super) struct Draining {
    pub upstream: Tier,
    pub connected: Tier,
    /// Closes the inputs of the pipelines that connectors feed.
    pub close_connected: CancellationToken,
}

/// A pipeline ready to run, until its inputs close and it drained.
pub(super) type PipelineTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Pipelines and the sending queues they feed, each queue with its pipeline's id.
#[derive(Default)]
pub(super) struct Tier {
    pipelines: JoinSet<()>,
    names: HashMap<tokio::task::Id, String>,
    queues: Vec<(String, SendingQueue)>,
}

impl Tier {
    /// Runs pipeline `id` and keeps its queues.
    pub(super) fn add(&mut self, id: &str, (task, queues): (PipelineTask, Vec<SendingQueue>)) {
        let handle = self.pipelines.spawn(task);
        self.names.insert(handle.id(), id.to_string());
        (self.queues).extend(queues.into_iter().map(|queue| (id.to_string(), queue)));
    }

    /// Polls for a pipeline or a queue consumer that panicked. A pipeline that ends by
    /// itself lost its every input (its receivers could not run), which loses nothing.
    pub(super) fn poll_panicked(&mut self, cx: &mut Context<'_>) -> Poll<TaskEnd> {
        while let Poll::Ready(Some(ended)) = self.pipelines.poll_join_next(cx) {
            if let Err(error) = ended
                && error.is_panic()
            {
                let name = self.names.get(&error.id()).cloned().unwrap_or_default();
                let task = format!("pipeline {name}");
                return Poll::Ready(TaskEnd::new(task, Ending::panicked(error)));
            }
        }
        for (pipeline, queue) in &mut self.queues {
            if let Poll::Ready(error) = queue.poll_panicked(cx) {
                let task = format!("exporter {} of pipeline {pipeline}", queue.exporter());
                return Poll::Ready(TaskEnd::new(task, Ending::panicked(error)));
            }
        }
        Poll::Pending
    }

    async fn finish(&mut self) {
        while self.pipelines.join_next().await.is_some() {}
        for (_, queue) in &mut self.queues {
            queue.join().await;
        }
    }

    async fn abort(&mut self) {
        self.pipelines.abort_all();
        while self.pipelines.join_next().await.is_some() {}
    }
}

impl Draining {
    /// Polls for a pipeline or a queue consumer of either tier that panicked.
    pub(super) fn poll_panicked(&mut self, cx: &mut Context<'_>) -> Poll<TaskEnd> {
        match self.upstream.poll_panicked(cx) {
            Poll::Pending => self.connected.poll_panicked(cx),
            ready => ready,
        }
    }

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

#[cfg(test)]
mod tests {
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
