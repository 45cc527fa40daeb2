//! The kernel probe's metrics of an operator pod, built as the `ebpf` receiver sends
//! them and tagged, through extraction and the correlator: `api_request_storm`.

use opscope_proto::otlp::common::v1::InstrumentationScope;

use super::*;
use crate::correlator::Correlator;
use crate::correlator::intake::events::{ApiTraffic, ApiTrafficEvent, ConnectionOutcome};
use crate::correlator::test_support::correlator;
use opscope_model::signal::{Signal, SignalState};

/// A Deployment's pod: the tagger names its operator from the pod name.
const STORMING_POD: &str = "widget-operator-5d6b8c9f7-q8w2z";
/// The pod as the probe's resource names it, before the tagger.
const PROBED_POD: &[(&str, &str)] = &[
    (K8S_NAMESPACE_NAME, "widget-system"),
    (K8S_POD_NAME, STORMING_POD),
    ("k8s.pod.uid", "7b1e4c2a-5f0d-4e8b-9a6c-3d2f1e0b9a87"),
    (
        "container.id",
        "3f9c1b7e2d4a6c8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c2d4e",
    ),
    (K8S_CONTAINER_NAME, "manager"),
];

/// What the probe counted of the pod so far.
#[derive(Default)]
struct Counted {
    sends: i64,
    bytes: i64,
    established: i64,
    refused: i64,
}

/// One cumulative monotonic sum of integers, started when the probe first saw the
/// cgroup.
fn sum(name: &str, unit: &str, at: u64, points: Vec<(Option<&str>, i64)>) -> Metric {
    let data_points = points
        .into_iter()
        .map(|(outcome, value)| NumberDataPoint {
            attributes: outcome.map_or_else(Vec::new, |o| attributes(&[("outcome", o)])),
            start_time_unix_nano: T0,
            time_unix_nano: at,
            value: Some(number_data_point::Value::AsInt(value)),
            ..Default::default()
        })
        .collect();
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(Data::Sum(Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

/// The receiver's export at `at`, tagged.
fn export(at: u64, counted: &Counted) -> ExportMetricsServiceRequest {
    let metrics = vec![
        sum(
            "opscope.ebpf.api_server.connections",
            "{connection}",
            at,
            vec![
                (Some("established"), counted.established),
                (Some("refused"), counted.refused),
                (Some("reset"), 0),
                (Some("timed_out"), 0),
                (Some("failed"), 0),
            ],
        ),
        sum(
            "opscope.ebpf.api_server.sent_bytes",
            "By",
            at,
            vec![(None, counted.bytes)],
        ),
        sum(
            "opscope.ebpf.api_server.send_calls",
            "{call}",
            at,
            vec![(None, counted.sends)],
        ),
        sum(
            "opscope.ebpf.process.forks",
            "{process}",
            at,
            vec![(None, 3)],
        ),
        sum("opscope.ebpf.write.enospc", "{call}", at, vec![(None, 0)]),
    ];
    let mut request = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: attributes(PROBED_POD),
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "opscope.ebpf".into(),
                    ..InstrumentationScope::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    OperatorTagger::new(&TaggerConfig::default()).tag_metrics(&mut request);
    request
}

/// The probe's exports every 10 s for `seconds`: `sends` calls and `refused` refused
/// connections a second, one established connection a minute; each export taken by
/// the correlator as a batch. Returns every signal sent.
fn probe_for(seconds: u64, sends: i64, refused: i64) -> (Correlator, Vec<Signal>) {
    let mut correlator = correlator();
    let mut counted = Counted::default();
    let mut signals = Vec::new();
    for tick in 1..=seconds / 10 {
        counted.sends += sends * 10;
        counted.bytes += sends * 10 * 412;
        counted.refused += refused * 10;
        counted.established += i64::from(tick % 6 == 0);
        let at = T0 + tick * 10 * NANOS_PER_SECOND;
        let mut events = Vec::new();
        from_metrics(&export(at, &counted), &mut events);
        for event in events {
            correlator.observe(event);
        }
        signals.extend(correlator.advance(at));
    }
    (correlator, signals)
}

fn storms(signals: &[Signal]) -> Vec<&Signal> {
    signals
        .iter()
        .filter(|s| s.signal == SignalType::ApiRequestStorm)
        .collect()
}

#[test]
fn the_probes_metrics_are_traffic_events_of_the_pods_container() {
    let counted = Counted {
        sends: 1000,
        bytes: 412_000,
        established: 2,
        refused: 7,
    };
    let mut events = Vec::new();
    from_metrics(&export(T0 + 10 * NANOS_PER_SECOND, &counted), &mut events);
    let traffic: Vec<ApiTrafficEvent> = events
        .into_iter()
        .map(|event| match event {
            Event::ApiTraffic(traffic) => traffic,
            other => panic!("not the probe's traffic: {other:?}"),
        })
        .collect();
    let measured: Vec<(ApiTraffic, f64)> = traffic.iter().map(|t| (t.measure, t.value)).collect();
    let connections = ApiTraffic::Connections;
    assert_eq!(
        measured,
        [
            (connections(ConnectionOutcome::Established), 2.0),
            (connections(ConnectionOutcome::Refused), 7.0),
            (connections(ConnectionOutcome::Reset), 0.0),
            (connections(ConnectionOutcome::TimedOut), 0.0),
            (connections(ConnectionOutcome::Failed), 0.0),
            (ApiTraffic::SentBytes, 412_000.0),
            (ApiTraffic::SendCalls, 1000.0),
        ]
    );
    let first = &traffic[0];
    assert_eq!(first.instance, STORMING_POD);
    assert_eq!(first.operator.name, "widget-operator");
    assert_eq!(first.operator.namespace, "widget-system");
    assert!(first.container.starts_with("3f9c1b7e"));
    assert_eq!((first.start, first.cumulative), (T0, true));
}

#[test]
fn an_operator_pod_sending_100_calls_a_second_fires_api_request_storm() {
    let (correlator, signals) = probe_for(240, 100, 0);
    let fired = storms(&signals);
    let first = fired.first().copied().expect("a storm fires");
    let fired_after = (first.first_seen - T0) / NANOS_PER_SECOND;
    assert!((120..=140).contains(&fired_after), "after {fired_after} s");
    assert_eq!(first.state, SignalState::Firing);
    assert_eq!(first.cause, "self_triggered_or_retry_storm");
    assert_eq!(first.operator.name, "widget-operator");
    assert_eq!(
        (first.object.kind.as_str(), first.object.name.as_str()),
        ("Pod", STORMING_POD)
    );
    assert!((first.figures["sends_per_second"] - 100.0).abs() < 1e-6);
    assert!((first.figures["sent_bytes_per_second"] - 41_200.0).abs() < 1e-3);
    assert_eq!(storms(&correlator.active()).len(), 1);
}

#[test]
fn an_operator_pod_sending_5_calls_a_second_does_not() {
    let (correlator, signals) = probe_for(600, 5, 0);
    assert!(storms(&signals).is_empty(), "{signals:#?}");
    assert_eq!(correlator.stats().tracked_instances, 1);
}

#[test]
fn an_operator_pod_whose_connections_are_mostly_refused_storms_for_it() {
    let (_, signals) = probe_for(240, 100, 3);
    let first = storms(&signals)[0];
    assert_eq!(first.cause, "connection_refused");
    assert!((first.figures["refused_per_minute"] - 180.0).abs() < 1e-6);
}
