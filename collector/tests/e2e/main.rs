//! The end-to-end scenarios: real operators (controller-runtime and kube-rs, built from
//! `e2e/operators/`) against a real kube-apiserver and etcd, with the incident's bug
//! and its fix, and the faults of a bad day, read by one opscope agent from their
//! traces, pod logs, audit events and metrics. One line per scenario
//! (`scenario NAME: ok …` or `scenario NAME: FAIL reason`), then `N passed, M failed`.
//!
//! `e2e/run` builds what is missing and runs this; `cargo test` runs it too, skipping
//! with the reason when the servers or operators are not built (failing instead under
//! `OPSCOPE_REQUIRE_BACKENDS=1`). `cargo test --test e2e -- NAME…` runs the named
//! scenarios only.

#[path = "../common/mod.rs"]
mod common;
mod proxy;
mod rig;
mod scenarios;
mod topology;

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use opscope_testkit::backend::{backends_cache, backends_required};
use opscope_testkit::control_plane::control_plane_or_skip;

use rig::{Binaries, Rig};
use scenarios::{FINALIZER_MAX_AGE, SCENARIOS};
use topology::Topology;

fn main() -> ExitCode {
    // The arguments of libtest that matter here: filters, `--skip FILTER` and `--list`
    // (which lists nothing: the scenarios are no libtest tests). A filter that names
    // other binaries' tests chooses no scenario.
    let (mut wanted, mut skipped) = (Vec::new(), Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--list" => return ExitCode::SUCCESS,
            "--skip" => skipped.extend(args.next()),
            flag if flag.starts_with('-') => {}
            _ => wanted.push(arg),
        }
    }
    let chosen: Vec<&scenarios::Scenario> = SCENARIOS
        .iter()
        .filter(|s| wanted.is_empty() || wanted.iter().any(|w| s.name.contains(w.as_str())))
        .filter(|s| !skipped.iter().any(|skip| s.name.contains(skip.as_str())))
        .collect();
    if chosen.is_empty() {
        return ExitCode::SUCCESS;
    }
    let Some(binaries) = binaries_or_skip() else {
        return ExitCode::SUCCESS;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let failed = runtime.block_on(run(binaries, chosen));
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The servers and operators, or `None` with the reason printed when they are not
/// built and the run may skip.
fn binaries_or_skip() -> Option<Binaries> {
    let (etcd, apiserver) = control_plane_or_skip()?;
    let go_operator =
        opscope_testkit::backend::built_or_skip("widget-operator", "widget-operator")?;
    let rust_operator = backends_cache().join("bin/widget-operator-kube-rs");
    let rust_operator = if rust_operator.is_file() {
        Some(rust_operator)
    } else {
        assert!(
            !backends_required(),
            "OPSCOPE_REQUIRE_BACKENDS=1 but {} is not built (testkit/backends/build widget-operator-kube-rs)",
            rust_operator.display()
        );
        eprintln!(
            "the kube-rs scenario is skipped: {} is not built",
            rust_operator.display()
        );
        None
    };
    Some(Binaries {
        etcd,
        apiserver,
        go_operator,
        rust_operator,
    })
}

/// Runs the chosen scenarios against each topology in turn, a control plane of its
/// own each; returns how many failed.
async fn run(binaries: Binaries, chosen: Vec<&'static scenarios::Scenario>) -> usize {
    let started = Instant::now();
    let names: Vec<&str> = chosen.iter().map(|s| s.name).collect();
    let (mut passed, mut failed) = (0, 0);
    for topology in [Topology::AllInOne, Topology::GatewayTier] {
        let rig = Arc::new(Rig::start(binaries.clone(), &names, FINALIZER_MAX_AGE, topology).await);
        println!(
            "e2e ({}): control plane and opscope ready; {} scenarios",
            topology.name(),
            chosen.len()
        );
        let (ok, failures) = run_on(&rig, &chosen).await;
        passed += ok;
        failed += failures;
        if failures > 0 {
            print_signals(&rig);
        }
    }
    println!(
        "{passed} passed, {failed} failed ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    failed
}

/// The scenarios on one rig: those that share the control plane at once, those that
/// take it down after them, alone. Returns (passed, failed).
async fn run_on(rig: &Arc<Rig>, chosen: &[&'static scenarios::Scenario]) -> (usize, usize) {
    let topology = rig.deployment.topology.name();
    let (mut passed, mut failed) = (0, 0);
    for exclusive in [false, true] {
        let tasks: Vec<_> = chosen
            .iter()
            .filter(|s| s.exclusive == exclusive)
            .map(|scenario| {
                let rig = Arc::clone(rig);
                let name = scenario.name;
                let run = scenario.run;
                (name, tokio::spawn(async move { run(rig, name).await }))
            })
            .collect();
        for (name, task) in tasks {
            let outcome = task
                .await
                .unwrap_or_else(|panic| Err(format!("panicked: {panic}")));
            match outcome {
                Ok(figures) => {
                    passed += 1;
                    println!("scenario {name} ({topology}): ok {figures}");
                }
                Err(reason) => {
                    failed += 1;
                    println!("scenario {name} ({topology}): FAIL {reason}");
                }
            }
            let _ = std::io::stdout().flush();
        }
    }
    (passed, failed)
}

/// Every signal change opscope made, and the API server's last words: what a failed
/// run needs to be understood.
fn print_signals(rig: &Rig) {
    eprintln!("--- every signal change opscope printed ---");
    for signal in rig.signals() {
        eprintln!(
            "{} {} {}/{} {} {} figures {} evidence {}",
            signal["last_seen"],
            signal["signal"],
            signal["object"]["namespace"],
            signal["object"]["name"],
            signal["state"],
            signal["cause"],
            signal["figures"],
            signal["evidence"]
        );
    }
    eprintln!("{}", rig.control_plane.log_tail());
}
