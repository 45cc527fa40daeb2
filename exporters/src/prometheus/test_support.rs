//! A small fixed set of series for the exposition golden tests: one family of each
//! kind, an exemplar, and label and help text that need escaping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::model::{Change, Exemplar, FamilyDesc, HistogramValue, Kind, Op, SummaryValue, Value};
use super::store::{SeriesLimits, SeriesStore};

fn family(name: &str, help: &str, unit: &str, kind: Kind) -> Arc<FamilyDesc> {
    Arc::new(FamilyDesc {
        name: name.into(),
        help: help.into(),
        unit: unit.into(),
        kind,
        expires: true,
    })
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

pub fn golden_store() -> SeriesStore {
    let reconciles = family("opscope_reconcile", "Reconciles seen.", "", Kind::Counter);
    let depth = family(
        "queue_depth",
        "Items \\ waiting\nin \"the\" queue.",
        "",
        Kind::Gauge,
    );
    let duration = family(
        "opscope_reconcile_duration_seconds",
        "Duration of reconciles.",
        "seconds",
        Kind::Histogram,
    );
    let latency = family(
        "rpc_latency_seconds",
        "RPC latency.",
        "seconds",
        Kind::Summary,
    );
    let target = family("target", "Target metadata", "", Kind::Info);
    let exemplar = Exemplar {
        labels: labels(&[("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736")]),
        value: 0.3,
    };
    let changes = vec![
        Change {
            family: reconciles,
            labels: labels(&[
                ("controller", "widget"),
                ("kind", "Widget"),
                ("result", "ok"),
            ]),
            op: Op::Add(Value::Number(3.0)),
        },
        Change {
            family: depth,
            labels: labels(&[("job", "ops/widget"), ("path", "C:\\dir \"x\"\nnext")]),
            op: Op::Set(Value::Number(2.5)),
        },
        Change {
            family: Arc::clone(&duration),
            labels: labels(&[("controller", "widget")]),
            op: Op::Add(Value::Histogram(HistogramValue::observation(
                &[0.1, 1.0],
                0.3,
                Some(exemplar),
            ))),
        },
        Change {
            family: duration,
            labels: labels(&[("controller", "widget")]),
            op: Op::Add(Value::Histogram(HistogramValue::observation(
                &[0.1, 1.0],
                0.05,
                None,
            ))),
        },
        Change {
            family: latency,
            labels: Vec::new(),
            op: Op::Set(Value::Summary(SummaryValue {
                quantiles: vec![(0.5, 0.01), (0.99, 0.2)],
                sum: 1.5,
                count: 30,
            })),
        },
        Change {
            family: target,
            labels: labels(&[
                ("instance", "w-0"),
                ("job", "ops/widget"),
                ("k8s_pod_name", "w-0"),
            ]),
            op: Op::Set(Value::Number(1.0)),
        },
    ];
    let mut store = SeriesStore::new(SeriesLimits {
        max_series: 100,
        expiration: Duration::from_secs(300),
    });
    let resolution = store.resolve(&changes);
    store.commit(resolution, Instant::now());
    store
}
