//! The `alertmanager` exporter: each signal change becomes an Alertmanager alert, firing
//! alerts are re-sent every `resend_interval` so that Alertmanager keeps them.

mod alert;
mod client;
pub mod config;
mod state;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate};
use tokio::sync::Mutex;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::{CancellationToken, DropGuard};

pub use config::AlertmanagerConfig;

use self::alert::Alert;
use self::client::AlertPoster;
use self::state::FiringAlerts;
use crate::batch::SignalBatch;
use crate::exporter::{Delivery, ExportError, Exporter};

/// Most firing signals remembered for re-sending (and resolved ones remembered to
/// keep late updates from reviving them).
const MAX_FIRING_ALERTS: usize = 10_000;

pub struct AlertmanagerExporter {
    poster: Arc<AlertPoster>,
    /// Held across each post, so that posts leave in the order their changes were
    /// taken: a re-send cannot overtake the resolution of what it re-sends.
    firing_alerts: Arc<Mutex<FiringAlerts>>,
    generator_url: Option<String>,
    /// Stops the re-send task when the exporter is dropped.
    _resend: DropGuard,
}

impl AlertmanagerExporter {
    /// Validates the config and starts the re-send task on the current tokio runtime.
    pub fn new(name: &str, config: &AlertmanagerConfig) -> Result<Self, FieldError> {
        config.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            FieldError::new("resend_interval", "the re-send task needs a tokio runtime")
        })?;
        let poster = Arc::new(AlertPoster::new(config)?);
        let firing_alerts = Arc::new(Mutex::new(FiringAlerts::new(name, MAX_FIRING_ALERTS)));
        let stop = CancellationToken::new();
        let resend = resend_firing(
            name.to_string(),
            poster.clone(),
            firing_alerts.clone(),
            config.resend_interval,
        );
        runtime.spawn(stop.clone().run_until_cancelled_owned(resend));
        Ok(Self {
            poster,
            firing_alerts,
            generator_url: config.generator_url.clone(),
            _resend: stop.drop_guard(),
        })
    }
}

impl Exporter<SignalBatch> for AlertmanagerExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        let mut firing_alerts = self.firing_alerts.lock().await;
        let mut to_post = Vec::new();
        for signal in &batch.0 {
            let alert = Alert::of(signal, self.generator_url.as_deref());
            to_post.extend(firing_alerts.apply(signal, alert));
        }
        let to_post = latest_per_label_set(to_post);
        if !to_post.is_empty() {
            self.poster.post(&to_post).await?;
        }
        Ok(Delivery::default())
    }
}

/// The last alert of each label set: a batch holding several changes of one signal
/// tells Alertmanager only where it ended up.
fn latest_per_label_set(alerts: Vec<Alert>) -> Vec<Alert> {
    let mut seen = HashSet::new();
    let mut latest: Vec<Alert> = alerts
        .into_iter()
        .rev()
        .filter(|alert| seen.insert(alert.labels.clone()))
        .collect();
    latest.reverse();
    latest
}

/// Sends the firing alerts again every `interval`, for as long as it runs.
async fn resend_firing(
    exporter: String,
    poster: Arc<AlertPoster>,
    firing_alerts: Arc<Mutex<FiringAlerts>>,
    interval: Duration,
) {
    let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let held = firing_alerts.lock().await;
        let firing = held.to_resend();
        if firing.is_empty() {
            continue;
        }
        if let Err(error) = poster.post(&firing).await {
            tracing::warn!(%exporter, alerts = firing.len(), %error,
                "re-sending firing alerts failed; trying again in one resend_interval");
        }
    }
}
