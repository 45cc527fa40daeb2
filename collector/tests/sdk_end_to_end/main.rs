//! End to end with the real OpenTelemetry Rust SDK: traces, logs and metrics sent to
//! opscope over OTLP/gRPC and OTLP/HTTP arrive unchanged downstream and are counted;
//! plus one OTLP/JSON request (`otlp_json.rs`). `views.rs` holds the shapes both
//! sides are compared in.
#[path = "../common/mod.rs"]
mod common;
mod otlp_json;
mod views;

use views::*;

use std::time::{Duration, SystemTime};

use common::{Opscope, OtlpSink, Ports, Received};
use opentelemetry::logs::{
    AnyValue as LogValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity,
};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt as _, TraceFlags, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Array, Context, KeyValue, SpanId, TraceId, Value};
use opentelemetry_otlp::{
    Compression, LogExporter, MetricExporter, Protocol, SpanExporter, WithExportConfig as _,
    WithTonicConfig as _,
};
use opentelemetry_proto::tonic::metrics::v1::{Metric, metric::Data, number_data_point};
use opentelemetry_proto::tonic::trace::v1::{span, status};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tokio::runtime::Runtime;

const SCOPE: &str = "opscope-e2e";
const COUNTER: &str = "orders.placed";
const HISTOGRAM: &str = "checkout.duration";
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
enum Transport {
    Grpc,
    Http,
}

impl Transport {
    /// The `transport` label of opscope's receiver metrics.
    fn label(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

#[test]
fn sdk_over_grpc_arrives_unchanged_through_the_otlp_exporter() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let settings = format!("{{ endpoint: {}, compression: gzip }}", sink.endpoint());
    let opscope = Opscope::start(&ports.config("otlp/sink", &settings));
    let ports = opscope.ports();
    round_trip(Transport::Grpc, &ports, &opscope, &sink, "otlp/sink");
}

#[test]
fn sdk_over_http_arrives_unchanged_through_the_otlphttp_exporter() {
    let sink = OtlpSink::http();
    let ports = Ports::ANY;
    let settings = format!("{{ endpoint: {} }}", sink.endpoint());
    let config = ports.config("otlphttp/sink", &settings);
    let opscope = Opscope::start(&config);
    let ports = opscope.ports();
    round_trip(Transport::Http, &ports, &opscope, &sink, "otlphttp/sink");
}

/// Sends one workload with the SDK, then checks what reached `sink` and opscope's counters.
fn round_trip(
    transport: Transport,
    ports: &Ports,
    opscope: &Opscope,
    sink: &OtlpSink,
    exporter: &str,
) {
    let sent = send_with_sdk(transport, ports);

    let delivered = sink.wait_for(DELIVERY_TIMEOUT, |received| {
        received.span_count() >= sent.spans.len()
            && received.log_record_count() >= sent.logs.len()
            && last_metric(received, COUNTER).is_some()
            && last_metric(received, HISTOGRAM).is_some()
    });
    let received = sink.received();
    assert!(
        delivered,
        "not everything reached the sink within {DELIVERY_TIMEOUT:?}: {} spans, {} log records, {} metric points",
        received.span_count(),
        received.log_record_count(),
        received.metric_point_count(),
    );

    assert_resources_unchanged(&received, &sent.resource);
    assert_eq!(
        sorted(received.spans().map(SpanView::from)),
        sorted(sent.spans)
    );
    assert_eq!(
        sorted(received.log_records().map(LogView::from)),
        sorted(sent.logs)
    );
    assert_metrics_unchanged(&received);
    assert_counted(opscope, ports, transport, exporter, sink);
}

/// What the SDK was asked to send, in the shape it must arrive in.
struct Sent {
    resource: Resource,
    spans: Vec<SpanView>,
    logs: Vec<LogView>,
}

/// Emits the workload through SDK providers exporting to opscope, and shuts them down,
/// which flushes every signal exactly once (metrics included: the periodic reader
/// exports on shutdown, long before its 60 s interval).
fn send_with_sdk(transport: Transport, ports: &Ports) -> Sent {
    let resource = Resource::builder()
        .with_service_name("checkout")
        .with_attribute(KeyValue::new("deployment.environment.name", "e2e"))
        .with_attribute(KeyValue::new("service.instance.number", 7_i64))
        .build();
    let client = SdkClient::new(transport, ports, resource.clone());
    let spans = emit_traces(&client.tracers);
    let failed_span = spans
        .iter()
        .find(|span| span.status.0 == status::StatusCode::Error)
        .expect("a failed span");
    let logs = emit_logs(&client.loggers, &failed_span.ids);
    emit_metrics(&client.meters);
    client.shutdown();
    Sent {
        resource,
        spans,
        logs,
    }
}

/// The three SDK providers, each with a batching OTLP exporter pointed at opscope.
struct SdkClient {
    tracers: SdkTracerProvider,
    loggers: SdkLoggerProvider,
    meters: SdkMeterProvider,
    /// Drives the tonic exporters' channels; dropped only after the providers shut down.
    _runtime: Option<Runtime>,
}

impl SdkClient {
    fn new(transport: Transport, ports: &Ports, resource: Resource) -> Self {
        let (spans, logs, metrics, runtime) = match transport {
            Transport::Grpc => {
                // The tonic exporters must be built inside a Tokio runtime and keep using it.
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("build the SDK runtime");
                let _context = runtime.enter();
                let url = ports.grpc_url();
                let spans = SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(&url)
                    .with_compression(Compression::Gzip)
                    .with_timeout(EXPORT_TIMEOUT)
                    .build();
                let logs = LogExporter::builder()
                    .with_tonic()
                    .with_endpoint(&url)
                    .with_compression(Compression::Gzip)
                    .with_timeout(EXPORT_TIMEOUT)
                    .build();
                let metrics = MetricExporter::builder()
                    .with_tonic()
                    .with_endpoint(&url)
                    .with_compression(Compression::Gzip)
                    .with_timeout(EXPORT_TIMEOUT)
                    .build();
                (spans, logs, metrics, Some(runtime))
            }
            Transport::Http => {
                // reqwest is built with `rustls-no-provider` in this workspace, and panics on
                // building a client unless a process-wide crypto provider is installed.
                let _ = rustls::crypto::ring::default_provider().install_default();
                // A full URL per signal: the SDK appends no `/v1/...` path to an explicit endpoint.
                let url = |path: &str| format!("{}{path}", ports.http_url());
                let spans = SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(url("/v1/traces"))
                    .with_timeout(EXPORT_TIMEOUT)
                    .build();
                let logs = LogExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(url("/v1/logs"))
                    .with_timeout(EXPORT_TIMEOUT)
                    .build();
                let metrics = MetricExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(url("/v1/metrics"))
                    .with_timeout(EXPORT_TIMEOUT)
                    .build();
                (spans, logs, metrics, None)
            }
        };
        SdkClient {
            tracers: SdkTracerProvider::builder()
                .with_resource(resource.clone())
                .with_batch_exporter(spans.expect("build the span exporter"))
                .build(),
            loggers: SdkLoggerProvider::builder()
                .with_resource(resource.clone())
                .with_batch_exporter(logs.expect("build the log exporter"))
                .build(),
            meters: SdkMeterProvider::builder()
                .with_resource(resource)
                .with_periodic_exporter(metrics.expect("build the metric exporter"))
                .build(),
            _runtime: runtime,
        }
    }

