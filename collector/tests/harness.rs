//! Self-checks of the test harness, independent of the agent: the metrics parser and the sinks' programmable behaviours.
mod common;

use std::io::Write;
use std::time::Duration;

use common::{Behaviour, OtlpSink, http_post, sum_samples, wait_until};
use flate2::Compression;
use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tokio::runtime::Runtime;
use tonic::Code;

const TIMEOUT: Duration = Duration::from_secs(10);

fn one_span() -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![1; 16],
                    span_id: vec![2; 8],
                    name: "probe".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Sends one span to a gRPC sink and returns the status code of the answer.
async fn export_one(endpoint: String) -> Code {
    let mut client = TraceServiceClient::connect(endpoint)
        .await
        .expect("connect to the sink");
    match client.export(one_span()).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

fn runtime() -> Runtime {
    Runtime::new().expect("build a runtime")
}

#[test]
fn sums_openmetrics_samples_by_label() {
    let exposition = "# TYPE opscope_receiver_accepted_spans counter\n\
        opscope_receiver_accepted_spans_total{receiver=\"otlp\",transport=\"grpc\"} 3\n\
        opscope_receiver_accepted_spans_total{receiver=\"otlp\",transport=\"http\"} 4.0\n\
        opscope_exporter_queue_size{exporter=\"a\\\"b\",pipeline=\"traces\"} 2 1700000000\n\
        opscope_up 1\n# EOF\n";
    let accepted = "opscope_receiver_accepted_spans_total";
    assert_eq!(sum_samples(exposition, accepted, &[]), 7.0);
    assert_eq!(
        sum_samples(exposition, accepted, &[("transport", "http")]),
        4.0
    );
    assert_eq!(
        sum_samples(exposition, accepted, &[("transport", "none")]),
        0.0
    );
    let queue = "opscope_exporter_queue_size";
    assert_eq!(sum_samples(exposition, queue, &[("exporter", "a\"b")]), 2.0);
    assert_eq!(sum_samples(exposition, "opscope_up", &[]), 1.0);
}

#[test]
fn grpc_sink_fails_the_first_requests_then_accepts() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Fail {
        code: Code::Unavailable,
        times: 2,
    });
    let runtime = runtime();
    let codes: Vec<Code> = (0..3)
        .map(|_| runtime.block_on(export_one(sink.endpoint())))
        .collect();
    assert_eq!(codes, [Code::Unavailable, Code::Unavailable, Code::Ok]);
    assert_eq!(sink.attempts(), 3);
    assert_eq!(sink.span_count(), 1, "failed requests are not recorded");
}

#[test]
fn grpc_sink_holds_requests_until_released() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Hold);
    let runtime = runtime();
    let export = runtime.spawn(export_one(sink.endpoint()));
    assert!(
        wait_until(TIMEOUT, || sink.attempts() == 1),
        "the request arrived"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(!export.is_finished(), "a held request is not answered");
    assert_eq!(sink.span_count(), 0);

    sink.release();
    let code = runtime.block_on(export).expect("the export task");
    assert_eq!(code, Code::Ok);
    assert_eq!(sink.span_count(), 1);
}

#[test]
fn http_sink_accepts_gzip_and_answers_failures_with_http_statuses() {
    let sink = OtlpSink::http();
    let addr = sink.addr().to_string();
    let body = one_span().encode_to_vec();
    let protobuf = ("Content-Type", "application/x-protobuf");

    sink.set_behaviour(Behaviour::Fail {
        code: Code::Unavailable,
        times: 1,
    });
    let refused = http_post(&addr, "/v1/traces", &[protobuf], &body).expect("POST");
    assert_eq!(refused.status, 503);

    let mut gzip = GzEncoder::new(Vec::new(), Compression::default());
    gzip.write_all(&body).expect("gzip");
    let compressed = gzip.finish().expect("gzip");
    let headers = [protobuf, ("Content-Encoding", "gzip")];
    let accepted = http_post(&addr, "/v1/traces", &headers, &compressed).expect("POST");
    assert_eq!(accepted.status, 200, "{}", accepted.text());
    assert_eq!(
        accepted.header("content-type"),
        Some("application/x-protobuf")
    );
    assert_eq!(sink.received().traces, [one_span()]);
}
