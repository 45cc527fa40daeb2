//! A null OTLP/gRPC sink: it counts the spans, log records and metric points it is
//! sent and how long each took from the load generator's send (the time stamped in
//! the data) to arrival here, and keeps nothing else.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::metrics::v1::metric::Data;
use opscope_testkit::otlp_grpc::{ExportHandler, export_services};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::transport::server::TcpIncoming;

use opscope_model::timestamp::now_unix_nanos;

const MAX_MESSAGE_SIZE: usize = 256 * 1024 * 1024;
/// Latency samples kept: enough for a percentile, bounded for long runs.
const MAX_LATENCY_SAMPLES: usize = 2_000_000;
/// A stamp further back than this is not a send time of this run.
const MAX_PLAUSIBLE_LATENCY_NANOS: u64 = 3_600 * 1_000_000_000;

/// What the sink has received so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounts {
    pub spans: u64,
    pub log_records: u64,
    pub metric_points: u64,
    /// Unix nanoseconds of the last request's arrival (0 before any).
    pub last_arrival: u64,
}

#[derive(Default)]
struct Recorder {
    spans: AtomicU64,
    log_records: AtomicU64,
    metric_points: AtomicU64,
    last_arrival: AtomicU64,
    latencies_micros: Mutex<Vec<u32>>,
}

impl Recorder {
    /// Counts `items` arrived now, and the latencies of the send times among them.
    fn record(&self, counter: &AtomicU64, items: u64, sent_at: impl Iterator<Item = u64>) {
        let arrival = now_unix_nanos();
        counter.fetch_add(items, Ordering::Relaxed);
        self.last_arrival.fetch_max(arrival, Ordering::Relaxed);
        let mut latencies = self
            .latencies_micros
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for sent in sent_at.filter(|sent| *sent > 0) {
            let latency = arrival.saturating_sub(sent);
            if latency < MAX_PLAUSIBLE_LATENCY_NANOS && latencies.len() < MAX_LATENCY_SAMPLES {
                latencies.push(u32::try_from(latency / 1_000).unwrap_or(u32::MAX));
            }
        }
    }
}

impl ExportHandler for Recorder {
    async fn traces(&self, request: ExportTraceServiceRequest) -> Result<(), Status> {
        let spans = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans);
        // A trace's root span ends when the generator sends it.
        let roots = spans
            .clone()
            .filter(|s| s.parent_span_id.is_empty())
            .map(|s| s.end_time_unix_nano);
        self.record(&self.spans, spans.count() as u64, roots);
        Ok(())
    }

    async fn logs(&self, request: ExportLogsServiceRequest) -> Result<(), Status> {
        let records = request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .flat_map(|s| &s.log_records);
        self.record(
            &self.log_records,
            records.clone().count() as u64,
            records.map(|r| r.time_unix_nano),
        );
        Ok(())
    }

    async fn metrics(&self, request: ExportMetricsServiceRequest) -> Result<(), Status> {
        let mut times = Vec::new();
        for metric in request
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
        {
            match &metric.data {
                Some(Data::Sum(sum)) => {
                    times.extend(sum.data_points.iter().map(|p| p.time_unix_nano))
                }
                Some(Data::Gauge(gauge)) => {
                    times.extend(gauge.data_points.iter().map(|p| p.time_unix_nano))
                }
                Some(Data::Histogram(histogram)) => {
                    times.extend(histogram.data_points.iter().map(|p| p.time_unix_nano))
                }
                _ => {}
            }
        }
        self.record(&self.metric_points, times.len() as u64, times.into_iter());
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot listen on 127.0.0.1: {0}")]
    Bind(std::io::Error),
}

/// The running sink; stopped on drop.
pub struct NullSink {
    recorder: Arc<Recorder>,
    addr: SocketAddr,
    stop: CancellationToken,
}

impl NullSink {
    /// Serves the three OTLP/gRPC services on a free loopback port (gzip and zstd
    /// accepted), on the current Tokio runtime.
    pub async fn start() -> Result<Self, SinkError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(SinkError::Bind)?;
        let addr = listener.local_addr().map_err(SinkError::Bind)?;
        let recorder = Arc::new(Recorder::default());
        let stop = CancellationToken::new();
        let server = export_services(Arc::clone(&recorder), MAX_MESSAGE_SIZE)
            .serve_with_incoming_shutdown(
                TcpIncoming::from(listener),
                stop.clone().cancelled_owned(),
            );
        tokio::spawn(server);
        Ok(Self {
            recorder,
            addr,
            stop,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn counts(&self) -> SinkCounts {
        let r = &self.recorder;
        SinkCounts {
            spans: r.spans.load(Ordering::Relaxed),
            log_records: r.log_records.load(Ordering::Relaxed),
            metric_points: r.metric_points.load(Ordering::Relaxed),
            last_arrival: r.last_arrival.load(Ordering::Relaxed),
        }
    }

    /// The latencies recorded since the last call, in microseconds, sorted.
    pub fn take_latencies(&self) -> Vec<u32> {
        let mut latencies = std::mem::take(
            &mut *self
                .recorder
                .latencies_micros
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        latencies.sort_unstable();
        latencies
    }
}

impl Drop for NullSink {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The `percent` percentile of sorted `values` (nearest rank), if any.
pub fn percentile(sorted: &[u32], percent: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((percent / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

impl SinkCounts {
    /// The count of the items of `signal`.
    pub fn items(&self, signal: crate::Signal) -> u64 {
        match signal {
            crate::Signal::Traces => self.spans,
            crate::Signal::Logs => self.log_records,
            crate::Signal::Metrics => self.metric_points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&values, 50.0), Some(50));
        assert_eq!(percentile(&values, 99.0), Some(99));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
