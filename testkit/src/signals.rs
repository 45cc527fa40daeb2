//! Example signals, as the correlator reports them, for the tests of what carries
//! signals on: a reconcile loop and a write conflict.

use std::collections::BTreeMap;

use opscope_model::kubernetes::{ObjectRef, OperatorRef};
use opscope_model::signal::{Severity, Signal, SignalState, SignalType};

/// 2024-05-01T12:00:00Z.
const NOON: u64 = 1_714_564_800_000_000_000;
const SECOND: u64 = 1_000_000_000;

/// A firing `reconcile_loop` on `RayJob ml/train`, first seen at noon, last a minute later.
pub fn loop_signal() -> Signal {
    loop_signal_seen(NOON, NOON + 60 * SECOND)
}

/// A firing `reconcile_loop` on `RayJob ml/train`, seen from `first_seen` to `last_seen`.
pub fn loop_signal_seen(first_seen: u64, last_seen: u64) -> Signal {
    Signal {
        id: "reconcile_loop:rayjobs/ml/train".into(),
        signal: SignalType::ReconcileLoop,
        cause: "self_triggered_status_write".into(),
        severity: Severity::Critical,
        state: SignalState::Firing,
        object: ObjectRef {
            group: "ray.io".into(),
            kind: "RayJob".into(),
            resource: "rayjobs".into(),
            namespace: "ml".into(),
            name: "train".into(),
        },
        operator: OperatorRef {
            name: "kuberay".into(),
            namespace: "ray-system".into(),
        },
        controller: "rayjob".into(),
        first_seen,
        last_seen,
        figures: BTreeMap::from([
            ("reconciles".to_string(), 420.0),
            ("reconciles_per_minute".to_string(), 420.0),
        ]),
        evidence: vec![
            "trace 0af7651916cd43dd8448eb211c80319c span b7ad6b7169203331".into(),
            "reconcile 7f3e2c1a".into(),
        ],
        hint: "Add GenerationChangedPredicate to the watch of RayJob.".into(),
    }
}

/// A firing `write_conflict` on `Deployment shop/cart`.
pub fn conflict_signal() -> Signal {
    Signal {
        id: "write_conflict:deployments/shop/cart".into(),
        signal: SignalType::WriteConflict,
        cause: "concurrent_writers".into(),
        severity: Severity::Warning,
        state: SignalState::Firing,
        object: ObjectRef {
            group: "apps".into(),
            kind: "Deployment".into(),
            resource: "deployments".into(),
            namespace: "shop".into(),
            name: "cart".into(),
        },
        operator: OperatorRef {
            name: "cart-operator".into(),
            namespace: "operators".into(),
        },
        controller: "deployment".into(),
        first_seen: NOON,
        last_seen: NOON + 30 * SECOND,
        figures: BTreeMap::from([("conflicts".to_string(), 7.0)]),
        evidence: Vec::new(),
        hint: "Use leader election so that one instance writes.".into(),
    }
}

/// The signal resolved ten seconds after it was last seen firing.
pub fn resolved(signal: &Signal) -> Signal {
    Signal {
        state: SignalState::Resolved,
        last_seen: signal.last_seen + 10 * SECOND,
        ..signal.clone()
    }
}

/// The signal still firing, seen `seconds` later, with another cause.
pub fn with_cause(signal: &Signal, cause: &str, seconds: u64) -> Signal {
    Signal {
        cause: cause.into(),
        last_seen: signal.last_seen + seconds * SECOND,
        ..signal.clone()
    }
}
