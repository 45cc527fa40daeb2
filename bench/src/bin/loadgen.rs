//! `loadgen`: sends operator-shaped OTLP (reconcile traces, controller-runtime
//! logs, operator metrics) to a collector, at a fixed rate or as fast as it accepts,
//! and prints what was accepted and refused.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Parser;
use opscope_bench::Signal;
use opscope_bench::load::{self, LiveCounts, LoadSettings, Transport};
use opscope_workload::WorkloadConfig;

#[derive(Debug, Parser)]
#[command(about = "Send operator-shaped OTLP to a collector and report the rates achieved")]
struct Args {
    /// The collector's OTLP endpoint: gRPC (default port 4317) or HTTP (4318).
    #[arg(long, default_value = "http://127.0.0.1:4317")]
    endpoint: String,
    #[arg(long, value_enum, default_value = "grpc")]
    transport: Transport,
    #[arg(long, value_enum, default_value = "traces")]
    signal: Signal,
    /// Items (spans, log records, points) per second; 0 sends as fast as accepted.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Seconds to send for.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Stop after this many requests, if sooner.
    #[arg(long)]
    requests: Option<u64>,
    /// Items per request (traces: whole reconciles, so up to six more).
    #[arg(long, default_value_t = 512)]
    batch: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Objects reconciled, spread over the operator pods.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    #[arg(long, default_value_t = 10)]
    pods: usize,
    /// Share of objects stuck in a status-write reconcile loop.
    #[arg(long, default_value_t = 0.01)]
    loop_fraction: f64,
    /// Share of objects whose updates meet 409 conflicts.
    #[arg(long, default_value_t = 0.01)]
    conflict_fraction: f64,
    /// Share of objects deleted but held by a failing finalizer.
    #[arg(long, default_value_t = 0.01)]
    leak_fraction: f64,
    /// API calls per reconcile, at least.
    #[arg(long, default_value_t = 2)]
    min_calls: usize,
    /// API calls per reconcile, at most.
    #[arg(long, default_value_t = 6)]
    max_calls: usize,
    /// Extra 32-byte string attributes per reconcile span or log record.
    #[arg(long, default_value_t = 0)]
    padding_attributes: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let settings = LoadSettings {
        endpoint: args.endpoint,
        transport: args.transport,
        signal: args.signal,
        rate: (args.rate > 0.0).then_some(args.rate),
        duration: Some(Duration::from_secs_f64(args.duration)),
        max_requests: args.requests,
        batch: args.batch,
        concurrency: args.concurrency,
        workload: WorkloadConfig {
            objects: args.objects,
            pods: args.pods,
            loop_fraction: args.loop_fraction,
            conflict_fraction: args.conflict_fraction,
            leak_fraction: args.leak_fraction,
            min_calls: args.min_calls,
            max_calls: args.max_calls,
            padding_attributes: args.padding_attributes,
            seed: args.seed,
        },
        tagged: false,
    };
    let counts = load::run(
        &settings,
        Arc::new(LiveCounts::default()),
        Arc::new(AtomicBool::new(false)),
    )
    .await?;
    let unit = settings.signal.unit();
    let seconds = counts.elapsed.as_secs_f64().max(1e-9);
    println!(
        "{} requests in {seconds:.2} s: {unit} sent {}, accepted {} ({:.0}/s), refused {} ({:.0}/s), failed {}",
        counts.requests,
        counts.sent,
        counts.accepted,
        counts.accepted_per_second(),
        counts.refused,
        counts.refused as f64 / seconds,
        counts.failed,
    );
    Ok(())
}
