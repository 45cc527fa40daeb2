//! Signal changes as Loki entries: one per change, on a stream with the configured
//! labels plus `signal`, the signal as JSON for the line, its ids as structured metadata.

use opscope_model::signal::evidence_reference;
use opscope_model::signal::{Severity, Signal};
use opscope_proto::loki::{EntryAdapter, PushRequest};

use super::encode::{Streams, metadata, timestamp};
use super::labels::{LabelSet, LabelValues, SIGNAL_LABEL, StreamLabel};
use crate::batch::SignalBatch;

/// Every signal change of `batch` as an entry; a change without a time gets
/// `fallback_time` (nanoseconds since the epoch).
pub fn signals_push_request(
    batch: &SignalBatch,
    labels: &[StreamLabel],
    fallback_time: u64,
) -> PushRequest {
    let mut streams = Streams::default();
    for signal in &batch.0 {
        let values = LabelValues {
            operator_name: &signal.operator.name,
            k8s_namespace: &signal.operator.namespace,
            level: level_of(signal.severity),
        };
        let mut stream_labels = LabelSet::select(labels, &values);
        stream_labels.insert(SIGNAL_LABEL, signal.signal.name());
        streams.add(stream_labels, signal_entry(signal, fallback_time));
    }
    streams.into_push_request()
}

fn signal_entry(signal: &Signal, fallback_time: u64) -> EntryAdapter {
    let time = if signal.last_seen == 0 {
        fallback_time
    } else {
        signal.last_seen
    };
    EntryAdapter {
        timestamp: Some(timestamp(time)),
        line: signal.to_json().to_string(),
        structured_metadata: metadata([
            ("signal_id", signal.id.clone()),
            ("k8s_object", signal.object.display()),
            ("controller", signal.controller.clone()),
            ("reconcile_id", evidence_ids(&signal.evidence, "reconcile")),
            ("trace_id", evidence_ids(&signal.evidence, "trace")),
        ]),
    }
}

fn level_of(severity: Severity) -> &'static str {
    match severity {
        Severity::Warning => "warn",
        Severity::Critical => "error",
    }
}

/// The ids of the evidence references of one kind (`reconcile <id>`,
/// `trace <id> span <id>`), comma-separated.
fn evidence_ids(evidence: &[String], key: &str) -> String {
    let ids: Vec<&str> = evidence
        .iter()
        .filter_map(|reference| evidence_reference(reference, key))
        .collect();
    ids.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::kubernetes::{ObjectRef, OperatorRef};
    use opscope_model::signal::{SignalState, SignalType};

    fn signal(severity: Severity, last_seen: u64) -> Signal {
        Signal {
            id: "reconcile_loop:rayjobs/ml/train".into(),
            signal: SignalType::ReconcileLoop,
            cause: "self_triggered_status_write".into(),
            severity,
            state: SignalState::Firing,
            object: ObjectRef {
                kind: "RayJob".into(),
                namespace: "ml".into(),
                name: "train".into(),
                ..ObjectRef::default()
            },
            operator: OperatorRef {
                name: "ray".into(),
                namespace: "ops".into(),
            },
            controller: "rayjob".into(),
            first_seen: 1,
            last_seen,
            figures: Default::default(),
            evidence: vec![
                "trace 5b8efff798038103d269b633813fc60c span eee19b7ec3c1b174".into(),
                "reconcile r-1".into(),
                "manager.log:42".into(),
                "reconcile r-2".into(),
                "trace 0af7651916cd43dd8448eb211c80319c".into(),
            ],
            hint: "filter status-only updates".into(),
        }
    }

    #[test]
    fn one_entry_per_change_on_a_signal_stream() {
        let batch = SignalBatch(vec![
            signal(Severity::Critical, 9),
            signal(Severity::Warning, 5),
            signal(Severity::Critical, 7),
        ]);
        let pushed = signals_push_request(&batch, &StreamLabel::DEFAULT_SET, 1);
        let labels: Vec<&str> = pushed.streams.iter().map(|s| s.labels.as_str()).collect();
        assert_eq!(
            labels,
            [
                r#"{k8s_namespace="ops", level="error", operator_name="ray", signal="reconcile_loop"}"#,
                r#"{k8s_namespace="ops", level="warn", operator_name="ray", signal="reconcile_loop"}"#,
            ]
        );
        let critical: Vec<i32> = pushed.streams[0]
            .entries
            .iter()
            .filter_map(|e| e.timestamp.map(|t| t.nanos))
            .collect();
        assert_eq!(critical, [7, 9]);
        let line: serde_json::Value =
            serde_json::from_str(&pushed.streams[1].entries[0].line).expect("JSON line");
        assert_eq!(line["signal"], "reconcile_loop");
        assert_eq!(line["severity"], "warning");
    }

    #[test]
    fn ids_from_the_evidence_go_to_structured_metadata() {
        let batch = SignalBatch(vec![signal(Severity::Warning, 0)]);
        let pushed = signals_push_request(&batch, &[StreamLabel::OperatorName], 3);
        let entry = &pushed.streams[0].entries[0];
        assert_eq!(entry.timestamp.map(|t| t.nanos), Some(3));
        let pairs: Vec<(&str, &str)> = entry
            .structured_metadata
            .iter()
            .map(|pair| (pair.name.as_str(), pair.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("signal_id", "reconcile_loop:rayjobs/ml/train"),
                ("k8s_object", "RayJob ml/train"),
                ("controller", "rayjob"),
                ("reconcile_id", "r-1,r-2"),
                (
                    "trace_id",
                    "5b8efff798038103d269b633813fc60c,0af7651916cd43dd8448eb211c80319c"
                ),
            ]
        );
    }
}
