//! `harness`: runs each scenario against the release `opscope` binary (and, with
//! `--baseline`, another opscope binary, or, with `--peer`, another collector): a
//! generated config on free loopback ports, the load generator in front, a null OTLP
//! sink behind, the collector's CPU and memory read from /proc, and one JSON line
//! per scenario, round and collector on stdout.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use opscope_bench::ceiling;
use opscope_bench::load::{self, LiveCounts, LoadSettings, Transport};
use opscope_bench::proc_stats::{self, ProcessSample};
use opscope_bench::report::ScenarioReport;
use opscope_bench::scenario::{self, Scenario};
use opscope_bench::sink::{NullSink, percentile};
use opscope_model::timestamp::now_unix_nanos;

const SAMPLE_INTERVAL: Duration = Duration::from_millis(250);
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long delivery may trail the load once it stops (the batch timeout is 200 ms).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);
const QUIET_FOR: Duration = Duration::from_secs(2);
const CEILING_CPU_SECONDS: f64 = 1.0;

#[derive(Debug, Parser)]
#[command(
    about = "Benchmark opscope (and optionally another collector) on operator-shaped OTLP load"
)]
struct Args {
    /// Run only this scenario (repeatable): traces_passthrough, traces_full,
    /// logs_full, metrics, steady_10k. Default: all.
    #[arg(long)]
    scenario: Vec<String>,
    /// Also run each scenario against this collector command, given by `sh -c`,
    /// with {grpc_port}, {http_port}, {sink_port} and {sink_endpoint} replaced.
    #[arg(long)]
    peer: Option<String>,
    /// The opscope binary; by default `cargo build --profile <build-profile> -p
    /// opscope` is run and its output taken.
    #[arg(long)]
    opscope: Option<PathBuf>,
    /// The cargo profile opscope is built with when no `--opscope` is given: `dist`,
    /// the one the container image ships, or `release`, the quicker build.
    #[arg(long, default_value = "dist")]
    build_profile: String,
    /// Also run each scenario, with the same config, against this other opscope
    /// binary (another build, to compare two builds on one machine).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Runs of each scenario. Each round runs every collector once, one after the
    /// other, so that the drift of a shared machine falls on all of them alike.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Seconds of measured load per scenario, instead of the scenario's own.
    #[arg(long)]
    duration: Option<f64>,
    /// Items per second to offer instead of the scenario's own rate (0: as fast as
    /// accepted): the latency at a given share of the maximum throughput.
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Requests in flight at once from the load generator.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
}

/// A collector under test: how to start it for a scenario.
enum Collector {
    Opscope(PathBuf),
    /// Another opscope binary, started with the same config.
    Baseline(PathBuf),
    Peer(String),
}

impl Collector {
    fn name(&self) -> &'static str {
        match self {
            Collector::Opscope(_) => "opscope",
            Collector::Baseline(_) => "baseline",
            Collector::Peer(_) => "peer",
        }
    }

    fn start(&self, scenario: &Scenario, ports: Ports) -> anyhow::Result<Child> {
        let log = std::env::temp_dir().join(format!(
            "opscope-bench-{}-{}.log",
            self.name(),
            scenario.name
        ));
        let stderr =
            std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let mut command = match self {
            Collector::Opscope(binary) | Collector::Baseline(binary) => {
                let config =
                    std::env::temp_dir().join(format!("opscope-bench-{}.yaml", scenario.name));
                // A gateway starts with an empty journal.
                let _ = std::fs::remove_dir_all(scenario::journal_directory());
                std::fs::write(
                    &config,
                    scenario.opscope_config(ports.grpc, ports.http, ports.sink),
                )
                .with_context(|| format!("write {}", config.display()))?;
                let mut command = Command::new(binary);
                command.arg("run").arg("-c").arg(config);
                command
            }
            Collector::Peer(template) => {
                let mut command = Command::new("sh");
                command
                    .arg("-c")
                    .arg(format!("exec {}", ports.fill(template)));
                command
            }
        };
        eprintln!(
            "{}: {} (stderr in {})",
            scenario.name,
            self.name(),
            log.display()
        );
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("start {}", self.name()))
    }
}

