//! The agent's delivery promises over real sockets: backpressure refuses instead of
//! dropping, retryable failures are retried, permanent ones are dropped and counted,
//! SIGTERM delivers what is queued, and over-size requests are refused.

mod common;

use std::time::Duration;

use common::{Behaviour, Opscope, OtlpSink, Ports, http_post, numbered_spans};
use flate2::Compression;
use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric, number_data_point,
};
use prost::Message;
use std::io::Write;
use tokio::runtime::Runtime;
use tonic::Code;
use tonic::transport::Channel;

const TIMEOUT: Duration = Duration::from_secs(20);
const SPANS_PER_REQUEST: usize = 10;

/// Settings of the exporter to the sink: small queue, fast retries, a long send
/// timeout so that a held request is not abandoned while the test holds it.
fn exporter(sink: &OtlpSink, queue_size: usize) -> String {
    format!(
        "{{ endpoint: {}, timeout: 30s, sending_queue: {{ queue_size: {queue_size}, num_consumers: 1 }}, \
         retry_on_failure: {{ initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 20s }} }}",
        sink.endpoint()
    )
}

fn spans(request: usize, count: usize) -> ExportTraceServiceRequest {
    numbered_spans(request, count, "")
}

struct Client {
    runtime: Runtime,
    client: TraceServiceClient<Channel>,
}

impl Client {
    fn connect(ports: &Ports) -> Self {
        let runtime = Runtime::new().expect("client runtime");
        let client = runtime
            .block_on(TraceServiceClient::connect(ports.grpc_url()))
            .expect("connect to opscope");
        Client { runtime, client }
    }

    fn export(&mut self, request: ExportTraceServiceRequest) -> Result<(), tonic::Status> {
        let client = &mut self.client;
        self.runtime.block_on(client.export(request)).map(|_| ())
    }

    /// Sends requests of `SPANS_PER_REQUEST` spans until one is refused; returns the
    /// spans accepted and the refusal.
    fn send_until_refused(&mut self, limit: usize) -> (usize, tonic::Status) {
        for request in 0..limit {
            if let Err(status) = self.export(spans(request, SPANS_PER_REQUEST)) {
                return (request * SPANS_PER_REQUEST, status);
            }
        }
        panic!("{limit} requests were all accepted although the downstream is blocked");
    }
}

#[test]
fn a_blocked_downstream_makes_receivers_refuse_and_nothing_accepted_is_lost() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Hold);
    let ports = Ports::ANY;
    let opscope = Opscope::start(&ports.config("otlp/sink", &exporter(&sink, 1)));
    let ports = opscope.ports();
    let mut client = Client::connect(&ports);

    let (accepted, refusal) = client.send_until_refused(2000);
    assert_eq!(refusal.code(), Code::Unavailable, "{refusal:?}");
    assert!(accepted > 0, "some requests fit before the queues filled");

    let http = http_post(
        &ports.http_addr(),
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &spans(9999, 1).encode_to_vec(),
    )
    .expect("HTTP request");
    assert_eq!(http.status, 503, "{}", http.text());
    assert!(
        http.header("Retry-After").is_some(),
        "503 carries Retry-After"
    );

    let refused = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_spans_total",
        &[("reason", "pipeline_full")],
    );
    assert_eq!(refused, (SPANS_PER_REQUEST + 1) as f64);

    sink.release();
    assert!(
        sink.wait_for(TIMEOUT, |received| received.span_count() >= accepted),
        "only {} of {accepted} accepted spans arrived",
        sink.span_count()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        sink.span_count(),
        accepted,
        "count in = count out, no duplicates"
    );
    let sent = opscope.wait_for_metric(
        &ports.metrics_addr(),
        "opscope_exporter_sent_spans_total",
        &[("exporter", "otlp/sink")],
        accepted as f64,
        TIMEOUT,
    );
    assert_eq!(sent, accepted as f64);
    common::report_fault(
        "blocked_backend_memory_queue",
        &[
            ("in", accepted as f64),
            ("out", sink.span_count() as f64),
            ("duplicated", 0.0),
            ("refused_spans", refused),
        ],
    );
}

#[test]
fn unavailable_downstream_is_retried_until_everything_is_delivered() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Fail {
        code: Code::Unavailable,
        times: 3,
    });
    let ports = Ports::ANY;
    let opscope = Opscope::start(&ports.config("otlp/sink", &exporter(&sink, 10)));
    let ports = opscope.ports();
    let mut client = Client::connect(&ports);
    for request in 0..5 {
        client
            .export(spans(request, SPANS_PER_REQUEST))
            .expect("accepted");
    }
    let total = 5 * SPANS_PER_REQUEST;
    assert!(
        sink.wait_for(TIMEOUT, |r| r.span_count() == total),
        "got {}",
        sink.span_count()
    );
    assert!(sink.attempts() >= 4, "three failures, then success");
    let failed = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_exporter_send_failed_spans_total",
        &[],
    );
    assert_eq!(failed, 0.0);
}