    fn shutdown(self) {
        self.tracers.shutdown().expect("flush spans");
        self.loggers.shutdown().expect("flush logs");
        self.meters.shutdown().expect("flush metrics");
    }
}

/// A fixed point in time, `millis` after a base instant, with nanosecond digits set.
fn at(millis: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789 + millis * 1_000_000)
}

fn unix_nanos(time: SystemTime) -> u64 {
    let since_epoch = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after the epoch");
    u64::try_from(since_epoch.as_nanos()).expect("fits in u64")
}

/// A server span with two children, one of which failed after an event; returns the
/// spans as they must arrive.
fn emit_traces(provider: &SdkTracerProvider) -> Vec<SpanView> {
    let tracer = provider.tracer(SCOPE);
    let root_attributes = vec![
        KeyValue::new("http.request.method", "POST"),
        KeyValue::new("http.response.status_code", 402_i64),
        KeyValue::new("cart.total", 42.5),
        KeyValue::new("cart.express", true),
        KeyValue::new(
            "cart.items",
            Value::Array(Array::String(vec!["apple".into(), "pear".into()])),
        ),
        KeyValue::new("cart.quantities", Value::Array(Array::I64(vec![3, 1]))),
    ];
    let root = tracer
        .span_builder("POST /checkout")
        .with_kind(SpanKind::Server)
        .with_start_time(at(0))
        .with_attributes(root_attributes.clone())
        .start(&tracer);
    let root_context = root.span_context().clone();
    let parent = Context::new().with_span(root);

    let load_attributes = vec![KeyValue::new("db.system.name", "postgresql")];
    let mut load = tracer
        .span_builder("load cart")
        .with_kind(SpanKind::Internal)
        .with_start_time(at(1))
        .with_attributes(load_attributes.clone())
        .start_with_context(&tracer, &parent);
    let load_context = load.span_context().clone();
    load.end_with_timestamp(at(5));

    let charge_attributes = vec![
        KeyValue::new("payment.provider", "acme"),
        KeyValue::new("payment.attempt", 2_i64),
    ];
    let event_attributes = vec![KeyValue::new("decline.code", "51")];
    let mut charge = tracer
        .span_builder("charge card")
        .with_kind(SpanKind::Client)
        .with_start_time(at(6))
        .with_attributes(charge_attributes.clone())
        .start_with_context(&tracer, &parent);
    charge.add_event_with_timestamp("card.declined", at(9), event_attributes.clone());
    charge.set_status(Status::error("card declined"));
    let charge_context = charge.span_context().clone();
    charge.end_with_timestamp(at(10));

    parent.span().set_status(Status::Ok);
    parent.span().end_with_timestamp(at(12));

    vec![
        SpanView {
            name: "POST /checkout".into(),
            kind: span::SpanKind::Server,
            ids: Ids::of(&root_context),
            parent_span_id: vec![],
            flags: local_span_flags(&root_context),
            start: unix_nanos(at(0)),
            end: unix_nanos(at(12)),
            attributes: attributes_of(&root_attributes),
            events: vec![],
            status: (status::StatusCode::Ok, String::new()),
        },
        SpanView {
            name: "charge card".into(),
            kind: span::SpanKind::Client,
            ids: Ids::of(&charge_context),
            parent_span_id: Ids::of(&root_context).span_id,
            flags: local_span_flags(&charge_context),
            start: unix_nanos(at(6)),
            end: unix_nanos(at(10)),
            attributes: attributes_of(&charge_attributes),
            events: vec![(
                unix_nanos(at(9)),
                "card.declined".into(),
                attributes_of(&event_attributes),
            )],
            status: (status::StatusCode::Error, "card declined".into()),
        },
        SpanView {
            name: "load cart".into(),
            kind: span::SpanKind::Internal,
            ids: Ids::of(&load_context),
            parent_span_id: Ids::of(&root_context).span_id,
            flags: local_span_flags(&load_context),
            start: unix_nanos(at(1)),
            end: unix_nanos(at(5)),
            attributes: attributes_of(&load_attributes),
            events: vec![],
            status: (status::StatusCode::Unset, String::new()),
        },
    ]
}

