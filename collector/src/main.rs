//! The `opscope` command line.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use opscope::analyze::report;
use opscope::config::{Config, ProcessorConfig};
use opscope_model::timestamp::parse_rfc3339;
use opscope_processors::correlator::CorrelatorConfig;
use opscope_processors::tagger::TaggerConfig;
use tracing_subscriber::EnvFilter;

/// opscope: the telemetry agent that catches misbehaving Kubernetes operators.
#[derive(Parser)]
#[command(name = "opscope", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent (the default command).
    Run {
        /// Config file; without it the embedded default config is used.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Once every listener is bound, write their addresses to this file as JSON,
        /// by setting (`{"receivers.otlp.protocols.grpc": "127.0.0.1:43121", …}`): for
        /// scripts and tests that configure port 0.
        #[arg(long, value_name = "FILE")]
        listen_report: Option<PathBuf>,
    },
    /// Check a config file and print every problem with its path.
    Validate {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Run the agent with a simulated misbehaving operator fleet and print the
    /// signals as they fire.
    Demo {
        /// Stop after this many seconds (default: run until Ctrl-C).
        #[arg(long)]
        duration: Option<u64>,
        /// Where to serve the Prometheus endpoint.
        #[arg(long, default_value = "127.0.0.1:8889")]
        prometheus: String,
        /// Also send traces and signal spans to this OTLP/gRPC endpoint (e.g. Jaeger's).
        #[arg(long)]
        otlp: Option<String>,
        /// Also send signal events to this Loki (base URL).
        #[arg(long)]
        loki: Option<String>,
        /// Also send the series to this Prometheus remote-write URL.
        #[arg(long)]
        prometheus_remote_write: Option<String>,
        /// Also send alerts to this Alertmanager (base URL).
        #[arg(long)]
        alertmanager: Option<String>,
        /// Once every listener is bound, write their addresses to this file as JSON
        /// (as `run --listen-report`).
        #[arg(long, value_name = "FILE")]
        listen_report: Option<PathBuf>,
    },
    /// Replay captured files (container logs, operator logs, audit logs, OTLP/JSON)
    /// through the tagger and correlator and report the signals.
    Analyze {
        /// `table` for people, `json` for one JSON object per signal per line.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Evaluation time for leak ages (RFC 3339); default: the newest event time.
        #[arg(long)]
        at: Option<String>,
        /// Config whose `operator_tagger` and `correlator` settings to use.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// After the signals, explain what was read: records recognised and not
        /// understood per file, the commonest lines not understood, the objects seen
        /// and the detector closest to firing (stderr; with `--format json`, a final
        /// `{"explain": …}` line).
        #[arg(long)]
        explain: bool,
        /// The zone of log times written without one (`UTC`, `+02:00`); overrides the
        /// config's `operator_tagger.default_timezone`. Default: UTC.
        #[arg(long)]
        timezone: Option<String>,
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Table,
    Json,
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default = Command::Run {
        config: None,
        listen_report: None,
    };
    match cli.command.unwrap_or(default) {
        Command::Run {
            config,
            listen_report,
        } => match run(config, listen_report) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("opscope: {err:#}");
                ExitCode::FAILURE
            }
        },
        Command::Validate { config } => validate(&config),
        Command::Demo {
            duration,
            prometheus,
            otlp,
            loki,
            prometheus_remote_write,
            alertmanager,
            listen_report,
        } => {
            let backends = opscope::demo::Backends {
                prometheus,
                otlp,
                loki,
                remote_write: prometheus_remote_write,
                alertmanager,
            };
            demo(duration, backends, listen_report)
        }
        Command::Analyze {
            format,
            at,
            config,
            explain,
            timezone,
            paths,
        } => analyze(
            format,
            at.as_deref(),
            config.as_ref(),
            AnalyzeFlags { explain, timezone },
            paths,
        ),
    }
}

fn load(path: Option<&PathBuf>) -> Result<Config, String> {
    let (loaded, source) = match path {
        Some(path) => (Config::from_file(path), path.display().to_string()),
        None => (
            Config::embedded_default(),
            "embedded default config".to_string(),
        ),
    };
    loaded.map_err(|errors| format!("{source} is invalid:\n{errors}"))
}

