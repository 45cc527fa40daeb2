//! The `health_check` extension: `GET /healthz` answers while the process runs,
//! `GET /readyz` once every receiver listens (and until shutdown begins), as long as
//! no receiver that works in rounds is stuck in one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use opscope_model::config::{FieldError, Validate};
use opscope_net::server_tls::ServerTlsConfig;
use serde::Deserialize;

use opscope_model::config::check_listen_address;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthCheckConfig {
    pub endpoint: String,
    /// Serve the probes over TLS (kubelet probes then need `scheme: HTTPS`).
    pub tls: Option<ServerTlsConfig>,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        Self {
            endpoint: "127.0.0.1:13133".into(),
            tls: None,
        }
    }
}

impl Validate for HealthCheckConfig {
    fn validate(&self) -> Result<(), FieldError> {
        check_listen_address(&self.endpoint).map_err(|m| FieldError::new("endpoint", m))?;
        self.tls.as_ref().map_or(Ok(()), ServerTlsConfig::validate)
    }
}

/// Whether the agent takes data; shared by the service, the receivers and the
/// health endpoints.
#[derive(Clone, Default)]
pub struct Readiness(Arc<ReadinessState>);

#[derive(Default)]
struct ReadinessState {
    ready: AtomicBool,
    watched: Mutex<Vec<Progress>>,
}

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.ready.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::SeqCst)
    }

    /// Watches the rounds of work of `receiver`: one that has not ended after
    /// `stall_after` makes the agent not ready.
    pub fn watch(&self, receiver: &str, stall_after: Duration) -> Progress {
        let progress = Progress(Arc::new(ProgressState {
            receiver: receiver.to_string(),
            stall_after,
            epoch: Instant::now(),
            busy_since_ms: AtomicU64::new(IDLE),
        }));
        if let Ok(mut watched) = self.0.watched.lock() {
            watched.push(progress.clone());
        }
        progress
    }

    /// Why the agent is not ready, if it is not.
    pub fn not_ready(&self) -> Option<String> {
        if !self.is_ready() {
            return Some("not ready".into());
        }
        let watched = self.0.watched.lock().ok()?;
        watched.iter().find_map(|progress| {
            let stalled = progress.stalled_for()?;
            Some(format!(
                "not ready: receiver {} has made no progress for {}s",
                progress.receiver(),
                stalled.as_secs()
            ))
        })
    }
}

/// `busy_since_ms` of a receiver between rounds.
const IDLE: u64 = u64::MAX;

/// When the round of work a receiver is in began, if it is in one.
#[derive(Clone)]
pub struct Progress(Arc<ProgressState>);

struct ProgressState {
    receiver: String,
    stall_after: Duration,
    epoch: Instant,
    /// Milliseconds from `epoch` to the start of the current round, or [`IDLE`].
    busy_since_ms: AtomicU64,
}

impl Progress {
    /// A round begins.
    pub fn begin(&self) {
        let state = &self.0;
        let since = u64::try_from(state.epoch.elapsed().as_millis()).unwrap_or(IDLE - 1);
        state.busy_since_ms.store(since, Ordering::SeqCst);
    }

    /// The round ended.
    pub fn end(&self) {
        self.0.busy_since_ms.store(IDLE, Ordering::SeqCst);
    }

    pub fn receiver(&self) -> &str {
        &self.0.receiver
    }

    /// How long a round may run before it counts as stuck.
    pub fn stall_after(&self) -> Duration {
        self.0.stall_after
    }

    /// How long the current round has run, once that is longer than `stall_after`.
    pub fn stalled_for(&self) -> Option<Duration> {
        let state = &self.0;
        let since = state.busy_since_ms.load(Ordering::SeqCst);
        if since == IDLE {
            return None;
        }
        let busy = state
            .epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(since));
        (busy > state.stall_after).then_some(busy)
    }
}

pub fn router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { (StatusCode::OK, "ok\n") }))
        .route("/readyz", get(ready))
        .with_state(readiness)
}

async fn ready(State(readiness): State<Readiness>) -> (StatusCode, String) {
    match readiness.not_ready() {
        None => (StatusCode::OK, "ready\n".into()),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_that_does_not_end_makes_the_agent_not_ready() {
        let readiness = Readiness::default();
        assert_eq!(readiness.not_ready().as_deref(), Some("not ready"));
        readiness.set(true);
        let progress = readiness.watch("filelog", Duration::from_millis(30));
        progress.begin();
        assert_eq!(readiness.not_ready(), None, "a round under way");
        std::thread::sleep(Duration::from_millis(60));
        assert!(progress.stalled_for().is_some());
        assert_eq!(
            readiness.not_ready().as_deref(),
            Some("not ready: receiver filelog has made no progress for 0s")
        );
        progress.end();
        assert_eq!(readiness.not_ready(), None, "the round ended");
    }
}
