//! The alert a signal becomes in Alertmanager's API v2: the labels Alertmanager
//! identifies it by, annotations for people, and when it started and ended.

use std::collections::BTreeMap;

use opscope_model::signal::format_figure;
use opscope_model::signal::{Signal, SignalState, SignalType};
use opscope_model::timestamp::Nanos;
use opscope_model::timestamp::format_rfc3339;
use serde::{Serialize, Serializer};

/// One element of the JSON array `POST /api/v2/alerts` takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    /// Alertmanager's identity of the alert: it changes only when the signal's
    /// cause or severity does.
    pub labels: BTreeMap<&'static str, String>,
    pub annotations: BTreeMap<&'static str, String>,
    #[serde(serialize_with = "rfc3339")]
    pub starts_at: Nanos,
    /// Absent while firing: Alertmanager then keeps the alert for its
    /// `resolve_timeout` after each time it is sent.
    #[serde(
        serialize_with = "optional_rfc3339",
        skip_serializing_if = "Option::is_none"
    )]
    pub ends_at: Option<Nanos>,
    #[serde(rename = "generatorURL", skip_serializing_if = "Option::is_none")]
    pub generator_url: Option<String>,
}

impl Alert {
    /// The alert of a signal change: firing, or ended at `last_seen` when resolved.
    pub fn of(signal: &Signal, generator_url: Option<&str>) -> Self {
        let alert = Self {
            labels: labels(signal),
            annotations: annotations(signal),
            starts_at: signal.first_seen,
            ends_at: None,
            generator_url: generator_url.map(str::to_string),
        };
        match signal.state {
            // A handed-over alert is not posted (see `FiringAlerts::apply`).
            SignalState::Firing | SignalState::HandedOver => alert,
            SignalState::Resolved => alert.ended_at(signal.last_seen),
        }
    }

    /// The same alert ended at `time`, never before it started (which Alertmanager
    /// refuses).
    pub fn ended_at(self, time: Nanos) -> Self {
        Self {
            ends_at: Some(time.max(self.starts_at)),
            ..self
        }
    }
}

/// The `alertname` of each signal type.
pub fn alertname(signal: SignalType) -> &'static str {
    match signal {
        SignalType::ReconcileLoop => "OperatorReconcileLoop",
        SignalType::WriteConflict => "OperatorWriteConflict",
        SignalType::FinalizerLeak => "OperatorFinalizerLeak",
        SignalType::ResourceLeak => "OperatorResourceLeak",
        SignalType::ApiRequestStorm => "OperatorAPIRequestStorm",
    }
}

/// Alertmanager drops labels with empty values; leaving them out keeps what is sent
/// equal to what it stores.
fn labels(signal: &Signal) -> BTreeMap<&'static str, String> {
    let labels = [
        ("alertname", alertname(signal.signal).to_string()),
        ("severity", signal.severity.name().to_string()),
        ("operator_name", signal.operator.name.to_string()),
        ("k8s_namespace", signal.operator.namespace.to_string()),
        ("kind", object_kind(signal).to_string()),
        ("namespace", signal.object.namespace.to_string()),
        ("name", signal.object.name.to_string()),
        ("cause", signal.cause.clone()),
    ];
    without_empty_values(labels)
}

fn annotations(signal: &Signal) -> BTreeMap<&'static str, String> {
    let annotations = [
        ("summary", summary(signal)),
        ("description", description(signal)),
        ("hint", signal.hint.clone()),
    ];
    without_empty_values(annotations)
}

