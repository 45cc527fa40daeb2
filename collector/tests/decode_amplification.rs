//! Requests that are small on the wire and huge once decoded, against the running
//! agent under a 512 MiB memory limiter: 2 M empty spans in 3.8 MiB (4 KB gzipped)
//! are refused before decoding, over gRPC and HTTP, with the limit named, while the
//! agent's resident size stays far below the limit; one over the memory limiter's
//! room is refused as retryable. Malformed trace and span ids are refused by path.

mod common;

use std::io::Write;
use std::thread;
use std::time::Duration;

use common::{Opscope, OtlpSink, Ports, RssSampler, http_post, report_fault, resident_bytes};
use flate2::Compression;
use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tokio::runtime::Runtime;
use tonic::Code;
use tonic::codec::CompressionEncoding;

const MIB: u64 = 1024 * 1024;
const LIMIT_MIB: u64 = 512;
const TIMEOUT: Duration = Duration::from_secs(20);

/// The agent with a 512 MiB memory limiter and the receiver's `limits` set to `limits`.
fn config(ports: &Ports, sink: &OtlpSink, limits: &str) -> String {
    let limiter = format!(
        "processors:\n  memory_limiter: {{ check_interval: 100ms, limit_mib: {LIMIT_MIB} }}\n"
    );
    ports
        .config("otlp/sink", &format!("{{ endpoint: {} }}", sink.endpoint()))
        .replacen("processors:\n", &limiter, 1)
        .replace("processors: [batch]", "processors: [memory_limiter, batch]")
        .replacen(
            "  otlp:\n    protocols:\n",
            &format!("  otlp:\n    limits: {limits}\n    protocols:\n"),
            1,
        )
}

/// A length-delimited protobuf field.
fn length_delimited(field: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![(field << 3) | 2];
    let mut length = payload.len();
    while length >= 0x80 {
        out.push((length as u8 & 0x7f) | 0x80);
        length >>= 7;
    }
    out.push(length as u8);
    out.extend_from_slice(payload);
    out
}

/// A `ResourceSpans` holding one `ScopeSpans` of 2 M empty spans, as an export
/// request: 3.8 MiB, under the 4 MiB gRPC limit.
fn empty_spans() -> Vec<u8> {
    let spans = [0x12u8, 0x00].repeat(2_000_000);
    length_delimited(1, &length_delimited(2, &spans))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

/// Posts the gzipped amplification request to `/v1/traces` from four clients at
/// once, twice each; returns the answers' statuses and texts.
fn post_concurrently(ports: &Ports, body: &[u8]) -> Vec<(u16, String)> {
    thread::scope(|scope| {
        let clients: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    (0..2)
                        .map(|_| {
                            let response = http_post(
                                &ports.http_addr(),
                                "/v1/traces",
                                &[
                                    ("Content-Type", "application/x-protobuf"),
                                    ("Content-Encoding", "gzip"),
                                ],
                                body,
                            )
                            .expect("HTTP request");
                            (response.status, response.text())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|client| client.join().expect("client thread"))
            .collect()
    })
}

#[test]
fn many_empty_spans_are_refused_before_decoding_and_memory_stays_low() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&config(&ports, &sink, "{}"));
    let ports = opscope.ports();
    let body = empty_spans();
    let compressed = gzip(&body);
    assert!(compressed.len() < 8 * 1024, "{} bytes", compressed.len());

    let sampler = RssSampler::start(opscope.pid());
    let answers = post_concurrently(&ports, &compressed);
    let peak = sampler.peak();
    drop(sampler);
    for (status, text) in &answers {
        assert_eq!(*status, 413, "{text}");
        assert!(
            text.contains("the request holds 2000000 spans, more than limits.max_items 100000"),
            "{text}"
        );
    }

    let runtime = Runtime::new().expect("client runtime");
    let status = runtime
        .block_on(async {
            let mut client = TraceServiceClient::connect(ports.grpc_url())
                .await
                .expect("connect to opscope")
                .send_compressed(CompressionEncoding::Gzip);
            let request =
                ExportTraceServiceRequest::decode(body.as_slice()).expect("the request decodes");
            client.export(request).await
        })
        .expect_err("refused");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status.message(),
        "the request holds 2000000 spans, more than limits.max_items 100000"
    );

    let refused = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_spans_total",
        &[("reason", "too_large")],
    );
    assert_eq!(refused, 9.0 * 2_000_000.0);
    report_fault(
        "decode_amplification",
        &[
            ("requests", 9.0),
            ("spans_refused", refused),
            ("peak_rss_mib", (peak / MIB) as f64),
        ],
    );
    assert!(peak < 128 * MIB, "resident size reached {} MiB", peak / MIB);
    assert_eq!(sink.span_count(), 0);
}

#[test]
fn a_request_beyond_the_memory_limiters_room_is_refused_as_retryable() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    // A budget that lets 2 M spans through: the memory limiter must hold the line.
    let limits = "{ max_items: 10000000, max_decoded_size_mib: 4096 }";
    let opscope = Opscope::start(&config(&ports, &sink, limits));
    let ports = opscope.ports();
    let response = http_post(
        &ports.http_addr(),
        "/v1/traces",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "gzip"),
        ],
        &gzip(&empty_spans()),
    )
    .expect("HTTP request");
    assert_eq!(response.status, 503, "{}", response.text());
    assert_eq!(response.header("retry-after"), Some("1"));
    assert!(resident_bytes(opscope.pid()) < 128 * MIB);
    let refused = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_spans_total",
        &[("reason", "memory_limit")],
    );
    assert_eq!(refused, 2_000_000.0);
}

fn span(trace_id: Vec<u8>, span_id: Vec<u8>) -> Span {
    Span {
        trace_id,
        span_id,
        name: "reconcile".into(),
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn trace_and_span_ids_of_the_wrong_length_are_refused_by_path() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&config(&ports, &sink, "{}"));
    let ports = opscope.ports();
    let runtime = Runtime::new().expect("client runtime");
    let mut client = runtime
        .block_on(TraceServiceClient::connect(ports.grpc_url()))
        .expect("connect to opscope");
    let good = || span(vec![1; 16], vec![2; 8]);

    let status = runtime
        .block_on(client.export(request(vec![good(), span(vec![7; 5000], vec![2; 8])])))
        .expect_err("a 5000-byte trace id");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "resource_spans[0].scope_spans[0].spans[1]: trace_id of 5000 bytes, must be 16 bytes"
    );

    let short_span_id = request(vec![span(vec![1; 16], vec![2; 3])]);
    let response = http_post(
        &ports.http_addr(),
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &short_span_id.encode_to_vec(),
    )
    .expect("HTTP request");
    assert_eq!(response.status, 400, "{}", response.text());
    assert!(
        response.text().contains(
            "resource_spans[0].scope_spans[0].spans[0]: span_id of 3 bytes, must be 8 bytes"
        ),
        "{}",
        response.text()
    );
    let refused = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_spans_total",
        &[("reason", "invalid_id")],
    );
    assert_eq!(refused, 3.0);

    runtime
        .block_on(client.export(request(vec![good(), good()])))
        .expect("well-formed ids are taken");
    assert!(
        sink.wait_for(TIMEOUT, |received| received.span_count() == 2),
        "got {} spans",
        sink.span_count()
    );
}