#[test]
fn invalid_argument_is_dropped_and_counted_then_delivery_resumes() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Fail {
        code: Code::InvalidArgument,
        times: 1,
    });
    let ports = Ports::ANY;
    let opscope = Opscope::start(&ports.config("otlp/sink", &exporter(&sink, 10)));
    let ports = opscope.ports();
    let mut client = Client::connect(&ports);
    client.export(spans(0, 7)).expect("accepted");
    let dropped = opscope.wait_for_metric(
        &ports.metrics_addr(),
        "opscope_exporter_send_failed_spans_total",
        &[("exporter", "otlp/sink"), ("reason", "permanent_error")],
        7.0,
        TIMEOUT,
    );
    assert_eq!(dropped, 7.0);
    assert_eq!(sink.span_count(), 0, "a permanent error is not retried");

    client.export(spans(1, 3)).expect("accepted");
    assert!(sink.wait_for(TIMEOUT, |r| r.span_count() == 3));
    assert!(
        opscope.logs().contains("permanent_error"),
        "the drop is logged with its reason"
    );
}

#[test]
fn sigterm_delivers_queued_data_before_exiting() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Hold);
    let ports = Ports::ANY;
    let mut opscope = Opscope::start(&ports.config("otlp/sink", &exporter(&sink, 10)));
    let ports = opscope.ports();
    let mut client = Client::connect(&ports);
    for request in 0..4 {
        client
            .export(spans(request, SPANS_PER_REQUEST))
            .expect("accepted");
    }
    std::thread::sleep(Duration::from_millis(200));
    opscope.sigterm();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        opscope.wait_exit(Duration::ZERO).is_none(),
        "opscope waits for queued data"
    );
    sink.release();
    let status = opscope
        .wait_exit(TIMEOUT)
        .expect("opscope exits after delivering");
    assert!(status.success(), "exit status {status}");
    assert_eq!(sink.span_count(), 4 * SPANS_PER_REQUEST);
}

#[test]
fn shutdown_timeout_bounds_the_wait_for_an_unreachable_downstream() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Fail {
        code: Code::Unavailable,
        times: usize::MAX,
    });
    let ports = Ports::ANY;
    let config = ports
        .config("otlp/sink", &exporter(&sink, 10))
        .replace("shutdown_timeout: 10s", "shutdown_timeout: 1s");
    let mut opscope = Opscope::start(&config);
    let ports = opscope.ports();
    let mut client = Client::connect(&ports);
    client.export(spans(0, 5)).expect("accepted");
    std::thread::sleep(Duration::from_millis(300));
    opscope.sigterm();
    let status = opscope
        .wait_exit(Duration::from_secs(10))
        .expect("exits within the timeout");
    assert!(status.success(), "exit status {status}");
    let logs = opscope.logs();
    assert!(logs.contains("shutdown timeout reached"), "{logs}");
    assert!(
        logs.contains("reason=\"shutdown\"") || logs.contains("reason=shutdown"),
        "{logs}"
    );
    assert!(
        logs.contains("dropping 5 spans"),
        "the loss is logged with its count: {logs}"
    );
    common::report_fault(
        "sigterm_unreachable_backend_memory_queue",
        &[("in", 5.0), ("out", 0.0), ("lost_and_logged", 5.0)],
    );
}

fn limits_config(ports: &Ports, sink: &OtlpSink) -> String {
    ports
        .config("otlp/sink", &exporter(sink, 10))
        .replace(
            &format!("grpc: {{ endpoint: 127.0.0.1:{} }}", ports.grpc),
            &format!(
                "grpc: {{ endpoint: 127.0.0.1:{}, max_recv_msg_size_mib: 1 }}",
                ports.grpc
            ),
        )
        .replace(
            &format!("http: {{ endpoint: 127.0.0.1:{} }}", ports.http),
            &format!(
                "http: {{ endpoint: 127.0.0.1:{}, max_request_body_size: 100000 }}",
                ports.http
            ),
        )
}

/// A request of about `bytes` bytes.
fn large_request(bytes: usize) -> ExportTraceServiceRequest {
    let mut request = spans(0, 1);
    request.resource_spans[0].scope_spans[0].spans[0].name = "x".repeat(bytes);
    request
}

#[test]
fn over_size_requests_are_refused_with_resource_exhausted_and_413() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&limits_config(&ports, &sink));
    let ports = opscope.ports();
    let mut client = Client::connect(&ports);

    let status = client
        .export(large_request(2 * 1024 * 1024))
        .expect_err("2 MiB is over 1 MiB");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    client
        .export(spans(1, 2))
        .expect("a small request still passes");

    let protobuf = [("Content-Type", "application/x-protobuf")];
    let plain = large_request(200_000).encode_to_vec();
    let response = http_post(&ports.http_addr(), "/v1/traces", &protobuf, &plain).expect("HTTP");
    assert_eq!(response.status, 413);

    // Small on the wire, large once inflated: refused without inflating it all.
    let mut gzip = GzEncoder::new(Vec::new(), Compression::best());
    gzip.write_all(&large_request(5_000_000).encode_to_vec())
        .expect("gzip");
    let bomb = gzip.finish().expect("gzip");
    assert!(bomb.len() < 100_000);
    let headers = [
        ("Content-Type", "application/x-protobuf"),
        ("Content-Encoding", "gzip"),
    ];
    let response = http_post(&ports.http_addr(), "/v1/traces", &headers, &bomb).expect("HTTP");
    assert_eq!(response.status, 413, "{}", response.text());

    let refused = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_requests_total",
        &[("reason", "too_large")],
    );
    assert_eq!(refused, 3.0);
    assert!(sink.wait_for(TIMEOUT, |r| r.span_count() == 2));
}