/// An error record tied to the span `failed` and an info record with no trace context.
fn emit_logs(provider: &SdkLoggerProvider, failed: &Ids) -> Vec<LogView> {
    let logger = provider.logger(SCOPE);
    let error_attributes = [
        ("order.id", LogValue::from("o-123")),
        ("payment.attempt", LogValue::Int(2)),
        ("order.amount", LogValue::Double(19.99)),
        ("payment.retryable", LogValue::Boolean(false)),
    ];
    let mut error = logger.create_log_record();
    error.set_timestamp(at(9));
    error.set_severity_number(Severity::Error);
    error.set_severity_text("ERROR");
    error.set_body("payment declined for order o-123".into());
    error.add_attributes(error_attributes.clone());
    let trace_id = TraceId::from_bytes(to_array(&failed.trace_id));
    let span_id = SpanId::from_bytes(to_array(&failed.span_id));
    error.set_trace_context(trace_id, span_id, Some(TraceFlags::SAMPLED));
    logger.emit(error);

    let info_attributes = [("order.items", LogValue::Int(2))];
    let mut info = logger.create_log_record();
    info.set_timestamp(at(12));
    info.set_severity_number(Severity::Info);
    info.set_severity_text("INFO");
    info.set_body("checkout finished".into());
    info.add_attributes(info_attributes.clone());
    logger.emit(info);

    vec![
        LogView {
            time: unix_nanos(at(9)),
            severity_number: Severity::Error as i32,
            severity_text: "ERROR".into(),
            body: Some(string_value("payment declined for order o-123")),
            attributes: log_attributes_of(&error_attributes),
            ids: failed.clone(),
            flags: u32::from(TraceFlags::SAMPLED.to_u8()),
        },
        LogView {
            time: unix_nanos(at(12)),
            severity_number: Severity::Info as i32,
            severity_text: "INFO".into(),
            body: Some(string_value("checkout finished")),
            attributes: log_attributes_of(&info_attributes),
            ids: Ids::default(),
            flags: 0,
        },
    ]
}

