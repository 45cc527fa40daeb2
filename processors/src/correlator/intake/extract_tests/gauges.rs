//! Gauges of operator instances from metrics.

use super::*;

/// The metrics of a controller-runtime manager as a Prometheus receiver scrapes them.
fn tagged_metrics(json: &str) -> ExportMetricsServiceRequest {
    let mut request = from_json(json);
    OperatorTagger::new(&TaggerConfig::default()).tag_metrics(&mut request);
    request
}

fn gauges(request: &ExportMetricsServiceRequest) -> Vec<GaugeEvent> {
    let mut events = Vec::new();
    from_metrics(request, &mut events);
    events
        .into_iter()
        .filter_map(|event| match event {
            Event::Gauge(gauge) => Some(gauge),
            Event::Counter(_) | Event::ApiTraffic(_) => None,
            Event::Object(object) => panic!("not a gauge: {object:?}"),
        })
        .collect()
}

fn counters(request: &ExportMetricsServiceRequest) -> Vec<CounterEvent> {
    let mut events = Vec::new();
    from_metrics(request, &mut events);
    events
        .into_iter()
        .filter_map(|event| match event {
            Event::Counter(counter) => Some(counter),
            _ => None,
        })
        .collect()
}

/// A sum of `name` with one point per label set, each valued 10, of the KubeRay pod.
fn one_sum(
    name: &str,
    temporality: AggregationTemporality,
    points: &[&[(&str, &str)]],
) -> ExportMetricsServiceRequest {
    let mut request = one_gauge(KUBERAY, name, number_data_point::Value::AsInt(10));
    let metric = &mut request.resource_metrics[0].scope_metrics[0].metrics[0];
    let point = |labels: &&[(&str, &str)]| NumberDataPoint {
        attributes: attributes(labels),
        time_unix_nano: T0,
        value: Some(number_data_point::Value::AsDouble(10.0)),
        ..Default::default()
    };
    metric.data = Some(Data::Sum(Sum {
        data_points: points.iter().map(point).collect(),
        aggregation_temporality: temporality as i32,
        is_monotonic: true,
    }));
    request
}

#[test]
fn controller_counters_are_counter_events_per_controller_and_series() {
    let reconciles = counters(&tagged_metrics(METRICS));
    assert_eq!(reconciles.len(), 1, "{reconciles:?}");
    let reconcile = &reconciles[0];
    assert_eq!(reconcile.counter, Counter::Reconciles);
    assert_eq!(reconcile.controller, "rayjob");
    assert_eq!(reconcile.series, "result=success");
    assert_eq!((reconcile.value, reconcile.cumulative), (1520.0, true));
    assert_eq!(
        (reconcile.instance.as_str(), &reconcile.operator),
        (POD, &kuberay())
    );

    let cumulative = AggregationTemporality::Cumulative;
    let requests = counters(&one_sum(
        "rest_client_requests_total",
        cumulative,
        &[
            &[("code", "200"), ("method", "PUT")],
            &[("code", "409"), ("method", "PUT")],
        ],
    ));
    let seen: Vec<(Counter, &str)> = requests
        .iter()
        .map(|c| (c.counter, c.series.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (Counter::ApiRequests, "code=200,method=PUT"),
            (Counter::ApiConflicts, "code=409,method=PUT"),
            (Counter::ApiRequests, "code=409,method=PUT"),
        ]
    );

    // Older controller-runtime names the work queue `name` only.
    let retries = counters(&one_sum(
        "workqueue_retries_total",
        cumulative,
        &[&[("name", "raycluster")]],
    ));
    assert_eq!(retries[0].counter, Counter::Retries);
    assert_eq!(retries[0].controller, "raycluster");

    // An OTLP SDK's delta sum, named without `_total`.
    let errors = counters(&one_sum(
        "controller_runtime_reconcile_errors",
        AggregationTemporality::Delta,
        &[&[("controller", "rayjob")]],
    ));
    assert_eq!(errors[0].counter, Counter::ReconcileErrors);
    assert!(!errors[0].cumulative);
    assert!(counters(&one_sum("workqueue_adds_total", cumulative, &[&[]])).is_empty());
}

#[test]
fn watched_runtime_gauges_are_gauge_events_per_work_queue() {
    let events = gauges(&tagged_metrics(METRICS));
    let expected = [
        ("workqueue_depth{rayjob}", 42.0),
        ("workqueue_depth{raycluster}", 0.0),
        ("go_goroutines", 187.0),
        ("process_resident_memory_bytes", 62_754_816.0),
    ];
    let seen: Vec<(&str, f64)> = events.iter().map(|g| (g.name.as_str(), g.value)).collect();
    assert_eq!(seen, expected, "counters and histograms are not watched");
    for gauge in &events {
        assert_eq!(gauge.time, T0 + 30 * NANOS_PER_SECOND);
        assert_eq!(gauge.operator, kuberay());
        assert_eq!(gauge.instance, POD);
    }
}

/// A request with one gauge point of `name` of an instance described by `resource`.
fn one_gauge(
    resource: &[(&str, &str)],
    name: &str,
    value: number_data_point::Value,
) -> ExportMetricsServiceRequest {
    let point = NumberDataPoint {
        time_unix_nano: T0,
        value: Some(value),
        ..Default::default()
    };
    let metric = Metric {
        name: name.into(),
        data: Some(Data::Gauge(Gauge {
            data_points: vec![point],
        })),
        ..Default::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: attributes(resource),
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![metric],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn gauges_need_an_instance_and_take_integer_points() {
    let int = number_data_point::Value::AsInt(215);
    let by_pod = gauges(&one_gauge(KUBERAY, "go_goroutines", int));
    assert_eq!((by_pod[0].instance.as_str(), by_pod[0].value), (POD, 215.0));
    let sdk = [
        (OPERATOR_NAME, "doc-controller"),
        ("service.instance.id", "doc-controller-1"),
    ];
    let by_instance_id = gauges(&one_gauge(&sdk, "go_goroutines", int));
    assert_eq!(by_instance_id[0].instance, "doc-controller-1");
    let nameless = [(OPERATOR_NAME, "doc-controller")];
    assert!(gauges(&one_gauge(&nameless, "go_goroutines", int)).is_empty());
    let unwatched = number_data_point::Value::AsDouble(1.0);
    assert!(gauges(&one_gauge(KUBERAY, "go_threads", unwatched)).is_empty());
}

#[test]
fn a_growing_work_queue_of_one_controller_is_a_workqueue_backlog() {
    let mut events = Vec::new();
    for sample in 0..64 {
        let mut request: ExportMetricsServiceRequest = tagged_metrics(METRICS);
        for point in request.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter_mut()
            .filter_map(|m| match &mut m.data {
                Some(Data::Gauge(gauge)) if m.name == "workqueue_depth" => Some(gauge),
                _ => None,
            })
            .flat_map(|gauge| &mut gauge.data_points)
        {
            point.time_unix_nano = T0 + sample * 15 * NANOS_PER_SECOND;
            point.value = Some(number_data_point::Value::AsDouble(
                10.0 + 3.0 * sample as f64,
            ));
        }
        from_metrics(&request, &mut events);
    }
    let signals = run(events);
    let leak = signals
        .iter()
        .find(|s| s.signal == SignalType::ResourceLeak)
        .expect("a resource leak");
    assert_eq!(leak.cause, "workqueue_backlog");
}
