//! What a Prometheus exporter keeps between batches (the series store, the reconciles
//! already counted, the signals firing) and how a batch changes it: resolved first,
//! committed after — at once for the pull endpoint, after a successful send for
//! remote write, so a retried batch is never counted twice.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use opscope_model::Telemetry;
use opscope_processors::CorrelatorEvents;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;

use super::model::{Change, Labels};
use super::operator_metrics::{RecentReconciles, Seen, event_changes};
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
    reconciles: Vec<(Arc<str>, Seen)>,
    signals: Vec<(String, Option<Labels>)>,
    /// Items conversion could not take.
    refused: Refusals,
}

pub struct SeriesState {
    /// The exporter's name, for logs.
    name: String,
    store: SeriesStore,
    reconciles: RecentReconciles,
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
            reconciles: RecentReconciles::default(),
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

    /// Metrics batches are converted; traces and logs count what their correlator
    /// events say about reconciles and writes.
    pub fn telemetry_changes<T: Telemetry + CorrelatorEvents>(&self, batch: &T) -> Changes {
        if let Some(metrics) = (batch as &dyn Any).downcast_ref::<ExportMetricsServiceRequest>() {
            let converted = metric_changes(metrics, &self.extra_labels);
            return Changes {
                series: converted.series,
                refused: Refusals {
                    unsupported: converted.unsupported,
                    ..Refusals::default()
                },
                ..Changes::default()
            };
        }
        let mut events = Vec::new();
        batch.correlator_events(&mut events);
        let derived = event_changes(&events, &self.reconciles, &self.extra_labels);
        Changes {
            series: derived.series,
            reconciles: derived.marks,
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
            ..Changes::default()
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
        self.reconciles.remember(changes.reconciles);
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