/// A counter over two attribute sets and a histogram with explicit buckets; what must
/// arrive is checked by [`assert_metrics_unchanged`].
fn emit_metrics(provider: &SdkMeterProvider) {
    let meter = provider.meter(SCOPE);
    let orders = meter
        .u64_counter(COUNTER)
        .with_description("Orders placed")
        .with_unit("{order}")
        .build();
    orders.add(3, &[KeyValue::new("region", "eu")]);
    orders.add(4, &[KeyValue::new("region", "us")]);
    orders.add(2, &[KeyValue::new("region", "eu")]);

    let duration = meter
        .f64_histogram(HISTOGRAM)
        .with_unit("ms")
        .with_boundaries(vec![10.0, 100.0])
        .build();
    for millis in [5.0, 50.0, 500.0] {
        duration.record(millis, &[KeyValue::new("route", "/pay")]);
    }
}

/// Every resource that arrived carries exactly the SDK's resource attributes, and every
/// scope is the SDK's instrumentation scope.
fn assert_resources_unchanged(received: &Received, sent: &Resource) {
    let expected: Attributes = sent
        .iter()
        .map(|(key, value)| (key.to_string(), Some(attribute_value(value))))
        .collect();
    for resource in received.resources() {
        let resource = resource.expect("a resource");
        assert_eq!(attributes(&resource.attributes), expected);
    }
    for scope in received.scopes() {
        assert_eq!(scope.map(|s| s.name.as_str()), Some(SCOPE));
    }
}

/// The newest copy of the metric called `name` (a cumulative metric may be exported
/// more than once; each copy holds the running totals).
fn last_metric<'a>(received: &'a Received, name: &str) -> Option<&'a Metric> {
    received
        .metrics()
        .filter(|metric| metric.name == name)
        .last()
}

fn assert_metrics_unchanged(received: &Received) {
    let orders = last_metric(received, COUNTER).expect("the counter arrived");
    assert_eq!(
        (orders.description.as_str(), orders.unit.as_str()),
        ("Orders placed", "{order}")
    );
    let Some(Data::Sum(sum)) = &orders.data else {
        panic!("{COUNTER} is not a sum: {orders:?}");
    };
    assert!(sum.is_monotonic, "{COUNTER} is monotonic");
    let points: Vec<_> = sum
        .data_points
        .iter()
        .map(|point| (attributes(&point.attributes), point.value))
        .collect();
    let region = |name: &str| attributes_of(&[KeyValue::new("region", name.to_owned())]);
    let expected = [
        (region("eu"), Some(number_data_point::Value::AsInt(5))),
        (region("us"), Some(number_data_point::Value::AsInt(4))),
    ];
    assert_eq!(points.len(), expected.len(), "{points:?}");
    for point in &expected {
        assert!(points.contains(point), "{point:?} missing from {points:?}");
    }

    let duration = last_metric(received, HISTOGRAM).expect("the histogram arrived");
    assert_eq!(duration.unit, "ms");
    let Some(Data::Histogram(histogram)) = &duration.data else {
        panic!("{HISTOGRAM} is not a histogram: {duration:?}");
    };
    let [point] = histogram.data_points.as_slice() else {
        panic!("{HISTOGRAM} has not exactly one point: {histogram:?}");
    };
    assert_eq!(
        attributes(&point.attributes),
        attributes_of(&[KeyValue::new("route", "/pay")])
    );
    assert_eq!(point.count, 3);
    assert_eq!(point.sum, Some(555.0));
    assert_eq!(point.explicit_bounds, [10.0, 100.0]);
    assert_eq!(point.bucket_counts, [1, 1, 1]);
    assert_eq!((point.min, point.max), (Some(5.0), Some(500.0)));
}

/// opscope counted exactly what it received and what it delivered.
fn assert_counted(
    opscope: &Opscope,
    ports: &Ports,
    transport: Transport,
    exporter: &str,
    sink: &OtlpSink,
) {
    let received = sink.received();
    let metrics = ports.metrics_addr();
    let receiver = [("receiver", "otlp"), ("transport", transport.label())];
    for (signal, pipeline, delivered) in [
        ("spans", "traces", received.span_count()),
        ("log_records", "logs", received.log_record_count()),
        ("metric_points", "metrics", received.metric_point_count()),
    ] {
        let delivered = delivered as f64;
        let value = |family: &str, labels: &[(&str, &str)]| {
            opscope.wait_for_metric(&metrics, family, labels, delivered, EXPORT_TIMEOUT)
        };
        let accepted = format!("opscope_receiver_accepted_{signal}_total");
        assert_eq!(
            value(&accepted, &receiver),
            delivered,
            "{accepted}{receiver:?}"
        );
        let sent = format!("opscope_exporter_sent_{signal}_total");
        let exported = [("exporter", exporter), ("pipeline", pipeline)];
        assert_eq!(value(&sent, &exported), delivered, "{sent}{exported:?}");
    }
}
