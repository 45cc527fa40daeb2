//! opscope's own metrics (`opscope_receiver_*`, `opscope_exporter_*`), served in the
//! Prometheus/OpenMetrics text format on `service.telemetry.metrics.address`.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use opscope_exporters::QueueMetrics;
use opscope_exporters::queue::Labels;
use opscope_model::TelemetryKind;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use opscope_net::server_tls::{ConnectionMetrics, ReloadMetrics};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One family per signal type, indexed by [`TelemetryKind`].
type PerKind<M> = [Family<Labels, M>; 3];

pub struct SelfTelemetry {
    registry: Registry,
    accepted: PerKind<Counter>,
    refused: PerKind<Counter>,
    refused_requests: Family<Labels, Counter>,
    skipped_files: Family<Labels, Counter>,
    unavailable: Family<Labels, Counter>,
    certificate_reloads: Family<Labels, Counter>,
    connections: ConnectionFamilies,
    sent: PerKind<Counter>,
    send_failed: PerKind<Counter>,
    queue_size: Family<Labels, Gauge>,
    queue_capacity: Family<Labels, Gauge>,
    queue_corrupt_segments: Family<Labels, Counter>,
    queue_storage_errors: Family<Labels, Counter>,
    sent_signals: Family<Labels, Counter>,
    send_failed_signals: Family<Labels, Counter>,
    pub signals: Family<Labels, Counter>,
    pub correlator_tracked_objects: Family<Labels, Gauge>,
    pub correlator_evicted_objects: Family<Labels, Counter>,
    pub correlator_late_events: Family<Labels, Counter>,
    pub correlator_future_events: Family<Labels, Counter>,
    pub correlator_journal_bytes: Family<Labels, Gauge>,
    /// Journaled batches dropped to stay within the size, or not written or read.
    pub correlator_journal_lost: Family<Labels, Counter>,
    pub signals_dropped: Counter,
    memory_limiter: MemoryLimiterFamilies,
    /// Every sending queue's failure counters, to say what shutdown dropped.
    queues: Mutex<Vec<QueueSeries>>,
}

/// The failure counters of one sending queue.
struct QueueSeries {
    item: &'static str,
    failed: Family<Labels, Counter>,
    labels: Labels,
}

/// What one sending queue dropped because the shutdown deadline passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub exporter: String,
    pub pipeline: String,
    /// `spans`, `log_records`, `metric_points` or `signals`.
    pub item: &'static str,
    pub count: u64,
}

/// The series of the servers' connections, labelled by `server` and `transport`.
#[derive(Default)]
struct ConnectionFamilies {
    open: Family<Labels, Gauge>,
    refused: Family<Labels, Counter>,
    closed: Family<Labels, Counter>,
}

/// The gauges of the memory limiters, labelled by `processor`.
#[derive(Default)]
struct MemoryLimiterFamilies {
    accounted: Family<Labels, Gauge>,
    resident: Family<Labels, Gauge>,
    state: Family<Labels, Gauge>,
    limit: Family<Labels, Gauge>,
}

