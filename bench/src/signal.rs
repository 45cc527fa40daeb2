//! The three OTLP signals a run can carry, and one generated request of any of them.

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::prost::Message;
use opscope_workload::OperatorWorkload;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Signal {
    Traces,
    Logs,
    Metrics,
}

impl Signal {
    /// What one item of the signal is called in reports: `spans`, `log_records`,
    /// `metric_points`.
    pub fn unit(self) -> &'static str {
        match self {
            Signal::Traces => "spans",
            Signal::Logs => "log_records",
            Signal::Metrics => "metric_points",
        }
    }

    /// The OTLP/HTTP path of the signal.
    pub fn http_path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Logs => "/v1/logs",
            Signal::Metrics => "/v1/metrics",
        }
    }
}

/// One export request and the number of items in it.
#[derive(Debug, Clone)]
pub enum Payload {
    Traces(ExportTraceServiceRequest),
    Logs(ExportLogsServiceRequest),
    Metrics(ExportMetricsServiceRequest),
}

impl Payload {
    /// The next request of `signal` from `workload`, of about `batch` items, stamped
    /// `now` (the reconcile end, record and point times), and its item count.
    pub fn generate(
        workload: &mut OperatorWorkload,
        signal: Signal,
        batch: usize,
        now: u64,
    ) -> (Self, usize) {
        match signal {
            Signal::Traces => {
                let (request, count) = workload.traces(batch, now);
                (Payload::Traces(request), count)
            }
            Signal::Logs => {
                let (request, count) = workload.logs(batch, now);
                (Payload::Logs(request), count)
            }
            Signal::Metrics => {
                let (request, count) = workload.metrics(batch, now);
                (Payload::Metrics(request), count)
            }
        }
    }

    pub fn encode_to_vec(&self) -> Vec<u8> {
        match self {
            Payload::Traces(request) => request.encode_to_vec(),
            Payload::Logs(request) => request.encode_to_vec(),
            Payload::Metrics(request) => request.encode_to_vec(),
        }
    }
}
