//! What a Prometheus exporter keeps between batches (the series store, the signals
//! firing) and how a batch changes it: resolved first, committed after — at once for
//! the pull endpoint, after a successful send for remote write, so a retried batch
//! (of delta metrics, say) is never counted twice.

use std::collections::BTreeMap;
use std::time::Instant;

use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;

use super::model::{Change, Labels};
use super::otlp::metric_changes;
use super::signals::{ActiveSignals, signal_changes};
use super::store::{Refusals, Resolution, SeriesLimits, SeriesStore};
use crate::batch::SignalBatch;
use crate::exporter::Delivery;

/// The answer to a batch the state took: series it could not keep for `max_series`
/// are items refused (`reason="max_series"`), at most the batch's items as the
/// sending queue counts them.
pub fn delivery(refused: &Refusals) -> Delivery {
    if refused.series_limit == 0 {
        return Delivery::default();
    }
    Delivery {
        rejected_items: refused.series_limit,
        rejected_reason: Some("max_series"),
        message: format!(
            "{} new series refused: the exporter holds max_series already",
            refused.series_limit
        ),
    }
}

/// A batch's changes to the state, not applied yet.
#[derive(Debug, Default)]
pub struct Changes {
    series: Vec<Change>,
    signals: Vec<(String, Option<Labels>)>,
    /// Items conversion could not take.
    refused: Refusals,
}

pub struct SeriesState {
    /// The exporter's name, for logs.
    name: String,
    store: SeriesStore,
    signals: ActiveSignals,
    /// Constant (pull) or external (remote write) labels, on every series that does
    /// not set them itself.
    extra_labels: Labels,
}

impl SeriesState {
    pub fn new(name: &str, limits: SeriesLimits, extra_labels: &BTreeMap<String, String>) -> Self {
        Self {
            name: name.to_string(),
            store: SeriesStore::new(limits),
            signals: ActiveSignals::default(),
            extra_labels: extra_labels
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
        }
    }

    pub fn store(&self) -> &SeriesStore {
        &self.store
    }

    pub fn metric_changes(&self, batch: &ExportMetricsServiceRequest) -> Changes {
        let converted = metric_changes(batch, &self.extra_labels);
        Changes {
            series: converted.series,
            refused: Refusals {
                unsupported: converted.unsupported,
                ..Refusals::default()
            },
            ..Changes::default()
        }
    }

    pub fn signal_changes(&self, batch: &SignalBatch) -> Changes {
        let derived = signal_changes(&batch.0, &self.signals, &self.extra_labels);
        Changes {
            series: derived.series,
            signals: derived.marks,
            refused: Refusals {
                unsupported: derived.refused,
                ..Refusals::default()
            },
        }
    }

    /// The series values the changes lead to, without applying them.
    pub fn resolve(&self, changes: &Changes) -> Resolution {
        let mut resolution = self.store.resolve(&changes.series);
        resolution.refused.add(&changes.refused);
        resolution
    }

    /// Applies changes resolved with [`SeriesState::resolve`] on this same state;
    /// returns what it refused.
    pub fn commit(&mut self, changes: Changes, resolution: Resolution, now: Instant) -> Refusals {
        let refused = resolution.refused;
        if refused.total() > 0 {
            tracing::warn!(exporter = %self.name, series_limit = refused.series_limit,
                name_conflict = refused.name_conflict, unsupported = refused.unsupported,
                "prometheus: items not exposed");
        }
        self.store.commit(resolution, now);
        self.signals.remember(changes.signals);
        refused
    }

    pub fn apply(&mut self, changes: Changes, now: Instant) -> Refusals {
        let resolution = self.resolve(&changes);
        self.commit(changes, resolution, now)
    }

    pub fn expire(&mut self, now: Instant) {
        let expired = self.store.expire(now);
        if expired > 0 {
            tracing::debug!(exporter = %self.name, expired, "prometheus: idle series dropped");
        }
    }
}