/// The series one memory limiter updates.
#[derive(Clone)]
pub struct MemoryLimiterMetrics {
    pub accounted: Gauge,
    pub resident: Gauge,
    pub state: Gauge,
    pub soft_limit: Gauge,
    pub hard_limit: Gauge,
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Default for SelfTelemetry {
    fn default() -> Self {
        Self::new()
    }
}

impl SelfTelemetry {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("opscope");
        let mut per_kind = |what: &str, help: &str| -> PerKind<Counter> {
            let families = TelemetryKind::ALL.map(|_| Family::<Labels, Counter>::default());
            for (kind, family) in TelemetryKind::ALL.iter().zip(&families) {
                let item = kind.item_name();
                registry.register(
                    what.replace("{item}", item),
                    help.replace("{item}", item),
                    family.clone(),
                );
            }
            families
        };
        let accepted = per_kind(
            "receiver_accepted_{item}",
            "{item} accepted by a receiver and handed to the pipeline",
        );
        let refused = per_kind(
            "receiver_refused_{item}",
            "{item} a receiver refused, by reason",
        );
        let sent = per_kind("exporter_sent_{item}", "{item} an exporter delivered");
        let send_failed = per_kind(
            "exporter_send_failed_{item}",
            "{item} an exporter gave up on, by reason",
        );
        let refused_requests = Family::<Labels, Counter>::default();
        registry.register(
            "receiver_refused_requests",
            "Requests a receiver refused, by signal and reason (including undecodable ones)",
            refused_requests.clone(),
        );
        let skipped_files = Family::<Labels, Counter>::default();
        registry.register(
            "receiver_skipped_files",
            "Paths a file receiver did not tail, by reason (not_regular_file, unreadable), once per path",
            skipped_files.clone(),
        );
        let unavailable = Family::<Labels, Counter>::default();
        registry.register(
            "receiver_unavailable",
            "Receivers, or parts of them, that could not run on this host, by receiver and reason (the ebpf receiver: not_built, capabilities, no_btf, cgroups, load_failed, no_tracefs)",
            unavailable.clone(),
        );
        let certificate_reloads = Family::<Labels, Counter>::default();
        registry.register(
            "server_tls_certificate_reloads",
            "Reloads of a server's TLS certificate after its files changed, by server, transport and outcome (loaded, failed)",
            certificate_reloads.clone(),
        );
        let connections = ConnectionFamilies::default();
        registry.register(
            "server_connections",
            "Connections a server has open, TLS handshakes included",
            connections.open.clone(),
        );
        registry.register(
            "server_connections_refused",
            "Connections a server closed as soon as it accepted them, by reason (max_connections, descriptors: the data servers' share of the descriptor limit was used)",
            connections.refused.clone(),
        );
        registry.register(
            "server_connections_closed",
            "Connections a server closed on the client's account, by reason (read_header_timeout, idle_timeout, stalled_at_shutdown)",
            connections.closed.clone(),
        );
        let queue_size = Family::<Labels, Gauge>::default();
        registry.register(
            "exporter_queue_size",
            "Batches waiting in an exporter's sending queue",
            queue_size.clone(),
        );
        let queue_capacity = Family::<Labels, Gauge>::default();
        registry.register(
            "exporter_queue_capacity",
            "Batches an exporter's sending queue holds",
            queue_capacity.clone(),
        );
        let queue_corrupt_segments = Family::<Labels, Counter>::default();
        registry.register(
            "exporter_queue_corrupt_segments",
            "Segments of a durable sending queue found with a torn or corrupt tail at start (cut off)",
            queue_corrupt_segments.clone(),
        );
        let queue_storage_errors = Family::<Labels, Counter>::default();
        registry.register(
            "exporter_queue_storage_errors",
            "Failed disk operations of a durable sending queue",
            queue_storage_errors.clone(),
        );
        let sent_signals = Family::<Labels, Counter>::default();
        registry.register(
            "exporter_sent_signals",
            "signal changes an exporter delivered",
            sent_signals.clone(),
        );
        let send_failed_signals = Family::<Labels, Counter>::default();
        registry.register(
            "exporter_send_failed_signals",
            "signal changes an exporter gave up on, by reason",
            send_failed_signals.clone(),
        );
        let signals = Family::<Labels, Counter>::default();
        registry.register(
            "signals",
            "Signals that started firing, by signal and cause",
            signals.clone(),
        );
        let correlator_tracked_objects = Family::<Labels, Gauge>::default();
        registry.register(
            "correlator_tracked_objects",
            "Objects the correlator holds state for",
            correlator_tracked_objects.clone(),
        );
        let correlator_evicted_objects = Family::<Labels, Counter>::default();
        registry.register(
            "correlator_evicted_objects",
            "Objects evicted because the correlator was at its cap",
            correlator_evicted_objects.clone(),
        );
        let correlator_late_events = Family::<Labels, Counter>::default();
        registry.register(
            "correlator_late_events",
            "Events older than the accepted lateness, dropped",
            correlator_late_events.clone(),
        );
        let correlator_journal_bytes = Family::<Labels, Gauge>::default();
        registry.register(
            "correlator_journal_bytes",
            "Bytes of the correlator's journal on disk",
            correlator_journal_bytes.clone(),
        );
        let correlator_journal_lost = Family::<Labels, Counter>::default();
        registry.register(
            "correlator_journal_lost_batches",
            "Journaled batches a restart will not see: dropped for size (reason=full) or not written or read back (reason=io)",
            correlator_journal_lost.clone(),
        );
        let correlator_future_events = Family::<Labels, Counter>::default();
        registry.register(
            "correlator_future_events",
            "Events dated ahead of the wall clock by more than the lateness, dropped",
            correlator_future_events.clone(),
        );
        let memory_limiter = MemoryLimiterFamilies::default();
        registry.register(
            "memory_limiter_accounted_bytes",
            "Bytes of telemetry held in memory, from receipt until sent or written to a durable queue",
            memory_limiter.accounted.clone(),
        );
        registry.register(
            "memory_limiter_rss_bytes",
            "Resident memory of the process at the memory limiter's last check",
            memory_limiter.resident.clone(),
        );
        registry.register(
            "memory_limiter_state",
            "0 below the soft limit, 1 above it (new data refused), 2 above the hard limit (queued data dropped)",
            memory_limiter.state.clone(),
        );
        registry.register(
            "memory_limiter_limit_bytes",
            "The memory limiter's limits, by limit (soft, hard)",
            memory_limiter.limit.clone(),
        );
        let signals_dropped = Counter::default();
        registry.register(
            "signals_dropped",
            "Signal changes lost because their consumer fell behind",
            signals_dropped.clone(),
        );
        Self {
            sent_signals,
            send_failed_signals,
            signals,
            correlator_tracked_objects,
            correlator_evicted_objects,
            correlator_late_events,
            correlator_future_events,
            correlator_journal_bytes,
            correlator_journal_lost,
            signals_dropped,
            memory_limiter,
            registry,
            accepted,
            refused,
            refused_requests,
            skipped_files,
            unavailable,
            certificate_reloads,
            connections,
            sent,
            send_failed,
            queue_size,
            queue_capacity,
            queue_corrupt_segments,
            queue_storage_errors,
            queues: Mutex::default(),
        }
    }

