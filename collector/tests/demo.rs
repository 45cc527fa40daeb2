//! `opscope demo` smoke test: within its run the loop, conflict and finalizer leak of
//! the simulated fleet have fired, and it stops cleanly.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_demo_shows_each_misbehaviour_within_seconds() {
    let prometheus = "127.0.0.1:0";
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_opscope"))
        .args(["demo", "--duration", "20", "--prometheus", prometheus])
        .stdin(Stdio::null())
        .output()
        .expect("run opscope demo");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the demo stops at its duration"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "FIRING warning reconcile_loop RayJob ml/train operator=kuberay-operator cause=self_triggered_status_write",
        "write_conflict Widget shop/shared operator=widget-operator cause=split_brain",
        "finalizer_leak Widget shop/stuck operator=widget-operator cause=cleanup_failing",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let signals: Vec<&str> = stdout.lines().filter(|l| l.contains(" signal: ")).collect();
    assert!(
        !signals.iter().any(|l| l.contains("Widget shop/calm")),
        "the healthy controller raises nothing: {signals:#?}"
    );
    assert!(stdout.contains("hint:"), "signals come with their hint");
}
