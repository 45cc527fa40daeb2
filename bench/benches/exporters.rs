//! Exporter work: tagged log records into a Loki push (protobuf + snappy), a
//! remote-write request of operator series (protobuf + snappy), and a batch of
//! tagged spans cut by owning gateway (the `loadbalancing` exporter's routing).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use opscope_bench::{controller_runtime_logs, reconcile_traces};
use opscope_exporters::Encoded;
use opscope_exporters::loadbalancing::Ring;
use opscope_exporters::loadbalancing::routing::encode_traces;
use opscope_exporters::loadbalancing::wire;
use opscope_exporters::loki::{StreamLabel, logs_push_request, snappy_body};
use opscope_processors::Processor;
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_proto::prost::Message;
use opscope_proto::remote_write::{Label, Sample, TimeSeries, WriteRequest};

const RECORDS: usize = 1000;
const SERIES: usize = 1000;

fn loki(c: &mut Criterion) {
    let mut tagger = OperatorTagger::new(&TaggerConfig::default());
    let mut tagged = Vec::with_capacity(1);
    let (logs, records) = controller_runtime_logs(RECORDS);
    tagger.process(logs, Instant::now(), &mut tagged);
    let Some(logs) = tagged.pop() else {
        panic!("the tagger passes the records on");
    };
    let mut group = c.benchmark_group("loki");
    group.throughput(Throughput::Elements(records as u64));
    group.bench_function("push_request_and_snappy_1000_records", |b| {
        b.iter(|| {
            let request = logs_push_request(black_box(&logs), &StreamLabel::DEFAULT_SET, 0);
            snappy_body(&request)
        })
    });
    group.finish();
}

/// Series shaped like opscope's operator and signal series: sorted labels with
/// `__name__` among them, one sample each.
fn write_request() -> WriteRequest {
    let timeseries = (0..SERIES)
        .map(|n| {
            let mut labels: Vec<Label> = [
                ("__name__", "opscope_reconcile_total".to_string()),
                ("operator_name", format!("operator-{}", n % 3)),
                ("k8s_namespace", format!("operator-{}-system", n % 3)),
                ("controller", "widget".to_string()),
                ("kind", "Widget".to_string()),
                ("namespace", format!("team-{}", n % 20)),
                ("name", format!("widget-{n}")),
                ("result", "ok".to_string()),
            ]
            .into_iter()
            .map(|(name, value)| Label {
                name: name.into(),
                value,
            })
            .collect();
            labels.sort_by(|a, b| a.name.cmp(&b.name));
            TimeSeries {
                labels,
                samples: vec![Sample {
                    value: n as f64,
                    timestamp: 1_700_000_000_000,
                }],
            }
        })
        .collect();
    WriteRequest {
        timeseries,
        metadata: Vec::new(),
    }
}

fn remote_write(c: &mut Criterion) {
    let request = write_request();
    let mut group = c.benchmark_group("remote_write");
    group.throughput(Throughput::Elements(SERIES as u64));
    group.bench_function("encode_and_snappy_1000_series", |b| {
        b.iter(|| snap::raw::Encoder::new().compress_vec(&black_box(&request).encode_to_vec()))
    });
    group.finish();
}

/// The routing of tagged reconcile spans over three gateways: each span's object key
/// hashed and scored, and one request per gateway encoded from the borrowed batch;
/// beside it, the one encoding of the whole batch that the `otlp` exporter does.
fn loadbalancing(c: &mut Criterion) {
    let mut tagger = OperatorTagger::new(&TaggerConfig::default());
    let mut tagged = Vec::with_capacity(1);
    let (traces, spans) = reconcile_traces(RECORDS);
    tagger.process(traces, Instant::now(), &mut tagged);
    let Some(traces) = tagged.pop() else {
        panic!("the tagger passes the spans on");
    };
    let ring = Ring::new(&["10.0.0.5:4317", "10.0.0.6:4317", "10.0.0.7:4317"]);
    let mut group = c.benchmark_group("loadbalancing");
    group.throughput(Throughput::Elements(spans as u64));
    group.bench_function("route_1000_spans_over_3_gateways", |b| {
        b.iter(|| encode_traces(black_box(&traces), &ring))
    });
    group.bench_function("encode_1000_spans", |b| {
        b.iter(|| Encoded::new(black_box(&traces)))
    });
    // What the exporter does with the batch the pipeline encoded: reads each span's
    // object off the wire and copies its bytes into its gateway's request.
    let encoded = Encoded::new(&traces).bytes();
    group.bench_function("route_encoded_1000_spans_over_3_gateways", |b| {
        b.iter(|| wire::split(black_box(&encoded), wire::SPANS, &ring, &|_| true))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = quick();
    targets = loki, remote_write, loadbalancing
}

/// Few samples and short measurements: `cargo bench` stays a few minutes long.
fn quick() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_main!(benches);