fn without_empty_values<const N: usize>(
    pairs: [(&'static str, String); N],
) -> BTreeMap<&'static str, String> {
    pairs
        .into_iter()
        .filter(|(_, value)| !value.is_empty())
        .collect()
}

/// `critical reconcile loop on RayJob ml/train: self_triggered_status_write (operator kuberay)`.
fn summary(signal: &Signal) -> String {
    format!(
        "{} {} on {}: {} (operator {})",
        signal.severity.name(),
        signal.signal.name().replace('_', " "),
        signal.object.display(),
        signal.cause,
        signal.operator.name
    )
}

/// What the correlator measured and saw, one fact per line.
fn description(signal: &Signal) -> String {
    let mut lines = vec![
        format!(
            "{} on {}, {}.",
            signal.signal.name(),
            signal.object.display(),
            reporter(signal)
        ),
        format!("Cause: {}.", signal.cause),
    ];
    if !signal.figures.is_empty() {
        let figures: Vec<String> = signal
            .figures
            .iter()
            .map(|(name, value)| format!("{name}={}", format_figure(*value)))
            .collect();
        lines.push(format!("Figures: {}.", figures.join(", ")));
    }
    if !signal.evidence.is_empty() {
        lines.push(format!("Evidence: {}.", signal.evidence.join("; ")));
    }
    lines.push(format!("Signal id: {}.", signal.id));
    lines.join("\n")
}

/// `operator kuberay in namespace ray-system, controller rayjob`.
fn reporter(signal: &Signal) -> String {
    let mut text = format!("operator {}", signal.operator.name);
    if !signal.operator.namespace.is_empty() {
        text.push_str(&format!(" in namespace {}", signal.operator.namespace));
    }
    if !signal.controller.is_empty() {
        text.push_str(&format!(", controller {}", signal.controller));
    }
    text
}

/// The kind, or the resource when only that is known.
fn object_kind(signal: &Signal) -> &str {
    if signal.object.kind.is_empty() {
        &signal.object.resource
    } else {
        &signal.object.kind
    }
}

fn rfc3339<S: Serializer>(time: &Nanos, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_rfc3339(*time))
}

fn optional_rfc3339<S: Serializer>(time: &Option<Nanos>, serializer: S) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => rfc3339(time, serializer),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_testkit::signals::{conflict_signal, loop_signal, resolved};

    const GOLDEN: &str = include_str!("testdata/alerts.json");

    #[test]
    fn payload_matches_the_golden_file() {
        let alerts = [
            Alert::of(&loop_signal(), Some("https://grafana.example/d/opscope")),
            Alert::of(&resolved(&conflict_signal()), None),
        ];
        let sent = serde_json::to_value(alerts).expect("alerts serialize");
        let golden: serde_json::Value = serde_json::from_str(GOLDEN).expect("golden is JSON");
        assert_eq!(
            sent,
            golden,
            "sent:\n{}",
            serde_json::to_string_pretty(&sent).unwrap_or_default()
        );
    }

    #[test]
    fn alertname_per_signal_type() {
        let names = [
            SignalType::ReconcileLoop,
            SignalType::WriteConflict,
            SignalType::FinalizerLeak,
            SignalType::ResourceLeak,
            SignalType::ApiRequestStorm,
        ]
        .map(alertname);
        assert_eq!(
            names,
            [
                "OperatorReconcileLoop",
                "OperatorWriteConflict",
                "OperatorFinalizerLeak",
                "OperatorResourceLeak",
                "OperatorAPIRequestStorm",
            ]
        );
    }

    #[test]
    fn firing_has_no_end_and_resolved_ends_at_last_seen() {
        let firing = loop_signal();
        assert_eq!(Alert::of(&firing, None).ends_at, None);
        let resolved = resolved(&firing);
        let alert = Alert::of(&resolved, None);
        assert_eq!(alert.starts_at, firing.first_seen);
        assert_eq!(alert.ends_at, Some(resolved.last_seen));
    }

    #[test]
    fn an_end_before_the_start_is_moved_to_the_start() {
        let alert = Alert::of(&loop_signal(), None);
        let start = alert.starts_at;
        assert_eq!(alert.ended_at(start - 1).ends_at, Some(start));
    }

    #[test]
    fn cluster_scoped_objects_have_no_namespace_label_and_resource_stands_for_kind() {
        let mut signal = loop_signal();
        signal.object.namespace.clear();
        signal.object.kind.clear();
        signal.object.resource = "clusterissuers".into();
        let alert = Alert::of(&signal, None);
        assert!(!alert.labels.contains_key("namespace"));
        assert_eq!(
            alert.labels.get("kind").map(String::as_str),
            Some("clusterissuers")
        );
    }
}
