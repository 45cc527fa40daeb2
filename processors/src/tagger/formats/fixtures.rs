//! The fixture log files the format tests read (one per format, written from the
//! public output shapes), and helpers to state the facts expected of their lines.

use super::LogFacts;

pub const CONTROLLER_RUNTIME_JSON: &str =
    include_str!("../../../tests/fixtures/logs/controller_runtime_json.log");
pub const CONTROLLER_RUNTIME_CONSOLE: &str =
    include_str!("../../../tests/fixtures/logs/controller_runtime_console.log");
pub const KUBE_RS: &str = include_str!("../../../tests/fixtures/logs/kube_rs.log");
pub const KLOG: &str = include_str!("../../../tests/fixtures/logs/klog.log");
pub const LOGFMT: &str = include_str!("../../../tests/fixtures/logs/logfmt.log");
pub const PLAIN: &str = include_str!("../../../tests/fixtures/logs/plain.log");

/// The 409 error text of a stale update of the RayJob `ml/train`.
pub const RAYJOB_CONFLICT: &str = "Operation cannot be fulfilled on rayjobs.ray.io \"train\": \
     the object has been modified; please apply your changes to the latest version and try again";

/// Line `index` (from 0) of a fixture.
pub fn line(fixture: &str, index: usize) -> &str {
    fixture
        .lines()
        .nth(index)
        .unwrap_or_else(|| panic!("the fixture has no line {index}"))
}

pub fn some(text: &str) -> Option<String> {
    Some(text.to_string())
}

/// Unix nanoseconds of `seconds` and `nanos`.
pub fn at(seconds: u64, nanos: u64) -> Option<u64> {
    Some(seconds * 1_000_000_000 + nanos)
}

/// The object facts of a reconcile of the RayJob `ml/train` by controller `rayjob`.
pub fn rayjob_train(reconcile_id: &str) -> LogFacts {
    LogFacts {
        reconcile_id: some(reconcile_id),
        controller: some("rayjob"),
        group: some("ray.io"),
        kind: some("RayJob"),
        namespace: some("ml"),
        name: some("train"),
        ..LogFacts::default()
    }
}
