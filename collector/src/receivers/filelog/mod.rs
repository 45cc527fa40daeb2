//! The `filelog` receiver: tails container log files (CRI and docker json-file, by
//! default the kubelet's `/var/log/pods`) through rotations and restarts into OTLP logs.

pub mod checkpoint;
pub mod config;
pub mod cri;
mod discovery;
#[cfg(test)]
mod fuzz_tests;
mod identity;
pub(crate) mod join;
mod open;
pub mod pod;
pub(crate) mod reader;
pub mod record;
mod tail;
mod tailer;
mod watch;

use std::time::Duration;

use opscope_model::TelemetryKind;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use config::{FilelogConfig, StartAt};

use super::ReceiverContext;
use crate::extensions::health_check::Progress;
use checkpoint::{CheckpointError, CheckpointStore};
use tailer::{Outlet, Round, Tailer};

/// The receiver cannot start: its `storage` is unusable.
#[derive(Debug, thiserror::Error)]
#[error("receivers.{receiver}.storage: {source}")]
pub struct FilelogError {
    pub receiver: String,
    pub source: CheckpointError,
}

/// Reads the checkpoint (a damaged one fails the start) and spawns the tailing loop
/// into `tasks`; it ends when `shutdown` fires, after writing the last checkpoint.
pub async fn start(
    config: &FilelogConfig,
    context: ReceiverContext,
    tasks: &mut JoinSet<()>,
) -> Result<(), FilelogError> {
    let (store, previous) = match &config.storage {
        Some(directory) => {
            CheckpointStore::open(directory, &context.id).map_err(|source| FilelogError {
                receiver: context.id.clone(),
                source,
            })?
        }
        None => (CheckpointStore::in_memory(), None),
    };
    let outlet = Outlet {
        consumer: context.consumers.logs,
        metrics: context
            .telemetry
            .receiver(TelemetryKind::Logs, &context.id, "filelog"),
    };
    tracing::info!(receiver = %context.id, include = ?config.include, resumed = previous.is_some(), "tailing files");
    let tailer = Tailer::new(&context.id, config, store, previous, outlet);
    let stall_after = STALL_AFTER.max(config.poll_interval * 20);
    let progress = context.readiness.watch(&context.id, stall_after);
    tasks.spawn(run(
        tailer,
        context.shutdown,
        config.poll_interval,
        progress,
    ));
    Ok(())
}

/// A round of file work that has not returned after this long (or 20 poll intervals)
/// is reported: in the log, and by `/readyz`.
const STALL_AFTER: Duration = Duration::from_secs(30);

/// Rounds of blocking file work on the blocking pool, back to back while files hold
/// more, else one per poll interval.
async fn run(
    mut tailer: Tailer,
    shutdown: CancellationToken,
    poll_interval: Duration,
    progress: Progress,
) {
    let woken = tailer.woken();
    loop {
        let token = shutdown.clone();
        progress.begin();
        let mut working = tokio::task::spawn_blocking(move || {
            let round = tailer.round(&token);
            (tailer, round)
        });
        let finished = tokio::select! {
            finished = &mut working => finished,
            () = tokio::time::sleep(progress.stall_after()) => {
                tracing::error!(receiver = %progress.receiver(), after = ?progress.stall_after(),
                    "a round of file work has not returned: no file is read until it does");
                let finished = working.await;
                tracing::warn!(receiver = %progress.receiver(), "the round of file work returned");
                finished
            }
        };
        progress.end();
        let round;
        (tailer, round) = match finished {
            Ok(finished) => finished,
            Err(err) => {
                tracing::error!(%err, "the filelog receiver failed; it stops");
                return;
            }
        };
        let wait = match round {
            Round::Stop => break,
            Round::More => Duration::ZERO,
            Round::Idle => poll_interval,
        };
        let arrived = async {
            match &woken {
                Some(woken) => woken.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(wait) => {}
            () = arrived => {}
        }
    }
    if let Err(err) = tokio::task::spawn_blocking(move || tailer.stop()).await {
        tracing::error!(%err, "the filelog receiver failed to write its last checkpoint");
    }
}
