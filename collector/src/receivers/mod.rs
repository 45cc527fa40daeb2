//! Receivers: where data enters opscope. Each receiver type is a folder; `start`
//! binds a configured receiver and connects it to the pipelines that list it.

pub mod auth;
mod body_memory;
pub mod decode_budget;
pub mod filelog;
mod http_body;
pub mod input_limits;
pub mod k8s_audit;
pub mod otlp;
pub mod prometheus_scrape;
mod server;

use std::sync::Arc;

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::ReceiverConfig;
use crate::consumer::Consumer;
use crate::extensions::health_check::Readiness;
use crate::self_telemetry::SelfTelemetry;

/// The pipelines one receiver feeds, per signal type.
#[derive(Default, Clone)]
pub struct Consumers {
    pub traces: Consumer<ExportTraceServiceRequest>,
    pub logs: Consumer<ExportLogsServiceRequest>,
    pub metrics: Consumer<ExportMetricsServiceRequest>,
}

/// What every receiver gets to start with.
pub struct ReceiverContext {
    pub id: String,
    pub consumers: Consumers,
    pub telemetry: Arc<SelfTelemetry>,
    /// Fires when the receiver must stop taking data.
    pub shutdown: CancellationToken,
    /// Where a receiver that works in rounds reports that it is stuck in one.
    pub readiness: Readiness,
}

#[derive(Debug, thiserror::Error)]
pub enum ReceiverError {
    #[error("receivers.{receiver}: cannot listen on {address}: {source}")]
    Bind {
        receiver: String,
        address: String,
        source: std::io::Error,
    },
    #[error("receivers.{receiver}.{at}{source}")]
    Security {
        receiver: String,
        at: &'static str,
        source: opscope_model::config::FieldError,
    },
    #[error(transparent)]
    Filelog(#[from] filelog::FilelogError),
}

/// Binds the receiver's listeners (so a port in use fails the start) and spawns
/// its servers into `tasks`; they end after `shutdown` fires and in-flight
/// requests are answered.
pub async fn start(
    config: &ReceiverConfig,
    context: ReceiverContext,
    tasks: &mut JoinSet<()>,
) -> Result<(), ReceiverError> {
    match config {
        ReceiverConfig::Otlp(otlp) => otlp::start(otlp, context, tasks).await,
        ReceiverConfig::Filelog(filelog) => Ok(filelog::start(filelog, context, tasks).await?),
        ReceiverConfig::K8sAudit(audit) => k8s_audit::start(audit, context, tasks).await,
        ReceiverConfig::PrometheusScrape(scrape) => {
            prometheus_scrape::start(scrape, context, tasks).await
        }
    }
}