#[derive(Debug, Clone, Copy)]
struct Ports {
    grpc: u16,
    http: u16,
    sink: u16,
}

impl Ports {
    fn fill(&self, template: &str) -> String {
        template
            .replace("{grpc_port}", &self.grpc.to_string())
            .replace("{http_port}", &self.http.to_string())
            .replace("{sink_port}", &self.sink.to_string())
            .replace("{sink_endpoint}", &format!("127.0.0.1:{}", self.sink))
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scenarios = if args.scenario.is_empty() {
        scenario::all()
    } else {
        args.scenario
            .iter()
            .map(|name| scenario::find(name).with_context(|| format!("no scenario {name:?}")))
            .collect::<anyhow::Result<_>>()?
    };
    let mut collectors = vec![Collector::Opscope(opscope_binary(
        args.opscope.clone(),
        &args.build_profile,
    )?)];
    if let Some(baseline) = &args.baseline {
        anyhow::ensure!(
            baseline.is_file(),
            "no baseline binary at {}",
            baseline.display()
        );
        collectors.push(Collector::Baseline(baseline.clone()));
    }
    collectors.extend(args.peer.clone().map(Collector::Peer));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    for mut scenario in scenarios {
        if let Some(seconds) = args.duration {
            scenario.duration = Duration::from_secs_f64(seconds);
        }
        if let Some(rate) = args.rate {
            scenario.rate = (rate > 0.0).then_some(rate);
        }
        let codec = ceiling::measure(
            scenario.signal,
            &scenario.workload(),
            scenario.batch,
            CEILING_CPU_SECONDS,
        )?;
        for round in 1..=args.rounds {
            for collector in &collectors {
                let report = runtime.block_on(run(
                    &scenario,
                    collector,
                    &args,
                    codec.items_per_cpu_second(),
                ))?;
                let report = ScenarioReport { round, ..report };
                println!("{}", report.json_line());
            }
        }
    }
    Ok(())
}

/// The opscope binary: the one given, else a fresh build's with `profile`.
fn opscope_binary(given: Option<PathBuf>, profile: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        anyhow::ensure!(path.is_file(), "no opscope binary at {}", path.display());
        return Ok(path);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from);
    // Cargo puts the `dev` profile's output in `debug`; every other profile's in a
    // directory of its name.
    let directory = if profile == "dev" { "debug" } else { profile };
    let binary = target.join(directory).join("opscope");
    let build = format!("cargo build --profile {profile} -p opscope");
    eprintln!("building opscope: {build}");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--profile", profile, "-p", "opscope"])
        .current_dir(&workspace)
        .status()
        .with_context(|| format!("run {build}"))?;
    if !status.success() || !binary.is_file() {
        bail!(
            "no opscope binary at {} after cargo build; pass --opscope PATH",
            binary.display()
        );
    }
    Ok(binary)
}

async fn run(
    scenario: &Scenario,
    collector: &Collector,
    args: &Args,
    ceiling: f64,
) -> anyhow::Result<ScenarioReport> {
    let sink = NullSink::start().await?;
    let ports = Ports {
        grpc: free_port()?,
        http: free_port()?,
        sink: sink.addr().port(),
    };
    let mut child = collector.start(scenario, ports)?;
    let result = measure(scenario, collector, args, ceiling, &sink, ports, &mut child).await;
    let _ = std::fs::remove_dir_all(scenario::journal_directory());
    stop(&mut child).await;
    result
}

