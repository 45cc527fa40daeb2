//! The `opscope` command line.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use opscope::config::Config;
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
    },
    /// Check a config file and print every problem with its path.
    Validate {
        #[arg(short, long)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Run { config: None }) {
        Command::Run { config } => match run(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("opscope: {err:#}");
                ExitCode::FAILURE
            }
        },
        Command::Validate { config } => validate(&config),
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
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: Option<PathBuf>) -> anyhow::Result<()> {
    let config = load(path.as_ref()).map_err(anyhow::Error::msg)?;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.service.telemetry.logs.level))
        .context("service.telemetry.logs.level")?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(opscope::service::run(config, shutdown_signal()))?;
    Ok(())
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
