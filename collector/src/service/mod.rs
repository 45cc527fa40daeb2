//! The running agent: assembled from a config, ready once every part runs (its
//! listeners' addresses then written where the caller asked), and shut down in
//! order when the caller says stop, or with an error when one of its tasks ends
//! unexpectedly. Assembling is `assembly.rs`'s, the agent's own endpoints
//! `exposition.rs`'s, watching its tasks `supervision.rs`'s, the order of the
//! shutdown `shutdown.rs`'s.

mod assembly;
mod exposition;
mod shutdown;
mod supervision;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use opscope_model::config::FieldError;
use tokio::sync::oneshot;

use crate::config::Config;
use crate::listening::Listening;
use crate::receivers::ReceiverError;
use crate::self_telemetry::SelfTelemetry;
use assembly::Agent;
pub use supervision::{Ending, TaskEnd};

/// Why the agent could not start.
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
    /// A task ended while the agent ran: it stopped rather than take data no task
    /// would carry.
    #[error("{0}; opscope stopped")]
    TaskEnded(TaskEnd),
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

/// Runs the agent until `stop` completes, then shuts down gracefully; or until one
/// of its tasks ends unexpectedly, then shuts down and returns the error naming it.
pub async fn run(
    config: Config,
    options: RunOptions,
    stop: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    let telemetry = Arc::new(SelfTelemetry::new());
    let listening = Listening::default();
    let agent = assembly::assemble(&config, &telemetry, &listening).await?;
    let shutdown_timeout = config.service.shutdown_timeout;
    serve(agent, &listening, options, stop, shutdown_timeout).await
}

/// Runs an assembled agent: ready, then watched until `stop` or a task's end.
async fn serve(
    mut agent: Agent,
    listening: &Listening,
    options: RunOptions,
    stop: impl Future<Output = ()>,
    shutdown_timeout: Duration,
) -> Result<(), ServiceError> {
    agent.readiness.set(true);
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

    let ended = tokio::select! {
        () = stop => None,
        end = agent.task_ended() => Some(end),
    };
    if let Some(end) = &ended {
        tracing::error!(task = %end.task, "{end}: opscope stops rather than take data no task would carry");
    }
    agent.shut_down(shutdown_timeout, ended.is_some()).await;
    match ended {
        Some(end) => Err(ServiceError::TaskEnded(end)),
        None => Ok(()),
    }
}