#[test]
fn undecodable_and_unsupported_requests_get_clear_answers() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&ports.config("otlp/sink", &exporter(&sink, 10)));
    let ports = opscope.ports();
    let addr = ports.http_addr();

    let response = http_post(
        &addr,
        "/v1/logs",
        &[("Content-Type", "application/x-protobuf")],
        b"\xff\xff\xff",
    )
    .expect("HTTP");
    assert_eq!(response.status, 400);
    let status = tonic_types::pb::Status::decode(response.body.as_slice())
        .expect("a google.rpc.Status body");
    assert!(
        status.message.contains("undecodable OTLP/protobuf"),
        "{}",
        status.message
    );

    let response = http_post(
        &addr,
        "/v1/logs",
        &[("Content-Type", "application/json")],
        b"{\"resourceLogs\": 5}",
    )
    .expect("HTTP");
    assert_eq!(response.status, 400);
    assert!(
        response.text().contains("undecodable OTLP/JSON"),
        "{}",
        response.text()
    );

    let response = http_post(
        &addr,
        "/v1/logs",
        &[("Content-Type", "text/plain")],
        b"hello",
    )
    .expect("HTTP");
    assert_eq!(response.status, 415);
}

/// A message whose field 1 is a number where OTLP has a list of resources: valid
/// protobuf, but not an export request.
#[derive(Clone, PartialEq, prost::Message)]
struct NotAnExportRequest {
    #[prost(uint64, tag = "1")]
    resource_spans: u64,
}

#[test]
fn undecodable_grpc_requests_are_invalid_argument_and_counted() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&ports.config("otlp/sink", &exporter(&sink, 10)));
    let ports = opscope.ports();
    let runtime = Runtime::new().expect("client runtime");
    let status = runtime.block_on(async {
        let channel = Channel::from_shared(ports.grpc_url())
            .expect("url")
            .connect()
            .await
            .expect("connect");
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("ready");
        let path = http::uri::PathAndQuery::from_static(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        );
        let codec = tonic_prost::ProstCodec::<NotAnExportRequest, NotAnExportRequest>::default();
        let request = tonic::Request::new(NotAnExportRequest { resource_spans: 7 });
        grpc.unary(request, path, codec)
            .await
            .expect_err("not an export request")
    });
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let refused = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_requests_total",
        &[("transport", "grpc"), ("reason", "bad_request")],
    );
    assert_eq!(refused, 1.0);
}

/// A gauge with one data point per pod, `pods` pods: one series each once exported
/// to Prometheus.
fn gauge_per_pod(pods: usize) -> ExportMetricsServiceRequest {
    let points = (0..pods)
        .map(|pod| NumberDataPoint {
            attributes: vec![KeyValue {
                key: "pod".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(format!("pod-{pod}"))),
                }),
                ..Default::default()
            }],
            time_unix_nano: 1_700_000_000_000_000_000,
            value: Some(number_data_point::Value::AsDouble(pod as f64)),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "queue_depth".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: points,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn series_beyond_max_series_are_counted_as_refused_not_sent() {
    let ports = Ports::ANY;
    let exporter = "{ endpoint: 127.0.0.1:0, max_series: 5 }";
    let opscope = Opscope::start(&ports.config("prometheus", exporter));
    let ports = opscope.ports();
    let endpoint = opscope.address("exporters.prometheus");
    let answer = http_post(
        &ports.http_addr(),
        "/v1/metrics",
        &[("Content-Type", "application/x-protobuf")],
        &gauge_per_pod(20).encode_to_vec(),
    )
    .expect("post the metrics");
    assert_eq!(answer.status, 200, "{}", answer.text());

    let refused = opscope.wait_for_metric(
        &ports.metrics_addr(),
        "opscope_exporter_send_failed_metric_points_total",
        &[("exporter", "prometheus"), ("reason", "max_series")],
        15.0,
        TIMEOUT,
    );
    assert_eq!(refused, 15.0, "{}", opscope.logs());
    let sent = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_exporter_sent_metric_points_total",
        &[("exporter", "prometheus")],
    );
    assert_eq!(sent, 5.0, "only the series kept count as sent");
    let scraped = common::http_get(&endpoint, "/metrics").expect("scrape the exporter");
    let kept = scraped
        .text()
        .lines()
        .filter(|line| line.starts_with("queue_depth{"))
        .count();
    assert_eq!(kept, 5, "{}", scraped.text());
}