fn validate(path: &PathBuf) -> ExitCode {
    match load(Some(path)) {
        Ok(config) => {
            println!("{}: valid; {}", path.display(), config.summary());
            for deprecation in &config.deprecations {
                println!("deprecated: {deprecation}");
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// The flags of `analyze` that shape how it reads and reports.
struct AnalyzeFlags {
    explain: bool,
    timezone: Option<String>,
}

fn analyze(
    format: Format,
    at: Option<&str>,
    config: Option<&PathBuf>,
    flags: AnalyzeFlags,
    paths: Vec<PathBuf>,
) -> ExitCode {
    let at = match at.map(|text| parse_rfc3339(text).ok_or(text)).transpose() {
        Ok(at) => at,
        Err(text) => {
            eprintln!("opscope analyze: --at {text:?} is not an RFC 3339 time");
            return ExitCode::from(2);
        }
    };
    let (mut tagger, correlator) = match config.map(|path| load(Some(path))).transpose() {
        Ok(loaded) => analysis_settings(loaded.as_ref()),
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if let Some(zone) = flags.timezone {
        if opscope_model::timestamp::parse_utc_offset(&zone).is_none() {
            eprintln!(
                "opscope analyze: --timezone {zone:?} is not UTC or an offset such as +02:00"
            );
            return ExitCode::from(2);
        }
        tagger.default_timezone = Some(zone);
    }
    let explain = flags.explain;
    let options = opscope::analyze::Options {
        paths,
        at,
        tagger,
        correlator,
        explain,
    };
    let mut analysis = match opscope::analyze::analyze(options) {
        Ok(analysis) => analysis,
        Err(err) => {
            eprintln!("opscope analyze: {err}");
            return ExitCode::from(2);
        }
    };
    let mut stdout = std::io::stdout().lock();
    let written = match format {
        Format::Json => analysis
            .signals
            .iter()
            .try_for_each(|signal| writeln!(stdout, "{}", signal.to_json())),
        Format::Table => {
            report::sort_for_people(&mut analysis.signals);
            write!(
                stdout,
                "{}",
                report::table(&analysis.signals, &analysis.totals)
            )
        }
    };
    let written = written.and_then(|()| match (&analysis.explanation, format) {
        (Some(explanation), Format::Json) => {
            let line = serde_json::json!({ "explain": explanation });
            writeln!(stdout, "{line}")
        }
        (Some(explanation), Format::Table) => {
            eprint!("{}", explanation.table());
            Ok(())
        }
        (None, _) => Ok(()),
    });
    if format == Format::Json {
        eprintln!(
            "{}",
            report::summary(&analysis.totals, analysis.signals.len())
        );
    }
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("opscope analyze: writing the report: {err}");
            ExitCode::from(2)
        }
    }
}

/// The tagger and correlator settings of a config (the first of each), or defaults.
fn analysis_settings(config: Option<&Config>) -> (TaggerConfig, CorrelatorConfig) {
    let mut tagger = TaggerConfig::default();
    let mut correlator = CorrelatorConfig::default();
    for processor in config.iter().flat_map(|c| c.processors.values()).rev() {
        match processor {
            ProcessorConfig::OperatorTagger(settings) => tagger = settings.clone(),
            ProcessorConfig::Correlator(settings) => correlator = (**settings).clone(),
            _ => {}
        }
    }
    (tagger, correlator)
}

fn demo(
    duration: Option<u64>,
    backends: opscope::demo::Backends,
    listen_report: Option<PathBuf>,
) -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let stop = async move {
        match duration {
            Some(seconds) => {
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_secs(seconds)) => {}
                    () = shutdown_signal() => {}
                }
            }
            None => shutdown_signal().await,
        }
    };
    let result = runtime().map_err(|e| e.to_string()).and_then(|runtime| {
        runtime
            .block_on(opscope::demo::run(backends, listen_report, stop))
            .map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("opscope demo: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: Option<PathBuf>, listen_report: Option<PathBuf>) -> anyhow::Result<()> {
    let config = load(path.as_ref()).map_err(anyhow::Error::msg)?;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.service.telemetry.logs.level))
        .context("service.telemetry.logs.level")?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    for deprecation in &config.deprecations {
        tracing::warn!("deprecated config: {deprecation}");
    }
    let runtime = runtime().context("starting the async runtime")?;
    let options = opscope::service::RunOptions {
        listen_report,
        on_ready: None,
    };
    let result = runtime.block_on(opscope::service::run(config, options, shutdown_signal()));
    // A receiver stuck in a system call on a blocking thread was left behind by the
    // service (and named in the log): the process does not wait for it.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_GRACE);
    result?;
    Ok(())
}

/// How long the runtime's threads get to end once the service has stopped.
const RUNTIME_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs the agent on that many runtime workers instead of one per CPU the process may
/// use (its cgroup's CPU quota included).
const WORKER_THREADS_ENV: &str = "TOKIO_WORKER_THREADS";

/// The async runtime, its idle workers returning free memory when the memory limiter asks.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = worker_threads()? {
        builder.worker_threads(workers);
    }
    builder
        .enable_all()
        .on_thread_park(opscope::allocator::on_worker_idle)
        .build()
}

/// [`WORKER_THREADS_ENV`], read here because tokio, reading it itself, panics on a
/// value that is not a count.
fn worker_threads() -> std::io::Result<Option<usize>> {
    let Some(value) = std::env::var_os(WORKER_THREADS_ENV) else {
        return Ok(None);
    };
    let count = value.to_str().and_then(|text| text.parse::<usize>().ok());
    match count {
        Some(count) if count > 0 => Ok(Some(count)),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{WORKER_THREADS_ENV}={value:?}: must be a whole number of worker threads, at least 1"
            ),
        )),
    }
}

/// Completes on SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(terminate) => terminate,
        Err(err) => {
            tracing::error!(%err, "cannot listen for SIGTERM; only Ctrl-C stops opscope");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