    pub fn receiver(
        &self,
        kind: TelemetryKind,
        receiver: &str,
        transport: &str,
    ) -> ReceiverMetrics {
        let base = labels(&[("receiver", receiver), ("transport", transport)]);
        let mut request_labels = base.clone();
        request_labels.push(("signal".into(), kind.name().into()));
        ReceiverMetrics {
            accepted: kind.of(&self.accepted).get_or_create(&base).clone(),
            refused: kind.of(&self.refused).clone(),
            refused_requests: self.refused_requests.clone(),
            skipped_files: self.skipped_files.clone(),
            labels: base,
            request_labels,
        }
    }

    /// Counts a receiver (or part of one) that cannot run on this host, with why.
    pub fn receiver_unavailable(&self, receiver: &str, reason: &str) {
        self.unavailable
            .get_or_create(&labels(&[("receiver", receiver), ("reason", reason)]))
            .inc();
    }

    /// The reload counters of one receiver server's TLS certificate.
    /// The reload counters of the TLS certificate of `server` (a receiver's id, or
    /// the setting of an exposition endpoint such as `service.telemetry.metrics`).
    pub fn certificate_reloads(&self, server: &str, transport: &str) -> ReloadMetrics {
        let outcome = |outcome: &str| {
            self.certificate_reloads
                .get_or_create(&labels(&[
                    ("server", server),
                    ("transport", transport),
                    ("outcome", outcome),
                ]))
                .clone()
        };
        ReloadMetrics {
            loaded: outcome("loaded"),
            failed: outcome("failed"),
        }
    }

    /// The connection series of `server` (a receiver's id, or the setting of an
    /// exposition endpoint such as `service.telemetry.metrics`).
    pub fn server_connections(&self, server: &str, transport: &str) -> ConnectionMetrics {
        let families = &self.connections;
        let base = labels(&[("server", server), ("transport", transport)]);
        let with_reason = |family: &Family<Labels, Counter>, reason: &str| {
            let mut labels = base.clone();
            labels.push(("reason".into(), reason.into()));
            family.get_or_create(&labels).clone()
        };
        ConnectionMetrics {
            open: families.open.get_or_create(&base).clone(),
            refused_max_connections: with_reason(&families.refused, "max_connections"),
            refused_descriptors: with_reason(&families.refused, "descriptors"),
            closed_read_header_timeout: with_reason(&families.closed, "read_header_timeout"),
            closed_idle_timeout: with_reason(&families.closed, "idle_timeout"),
            closed_stalled_at_shutdown: with_reason(&families.closed, "stalled_at_shutdown"),
        }
    }

    pub fn exporter_queue(
        &self,
        kind: TelemetryKind,
        exporter: &str,
        pipeline: &str,
    ) -> QueueMetrics {
        let base = labels(&[("exporter", exporter), ("pipeline", pipeline)]);
        self.queue_metrics(
            kind.item_name(),
            kind.of(&self.sent).get_or_create(&base).clone(),
            kind.of(&self.send_failed).clone(),
            base,
        )
    }

    /// The series of a sending queue of the `signals` pipeline.
    pub fn signal_queue(&self, exporter: &str, pipeline: &str) -> QueueMetrics {
        let base = labels(&[("exporter", exporter), ("pipeline", pipeline)]);
        self.queue_metrics(
            "signals",
            self.sent_signals.get_or_create(&base).clone(),
            self.send_failed_signals.clone(),
            base,
        )
    }

    fn queue_metrics(
        &self,
        item: &'static str,
        sent_items: Counter,
        failed_items: Family<Labels, Counter>,
        base: Labels,
    ) -> QueueMetrics {
        if let Ok(mut queues) = self.queues.lock() {
            queues.push(QueueSeries {
                item,
                failed: failed_items.clone(),
                labels: base.clone(),
            });
        }
        QueueMetrics {
            sent_items,
            failed_items,
            queue_size: self.queue_size.get_or_create(&base).clone(),
            queue_capacity: self.queue_capacity.get_or_create(&base).clone(),
            corrupt_segments: self.queue_corrupt_segments.get_or_create(&base).clone(),
            storage_errors: self.queue_storage_errors.get_or_create(&base).clone(),
            labels: base,
        }
    }

