//! Receivers: where data enters opscope. Each receiver type is a folder whose
//! `start` binds a configured receiver and hands what it takes to the pipelines
//! that list it (the service starts each from its config); what they share (the
//! server, authentication, request bodies and limits) is in `common/`.

pub mod common;
pub mod ebpf;
pub mod filelog;
pub mod k8s_audit;
pub mod k8s_objects;
pub mod otlp;
pub mod prometheus_scrape;

use std::sync::Arc;

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use tokio_util::sync::CancellationToken;

use crate::consumer::Consumer;
use crate::extensions::health_check::Readiness;
use crate::listening::Listening;
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
    /// Where a receiver that listens records the address it bound.
    pub listening: Listening,
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
    #[error("receivers.{receiver}: {message}")]
    Setup { receiver: String, message: String },
}
