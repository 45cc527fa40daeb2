//! Recognition and correlation: log lines recognised per second, log records tagged
//! per second, correlator events per second.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use opscope::receivers::filelog::cri::parse_container_line;
use opscope_bench::{controller_runtime_logs, reconcile_events, reconcile_traces};
use opscope_processors::CorrelatorEvents;
use opscope_processors::Processor;
use opscope_processors::correlator::{Correlator, CorrelatorConfig};
use opscope_processors::tagger::formats::recognize_line;
use opscope_processors::tagger::{OperatorTagger, TaggerConfig};

/// The agent's allocator: allocation costs as the agent pays them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
const JSON_LINE: &str = r#"{"level":"error","ts":"2026-11-20T10:00:00.123Z","logger":"controllers.RayJob","msg":"Reconciler error","controller":"rayjob","controllerGroup":"ray.io","controllerKind":"RayJob","RayJob":{"name":"train","namespace":"ml"},"namespace":"ml","name":"train","reconcileID":"31c80a03-036f-555d-abf9-6ded4bfe6f6f","error":"Operation cannot be fulfilled on rayjobs.ray.io \"train\": the object has been modified; please apply your changes to the latest version and try again"}"#;
const CONSOLE_LINE: &str = "2026-11-20T10:00:00.123Z\tINFO\tcontrollers.RayJob\tReconciling\t{\"controller\": \"rayjob\", \"controllerGroup\": \"ray.io\", \"controllerKind\": \"RayJob\", \"RayJob\": {\"name\":\"train\",\"namespace\":\"ml\"}, \"namespace\": \"ml\", \"name\": \"train\", \"reconcileID\": \"31c80a03-036f-555d-abf9-6ded4bfe6f6f\"}";
const KLOG_LINE: &str = r#"I1120 10:00:00.123456       1 controller.go:118] "Reconcile" controller="rayjob" object="ml/train" reconcileID="31c80a03-036f-555d-abf9-6ded4bfe6f6f""#;

fn recognition(c: &mut Criterion) {
    let mut group = c.benchmark_group("recognize_line");
    group.throughput(Throughput::Elements(1));
    for (name, line) in [
        ("controller_runtime_json", JSON_LINE),
        ("controller_runtime_console", CONSOLE_LINE),
        ("klog", KLOG_LINE),
    ] {
        group.bench_function(name, |b| b.iter(|| recognize_line(black_box(line))));
    }
    group.finish();
}

/// A container runtime's line around an operator's line, as the filelog receiver
/// reads them from /var/log/pods: CRI parsing, then format recognition.
fn container_lines(c: &mut Criterion) {
    let cri = format!("2026-11-20T10:00:00.123456789Z stderr F {JSON_LINE}");
    let mut group = c.benchmark_group("container_line");
    group.throughput(Throughput::Elements(1));
    group.bench_function("cri_then_controller_runtime_json", |b| {
        b.iter(|| {
            let line = parse_container_line(black_box(&cri));
            line.map(|line| recognize_line(&line.content))
        })
    });
    group.finish();
}

fn tagging(c: &mut Criterion) {
    let (logs, records) = controller_runtime_logs(1000);
    let mut group = c.benchmark_group("operator_tagger");
    group.throughput(Throughput::Elements(records as u64));
    group.bench_function("1000_controller_runtime_log_records", |b| {
        let mut tagger = OperatorTagger::new(&TaggerConfig::default());
        b.iter(|| {
            let mut out = Vec::with_capacity(1);
            tagger.process(logs.clone(), Instant::now(), &mut out);
            out
        })
    });
    group.finish();
}

fn correlation(c: &mut Criterion) {
    let events = reconcile_events(10_000, 500);
    let mut group = c.benchmark_group("correlator");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_function("10000_events_500_objects", |b| {
        // The events are made outside the measurement: the agent moves them from
        // extraction into the correlator, it does not copy them.
        b.iter_batched(
            || events.clone(),
            |events| {
                let mut correlator = Correlator::new(CorrelatorConfig::default());
                let mut signals = 0;
                for event in events {
                    let time = event.time();
                    correlator.observe(event);
                    signals += correlator.advance(time).len();
                }
                signals
            },
            BatchSize::LargeInput,
        )
    });
    // As the agent drives it: the events of a batch observed, then the detectors
    // evaluated once (`SharedCorrelator::observe`), here every 1 000 events.
    group.bench_function("10000_events_500_objects_evaluated_per_1000", |b| {
        b.iter_batched(
            || events.clone(),
            |events| {
                let mut correlator = Correlator::new(CorrelatorConfig::default());
                let mut signals = 0;
                let mut events = events.into_iter().peekable();
                while events.peek().is_some() {
                    for event in events.by_ref().take(1_000) {
                        correlator.observe(event);
                    }
                    signals += correlator.advance(correlator.watermark()).len();
                }
                signals
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

/// What the correlator costs per tagged span in the agent: reading the events out of
/// a tagged request of reconcile traces, observing them, evaluating the detectors.
fn tagged_spans(c: &mut Criterion) {
    let (mut traces, spans) = reconcile_traces(5_000);
    OperatorTagger::new(&TaggerConfig::default()).tag_traces(&mut traces);
    let mut group = c.benchmark_group("correlator");
    group.throughput(Throughput::Elements(spans as u64));
    group.bench_function("5000_tagged_reconcile_spans", |b| {
        b.iter(|| {
            let mut correlator = Correlator::new(CorrelatorConfig::default());
            let mut events = Vec::new();
            traces.correlator_events(&mut events);
            let mut signals = 0;
            for event in events {
                correlator.observe(event);
            }
            signals += correlator.advance(correlator.watermark()).len();
            signals
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = quick();
    targets = recognition, container_lines, tagging, correlation, tagged_spans
}

/// Few samples and short measurements: `cargo bench` stays a few minutes long.
fn quick() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}
criterion_main!(benches);
