//! The `prometheus_scrape` receiver: operator metrics endpoints scraped in the
//! Prometheus text format or OpenMetrics and turned into OTLP metrics.

pub mod config;
pub(crate) mod exposition;
#[cfg(test)]
mod fuzz_tests;
pub(crate) mod otlp_metrics;
mod pool;
mod scraper;
pub(crate) mod series_starts;
mod targets;

use std::sync::Arc;

use tokio::task::JoinSet;

pub use config::PrometheusScrapeConfig;

use super::{ReceiverContext, ReceiverError};
use pool::TargetSources;
use scraper::ScrapeSettings;

/// Spawns the scrape loops into `tasks`; they end after `shutdown` fires. A client
/// that cannot be built (TLS files gone since the config was checked) is logged and
/// leaves the receiver idle.
pub async fn start(
    config: &PrometheusScrapeConfig,
    context: ReceiverContext,
    tasks: &mut JoinSet<()>,
) -> Result<(), ReceiverError> {
    let settings = match ScrapeSettings::new(config, &context) {
        Ok(settings) => Arc::new(settings),
        Err(error) => {
            tracing::error!(receiver = %context.id, %error, "cannot build the scrape client; not scraping");
            return Ok(());
        }
    };
    tracing::info!(receiver = %context.id, targets = config.targets.len(),
        targets_file = ?config.targets_file, "scraping");
    let sources = TargetSources::new(config);
    tasks.spawn(pool::run(sources, settings, context.shutdown.clone()));
    Ok(())
}
