//! Hot paths of the pipeline: OTLP decode and encode of operator-shaped requests
//! (traces, logs, metrics), the census a receiver reads off a request's bytes before
//! decoding it and the decoded size the memory account counts, the tagger per span,
//! and the batch processor's merge and split.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use opscope::receivers::common::decode_budget::{Census, WireFormat};
use opscope_bench::{reconcile_traces, workload_payloads};
use opscope_model::{Telemetry, TelemetryKind};
use opscope_processors::Processor;
use opscope_processors::batch::{BatchConfig, BatchProcessor};
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp_encode::EncodeOnce;
use opscope_proto::prost::Message;
use opscope_proto::prost::bytes::{Buf, BytesMut};

/// The agent's allocator: allocation costs as the agent pays them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
/// Spans per request, as the load generator's default batch is about.
const SPANS: usize = 500;

fn otlp_codec(c: &mut Criterion) {
    let (request, spans) = reconcile_traces(SPANS);
    let bytes = request.encode_to_vec();
    let mut group = c.benchmark_group("otlp_traces");
    group.throughput(Throughput::Elements(spans as u64));
    group.bench_function("decode", |b| {
        b.iter(|| ExportTraceServiceRequest::decode(black_box(bytes.as_slice())))
    });
    // What the receiver saves by decoding from one slice: the same bytes read the way
    // tonic's generated servers read them (the copy into a `BytesMut` included).
    group.bench_function("decode_through_length_limited_buf", |b| {
        b.iter(|| {
            let mut buffer = BytesMut::from(black_box(bytes.as_slice()));
            let remaining = buffer.len();
            ExportTraceServiceRequest::decode(LengthLimited {
                buffer: &mut buffer,
                remaining,
            })
        })
    });
    // What the receivers add before decoding, and what the memory account measures
    // a request by (its decoded size) against what it measured before (encoded).
    group.bench_function("census", |b| {
        b.iter(|| {
            Census::of(
                TelemetryKind::Traces,
                WireFormat::Protobuf,
                black_box(bytes.as_slice()),
            )
        })
    });
    group.bench_function("memory_size", |b| {
        b.iter(|| black_box(&request).memory_size())
    });
    group.bench_function("encoded_len", |b| {
        b.iter(|| black_box(&request).encoded_len())
    });
    group.bench_function("encode", |b| b.iter(|| black_box(&request).encode_to_vec()));
    group.bench_function("encode_once", |b| {
        b.iter(|| black_box(&request).encode_once())
    });
    // As the exporters see them: tagged, about twice the attributes.
    let mut tagged = request.clone();
    OperatorTagger::new(&TaggerConfig::default()).tag_traces(&mut tagged);
    group.bench_function("encode_tagged", |b| {
        b.iter(|| black_box(&tagged).encode_to_vec())
    });
    group.bench_function("encode_once_tagged", |b| {
        b.iter(|| black_box(&tagged).encode_once())
    });
    group.finish();
}

/// A buffer read up to a length, as tonic's `DecodeBuf` (whose constructor is not
/// public) gives a message to a decoder: every read moves both.
struct LengthLimited<'a> {
    buffer: &'a mut BytesMut,
    remaining: usize,
}

impl Buf for LengthLimited<'_> {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        let chunk = self.buffer.chunk();
        &chunk[..chunk.len().min(self.remaining)]
    }

    fn advance(&mut self, count: usize) {
        assert!(count <= self.remaining, "advanced past the message");
        self.buffer.advance(count);
        self.remaining -= count;
    }
}

/// Logs and metrics as the load generator sends them: 500 items a request.
fn otlp_logs_and_metrics_codec(c: &mut Criterion) {
    let ((logs, records), (metrics, points)) = workload_payloads(500);
    let log_bytes = logs.encode_to_vec();
    let metric_bytes = metrics.encode_to_vec();
    let mut group = c.benchmark_group("otlp_logs");
    group.throughput(Throughput::Elements(records as u64));
    group.bench_function("decode", |b| {
        b.iter(|| ExportLogsServiceRequest::decode(black_box(log_bytes.as_slice())))
    });
    group.bench_function("encode", |b| b.iter(|| black_box(&logs).encode_to_vec()));
    group.bench_function("encode_once", |b| b.iter(|| black_box(&logs).encode_once()));
    group.finish();
    let mut group = c.benchmark_group("otlp_metrics");
    group.throughput(Throughput::Elements(points as u64));
    group.bench_function("decode", |b| {
        b.iter(|| ExportMetricsServiceRequest::decode(black_box(metric_bytes.as_slice())))
    });
    group.bench_function("encode", |b| b.iter(|| black_box(&metrics).encode_to_vec()));
    group.finish();
}

/// The tagger over reconcile traces: a root span and 2-6 client API spans each.
fn tagging_spans(c: &mut Criterion) {
    let (traces, spans) = reconcile_traces(SPANS);
    let mut group = c.benchmark_group("operator_tagger");
    group.throughput(Throughput::Elements(spans as u64));
    group.bench_function("reconcile_trace_spans", |b| {
        let mut tagger = OperatorTagger::new(&TaggerConfig::default());
        b.iter(|| {
            let mut out = Vec::with_capacity(1);
            tagger.process(traces.clone(), Instant::now(), &mut out);
            out
        })
    });
    group.finish();
}

fn batching(c: &mut Criterion) {
    let (request, spans) = reconcile_traces(SPANS);
    let mut group = c.benchmark_group("batch_processor");
    group.throughput(Throughput::Elements(spans as u64 * 10));
    group.bench_function("merge_10_requests_split_at_1024", |b| {
        b.iter(|| {
            let mut batch = BatchProcessor::new(BatchConfig {
                send_batch_size: 1024,
                send_batch_max_size: 1024,
                timeout: Duration::from_millis(200),
            });
            let mut out = Vec::new();
            let now = Instant::now();
            for _ in 0..10 {
                batch.process(request.clone(), now, &mut out);
            }
            batch.flush(&mut out);
            out
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = quick();
    targets = otlp_codec, otlp_logs_and_metrics_codec, tagging_spans, batching
}

/// Few samples and short measurements: `cargo bench` stays a few minutes long.
fn quick() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}
criterion_main!(benches);