async fn measure(
    scenario: &Scenario,
    collector: &Collector,
    args: &Args,
    ceiling: f64,
    sink: &NullSink,
    ports: Ports,
    child: &mut Child,
) -> anyhow::Result<ScenarioReport> {
    wait_ready(child, ports.grpc).await?;
    let pid = child.id();
    let warmup = Duration::from_secs_f64(args.warmup);
    let settings = LoadSettings {
        endpoint: format!("http://127.0.0.1:{}", ports.grpc),
        transport: Transport::Grpc,
        signal: scenario.signal,
        rate: scenario.rate,
        duration: Some(warmup + scenario.duration),
        max_requests: None,
        batch: scenario.batch,
        concurrency: args.concurrency,
        workload: scenario.workload(),
        tagged: scenario.gateway,
    };
    let live = Arc::new(LiveCounts::default());
    let load = tokio::spawn({
        let live = live.clone();
        async move { load::run(&settings, live, Arc::new(AtomicBool::new(false))).await }
    });
    tokio::time::sleep(warmup).await;

    let window_started = Instant::now();
    let window_start_nanos = now_unix_nanos();
    let before = proc_stats::sample(pid)?;
    let sink_before = sink.counts();
    let load_before = live.snapshot(Duration::ZERO);
    let _ = sink.take_latencies();
    let mut rss_samples = Vec::new();
    while !load.is_finished() {
        tokio::time::sleep(SAMPLE_INTERVAL).await;
        rss_samples.push(proc_stats::sample(pid)?.rss_bytes);
    }
    let loaded = load.await??;
    if !scenario.gateway {
        drain(sink, scenario, loaded.accepted).await;
    }
    let after = proc_stats::sample(pid)?;
    let sink_after = sink.counts();
    let latencies = sink.take_latencies();

    // A gateway sends nothing on: what it accepted is what it took.
    let received = if scenario.gateway {
        loaded.accepted - load_before.accepted
    } else {
        sink_after.items(scenario.signal) - sink_before.items(scenario.signal)
    };
    let window_end_nanos = if sink_after.last_arrival > window_start_nanos {
        sink_after.last_arrival
    } else {
        window_start_nanos + u64::try_from(window_started.elapsed().as_nanos()).unwrap_or(0)
    };
    Ok(ScenarioReport {
        scenario: scenario.name.into(),
        collector: collector.name().into(),
        round: 1,
        signal: scenario.signal,
        offered_rate: scenario.rate,
        window_seconds: (window_end_nanos - window_start_nanos) as f64 / 1e9,
        sent: loaded.sent - load_before.sent,
        accepted: loaded.accepted - load_before.accepted,
        refused: loaded.refused - load_before.refused,
        failed: loaded.failed - load_before.failed,
        received,
        cpu_seconds: cpu_seconds(&before, &after),
        peak_rss_bytes: after.peak_rss_bytes,
        steady_rss_bytes: steady(&rss_samples),
        latency_p50_micros: percentile(&latencies, 50.0),
        latency_p99_micros: percentile(&latencies, 99.0),
        ceiling_items_per_cpu_second: ceiling,
    })
}

fn cpu_seconds(before: &ProcessSample, after: &ProcessSample) -> f64 {
    after.cpu_ticks.saturating_sub(before.cpu_ticks) as f64
        / proc_stats::clock_ticks_per_second() as f64
}

/// The median resident memory over the second half of the window.
fn steady(samples: &[u64]) -> u64 {
    let mut late = samples[samples.len() / 2..].to_vec();
    late.sort_unstable();
    late.get(late.len() / 2).copied().unwrap_or(0)
}

/// Waits until the collector accepts connections on its gRPC port.
async fn wait_ready(child: &mut Child, port: u16) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the collector exited before listening: {status}");
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if started.elapsed() > READY_TIMEOUT {
            bail!("the collector did not listen on 127.0.0.1:{port} within {READY_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until everything accepted has reached the sink, or nothing more arrives.
async fn drain(sink: &NullSink, scenario: &Scenario, accepted: u64) {
    let started = Instant::now();
    let mut last = sink.counts().items(scenario.signal);
    let mut unchanged_since = Instant::now();
    while started.elapsed() < DRAIN_TIMEOUT
        && last < accepted
        && unchanged_since.elapsed() < QUIET_FOR
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = sink.counts().items(scenario.signal);
        if now != last {
            last = now;
            unchanged_since = Instant::now();
        }
    }
}

/// SIGTERM, then SIGKILL if it has not exited within ten seconds.
async fn stop(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill only sends a signal to the child this harness started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let asked = Instant::now();
    while asked.elapsed() < Duration::from_secs(10) {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}
