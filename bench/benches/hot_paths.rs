//! Hot paths of the pipeline: OTLP decode and encode of operator-shaped requests, and
//! the batch processor's merge and split.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use opscope_bench::reconcile_traces;
use opscope_processors::Processor;
use opscope_processors::batch::{BatchConfig, BatchProcessor};
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::prost::Message;

const RECONCILES: usize = 100;
const SPANS: u64 = RECONCILES as u64 * 5;

fn otlp_codec(c: &mut Criterion) {
    let request = reconcile_traces(RECONCILES);
    let bytes = request.encode_to_vec();
    let mut group = c.benchmark_group("otlp_traces");
    group.throughput(Throughput::Elements(SPANS));
    group.bench_function("decode", |b| {
        b.iter(|| ExportTraceServiceRequest::decode(black_box(bytes.as_slice())))
    });
    group.bench_function("encode", |b| b.iter(|| black_box(&request).encode_to_vec()));
    group.finish();
}

fn batching(c: &mut Criterion) {
    let request = reconcile_traces(RECONCILES);
    let mut group = c.benchmark_group("batch_processor");
    group.throughput(Throughput::Elements(SPANS * 10));
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

criterion_group!(benches, otlp_codec, batching);
criterion_main!(benches);
