//! The scenarios: each starts its operator processes in namespaces of its own on the
//! shared control plane, drives its Widgets, and checks what opscope said about them.
//! One file per family: the incident's loop (`loops`, `kernel`), what must fire
//! nothing (`quiet`), two writers (`conflicts`), finalizers, the faults of a bad day
//! (`bad_day`) and the API server's outage; `expect` waits for and reads signals,
//! `trail` follows their evidence into the operator's log and the backends.

mod bad_day;
mod conflicts;
mod expect;
mod finalizers;
mod kernel;
mod loops;
mod outage;
mod quiet;
mod trail;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::rig::{OperatorSpec, Rig, Sources};

/// How long after its start a scenario's signal may take: the promise.
const DETECTION: Duration = Duration::from_secs(30);
/// A loop resolves once its rate stays below half the threshold for one window (60 s).
const RESOLUTION: Duration = Duration::from_secs(150);
/// How long the healthy operators are watched for signals they must not get.
const QUIET: Duration = Duration::from_secs(120);
/// The finalizer-leak threshold of the test's agent (5 min by default).
pub const FINALIZER_MAX_AGE: &str = "15s";
const FINALIZER_WAIT: Duration = Duration::from_secs(60);

type Outcome = Result<String, String>;
type Run = fn(Arc<Rig>, &'static str) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;

pub struct Scenario {
    pub name: &'static str,
    /// Takes the control plane down: runs after the others, alone.
    pub exclusive: bool,
    pub run: Run,
}

macro_rules! scenario {
    ($name:literal, $function:path) => {
        scenario!($name, $function, false)
    };
    ($name:literal, $function:path, $exclusive:literal) => {
        Scenario {
            name: $name,
            exclusive: $exclusive,
            run: |rig, name| Box::pin($function(rig, name)),
        }
    };
}

pub static SCENARIOS: &[Scenario] = &[
    scenario!("timestamp-loop", loops::timestamp_loop),
    scenario!("kube-rs-timestamp-loop", loops::kube_rs_timestamp_loop),
    scenario!(
        "traces-only-timestamp-loop",
        loops::traces_only_timestamp_loop
    ),
    scenario!(
        "kernel-only-timestamp-loop",
        kernel::kernel_only_timestamp_loop
    ),
    scenario!("fixed", quiet::fixed),
    scenario!("two-replicas", conflicts::two_replicas),
    scenario!("stuck-finalizer", finalizers::stuck_finalizer),
    scenario!("orphaned-finalizer", finalizers::orphaned_finalizer),
    scenario!("fixed-requeue", loops::fixed_requeue),
    scenario!("backoff", quiet::backoff),
    scenario!("schema-rejection", bad_day::schema_rejection),
    scenario!("webhook-timeout", bad_day::webhook_timeout),
    scenario!("proxy-latency", bad_day::proxy_latency),
    scenario!("proxy-refused", bad_day::proxy_refused),
    scenario!("proxy-reset", bad_day::proxy_reset),
    scenario!("apiserver-outage", outage::apiserver_outage, true),
];

fn spec<'a>(scenario: &'a str, args: &'a [&'a str]) -> OperatorSpec<'a> {
    OperatorSpec {
        scenario,
        args,
        replica: 0,
        sources: Sources::All,
        kube_rs: false,
        server: None,
    }
}