    /// The items each sending queue gave up on because the shutdown deadline passed
    /// (`reason="shutdown"`), for the queues that dropped any.
    pub fn dropped_at_shutdown(&self) -> Vec<Dropped> {
        let Ok(queues) = self.queues.lock() else {
            return Vec::new();
        };
        let label = |labels: &Labels, key: &str| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .map_or_else(String::new, |(_, v)| v.clone())
        };
        queues
            .iter()
            .filter_map(|queue| {
                let mut labels = queue.labels.clone();
                labels.push(("reason".into(), "shutdown".into()));
                let count = queue.failed.get(&labels).map_or(0, |counter| counter.get());
                (count > 0).then(|| Dropped {
                    exporter: label(&queue.labels, "exporter"),
                    pipeline: label(&queue.labels, "pipeline"),
                    item: queue.item,
                    count,
                })
            })
            .collect()
    }

    /// The gauges of the memory limiter `processors.<processor>`.
    pub fn memory_limiter(&self, processor: &str) -> MemoryLimiterMetrics {
        let families = &self.memory_limiter;
        let base = labels(&[("processor", processor)]);
        let limit = |which: &str| {
            families
                .limit
                .get_or_create(&labels(&[("processor", processor), ("limit", which)]))
                .clone()
        };
        MemoryLimiterMetrics {
            accounted: families.accounted.get_or_create(&base).clone(),
            resident: families.resident.get_or_create(&base).clone(),
            state: families.state.get_or_create(&base).clone(),
            soft_limit: limit("soft"),
            hard_limit: limit("hard"),
        }
    }

    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }

    pub fn router(self: Arc<Self>) -> Router {
        Router::new().route("/metrics", get(serve)).with_state(self)
    }
}

async fn serve(State(telemetry): State<Arc<SelfTelemetry>>) -> impl IntoResponse {
    ([(CONTENT_TYPE, OPENMETRICS)], telemetry.render())
}

/// The series one receiver updates for one signal type and transport.
#[derive(Clone)]
pub struct ReceiverMetrics {
    accepted: Counter,
    refused: Family<Labels, Counter>,
    refused_requests: Family<Labels, Counter>,
    skipped_files: Family<Labels, Counter>,
    labels: Labels,
    request_labels: Labels,
}

impl ReceiverMetrics {
    pub fn accepted(&self, items: usize) {
        self.accepted.inc_by(items as u64);
    }

    /// Counts a path a file receiver did not tail, with why.
    pub fn skipped_file(&self, reason: &str) {
        let mut labels = self.labels.clone();
        labels.push(("reason".into(), reason.into()));
        self.skipped_files.get_or_create(&labels).inc();
    }

    /// Counts a refused request and its items (0 when it could not be decoded).
    pub fn refused(&self, reason: &str, items: usize) {
        let with_reason = |labels: &Labels| {
            let mut labels = labels.clone();
            labels.push(("reason".into(), reason.into()));
            labels
        };
        self.refused_requests
            .get_or_create(&with_reason(&self.request_labels))
            .inc();
        if items > 0 {
            self.refused
                .get_or_create(&with_reason(&self.labels))
                .inc_by(items as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_named_per_signal_type() {
        let telemetry = SelfTelemetry::new();
        telemetry
            .receiver(TelemetryKind::Logs, "otlp", "grpc")
            .accepted(3);
        telemetry
            .receiver(TelemetryKind::Traces, "otlp", "http")
            .refused("pipeline_full", 2);
        telemetry
            .exporter_queue(TelemetryKind::Metrics, "otlp/sink", "metrics")
            .queue_capacity
            .set(10);
        let text = telemetry.render();
        assert!(telemetry.dropped_at_shutdown().is_empty());
        let queue = telemetry.exporter_queue(TelemetryKind::Logs, "otlp/sink", "logs");
        let mut shutdown = queue.labels.clone();
        shutdown.push(("reason".into(), "shutdown".into()));
        queue.failed_items.get_or_create(&shutdown).inc_by(7);
        assert_eq!(
            telemetry.dropped_at_shutdown(),
            [Dropped {
                exporter: "otlp/sink".into(),
                pipeline: "logs".into(),
                item: "log_records",
                count: 7,
            }]
        );
        assert!(text.contains("opscope_receiver_accepted_log_records_total{receiver=\"otlp\",transport=\"grpc\"} 3"), "{text}");
        assert!(text.contains("opscope_receiver_refused_spans_total{receiver=\"otlp\",transport=\"http\",reason=\"pipeline_full\"} 2"), "{text}");
        assert!(
            text.contains(
                "opscope_exporter_queue_capacity{exporter=\"otlp/sink\",pipeline=\"metrics\"} 10"
            ),
            "{text}"
        );
    }
}
