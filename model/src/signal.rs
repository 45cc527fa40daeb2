//! Signals: what the correlator concludes, with cause, figures, evidence and a hint.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::kubernetes::{ObjectRef, OperatorRef};
use crate::timestamp::Nanos;
use crate::timestamp::format_rfc3339;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SignalType {
    ReconcileLoop,
    WriteConflict,
    FinalizerLeak,
    ResourceLeak,
    ApiRequestStorm,
}

impl SignalType {
    pub fn name(self) -> &'static str {
        match self {
            Self::ReconcileLoop => "reconcile_loop",
            Self::WriteConflict => "write_conflict",
            Self::FinalizerLeak => "finalizer_leak",
            Self::ResourceLeak => "resource_leak",
            Self::ApiRequestStorm => "api_request_storm",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Severity {
    Warning,
    /// At ten times the threshold.
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignalState {
    Firing,
    Resolved,
    /// Another gateway owns the signal's object now and carries the signal on: this
    /// one stops reporting it without ending it (its series ends; Alertmanager keeps
    /// the alert while the new owner sends it, and ends it after its
    /// `resolve_timeout` if none does).
    HandedOver,
}

/// At most this many evidence references travel with a signal.
pub const MAX_EVIDENCE: usize = 5;

/// Serde derives are for a durable queue's records; people and exporters read
/// [`Signal::to_json`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// Stable for one (signal, object): the same id from firing to resolved.
    pub id: String,
    pub signal: SignalType,
    /// `self_triggered_status_write`, `stale_cache`, `field_churn:status.lastSyncTime`, ...
    pub cause: String,
    pub severity: Severity,
    pub state: SignalState,
    /// The object; for `resource_leak` and `api_request_storm`, the operator pod (kind `Pod`).
    pub object: ObjectRef,
    pub operator: OperatorRef,
    pub controller: String,
    pub first_seen: Nanos,
    pub last_seen: Nanos,
    /// Measured figures: `reconciles_per_minute`, `conflicts`, `age_seconds`, `slope_per_minute`, ...
    pub figures: BTreeMap<String, f64>,
    /// Up to [`MAX_EVIDENCE`] references: `trace <id>`, `reconcile <id>`, `file.log:123`.
    pub evidence: Vec<String>,
    /// The usual remedy.
    pub hint: String,
}

impl Signal {
    /// The id of the signal of type `signal` about `subject` (an object key or instance).
    pub fn id_for(signal: SignalType, subject: &str) -> String {
        format!("{}:{subject}", signal.name())
    }

    /// One line for people: `critical reconcile_loop RayJob ml/train (self_triggered_status_write) ...`.
    pub fn summary(&self) -> String {
        let figures: Vec<String> = self
            .figures
            .iter()
            .map(|(name, value)| format!("{name}={}", format_figure(*value)))
            .collect();
        let state = match self.state {
            SignalState::Firing => "FIRING",
            SignalState::Resolved => "RESOLVED",
            SignalState::HandedOver => "HANDED_OVER",
        };
        format!(
            "{state} {} {} {} operator={} cause={} {}",
            self.severity.name(),
            self.signal.name(),
            self.object.display(),
            self.operator.name,
            self.cause,
            figures.join(" ")
        )
    }
}

impl Signal {
    /// The signal as a JSON object: what `opscope analyze --format json` prints and
    /// what log-shaped exporters carry.
    pub fn to_json(&self) -> serde_json::Value {
        let state = match self.state {
            SignalState::Firing => "firing",
            SignalState::Resolved => "resolved",
            SignalState::HandedOver => "handed_over",
        };
        let kind = if self.object.kind.is_empty() {
            &self.object.resource
        } else {
            &self.object.kind
        };
        serde_json::json!({
            "id": self.id,
            "signal": self.signal.name(),
            "cause": self.cause,
            "state": state,
            "severity": self.severity.name(),
            "operator": self.operator.name,
            "operator_namespace": self.operator.namespace,
            "controller": self.controller,
            "object": {
                "group": self.object.group,
                "kind": kind,
                "namespace": self.object.namespace,
                "name": self.object.name,
            },
            "first_seen": format_rfc3339(self.first_seen),
            "last_seen": format_rfc3339(self.last_seen),
            "figures": self.figures,
            "evidence": self.evidence,
            "hint": self.hint,
        })
    }
}

/// The id that follows `key` (`trace`, `span`, `reconcile`) in an evidence
/// reference such as `trace 5b8e… span eee1… reconcile 7f2c…`.
pub fn evidence_reference<'a>(evidence: &'a str, key: &str) -> Option<&'a str> {
    let mut words = evidence.split_whitespace();
    while let Some(word) = words.next() {
        if word == key {
            return words.next();
        }
    }
    None
}

/// A figure as people read it: whole numbers without decimals.
pub fn format_figure(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value:.2}")
    }
}
