//! The codec ceiling: prost decode and encode of the very requests the load
//! generator sends, in process, on one thread. A pipeline that receives and exports
//! OTLP does at least this per item, so no collector beats it on the same machine.

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::prost::{DecodeError, Message};
use opscope_workload::{OperatorWorkload, WorkloadConfig, WorkloadConfigError};

use crate::proc_stats::thread_cpu_seconds;
use crate::signal::{Payload, Signal};

/// Distinct requests cycled through, so that one request's cache warmth does not
/// flatter the figure.
const DISTINCT_REQUESTS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum CeilingError {
    #[error(transparent)]
    Workload(#[from] WorkloadConfigError),
    #[error("a generated request does not decode: {0}")]
    Decode(#[from] DecodeError),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceiling {
    pub items: u64,
    pub cpu_seconds: f64,
}

impl Ceiling {
    pub fn items_per_cpu_second(&self) -> f64 {
        self.items as f64 / self.cpu_seconds.max(1e-9)
    }
}

/// Decodes and re-encodes requests of `signal` of `batch` items until at least
/// `min_cpu_seconds` of this thread's CPU time is spent.
pub fn measure(
    signal: Signal,
    workload: &WorkloadConfig,
    batch: usize,
    min_cpu_seconds: f64,
) -> Result<Ceiling, CeilingError> {
    let mut generator = OperatorWorkload::new(workload.clone(), 1_700_000_000_000_000_000)?;
    let requests: Vec<(Vec<u8>, u64)> = (0..DISTINCT_REQUESTS)
        .map(|n| {
            let (payload, items) = Payload::generate(
                &mut generator,
                signal,
                batch,
                1_700_000_000_000_000_000 + n as u64,
            );
            (payload.encode_to_vec(), items as u64)
        })
        .collect();
    let started = thread_cpu_seconds();
    let mut items = 0;
    let mut encoded_bytes = 0usize;
    while thread_cpu_seconds() - started < min_cpu_seconds {
        for (bytes, count) in &requests {
            encoded_bytes += round_trip(signal, bytes)?;
            items += count;
        }
    }
    std::hint::black_box(encoded_bytes);
    Ok(Ceiling {
        items,
        cpu_seconds: thread_cpu_seconds() - started,
    })
}

/// Decodes `bytes` as a request of `signal` and encodes it again; returns the size.
fn round_trip(signal: Signal, bytes: &[u8]) -> Result<usize, DecodeError> {
    Ok(match signal {
        Signal::Traces => ExportTraceServiceRequest::decode(bytes)?
            .encode_to_vec()
            .len(),
        Signal::Logs => ExportLogsServiceRequest::decode(bytes)?
            .encode_to_vec()
            .len(),
        Signal::Metrics => ExportMetricsServiceRequest::decode(bytes)?
            .encode_to_vec()
            .len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_counts_the_items_it_round_trips() {
        for signal in [Signal::Traces, Signal::Logs, Signal::Metrics] {
            let ceiling = measure(signal, &WorkloadConfig::default(), 50, 0.01).expect("measured");
            assert!(ceiling.items >= 50 * DISTINCT_REQUESTS as u64, "{signal:?}");
            assert!(ceiling.items_per_cpu_second() > 0.0);
        }
    }
}
