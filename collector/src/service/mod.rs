//! The running agent: assembled from a config, ready once every part runs (its
//! listeners' addresses then written where the caller asked), and shut down in
//! order when the caller says stop. Assembling is `assembly.rs`'s, the agent's own
//! endpoints `exposition.rs`'s, the order of the shutdown `shutdown.rs`'s.

mod assembly;
mod exposition;
mod shutdown;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use opscope_model::config::FieldError;
use tokio::sync::oneshot;

use crate::config::Config;
use crate::listening::Listening;
use crate::receivers::ReceiverError;
use crate::self_telemetry::SelfTelemetry;

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
    let agent = assembly::assemble(&config, &telemetry, &listening).await?;
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

    stop.await;
    agent.shut_down(config.service.shutdown_timeout).await;
    Ok(())
}
