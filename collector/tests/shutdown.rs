//! End to end, SIGTERM against the built agent: the process ends within
//! `shutdown_timeout` whatever a receiver is doing, and its last words say what was
//! dropped (per exporter and pipeline) or that nothing was.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{Behaviour, Opscope, OtlpSink, Ports, http_post};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(4);

fn config(ports: &Ports, sink: &OtlpSink) -> String {
    ports
        .config(
            "otlp/sink",
            &format!(
                "{{ endpoint: {}, timeout: 30s, sending_queue: {{ num_consumers: 1 }} }}",
                sink.endpoint()
            ),
        )
        .replace(
            "shutdown_timeout: 10s",
            &format!("shutdown_timeout: {}s", SHUTDOWN_TIMEOUT.as_secs()),
        )
}

fn post_spans(ports: &Ports, count: usize) {
    let spans = (0..count)
        .map(|i| Span {
            trace_id: [7; 16].to_vec(),
            span_id: (i as u64 + 1).to_be_bytes().to_vec(),
            name: format!("span-{i}"),
            ..Default::default()
        })
        .collect();
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let response = http_post(
        &ports.http_addr(),
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &request.encode_to_vec(),
    )
    .expect("post spans");
    assert_eq!(response.status, 200, "{}", response.text());
}

/// SIGTERM, and the time the process took to exit (panics past twice the timeout).
fn stop(agent: &mut Opscope) -> Duration {
    agent.stop_within(2 * SHUTDOWN_TIMEOUT)
}

/// A client that sent half a request and holds the connection open keeps the OTLP
/// receiver from stopping: the receiver is named and left behind, the pipelines drain,
/// and the agent says that nothing was dropped.
#[test]
fn a_receiver_that_does_not_stop_is_named_and_nothing_is_said_to_be_dropped() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let mut agent = Opscope::start(&config(&ports, &sink));
    let ports = agent.ports();
    post_spans(&ports, 5);
    assert!(sink.wait_for(Duration::from_secs(10), |r| r.span_count() == 5));
    let mut held = TcpStream::connect(ports.http_addr()).expect("connect");
    write!(
        held,
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: 1000\r\n\r\n0123456789"
    )
    .expect("send half a request");
    std::thread::sleep(Duration::from_millis(200));
    let took = stop(&mut agent);
    let logs = agent.logs();
    common::report_fault(
        "sigterm_half_sent_request_held_open",
        &[
            ("sigterm_exit_ms", took.as_millis() as f64),
            ("shutdown_timeout_ms", SHUTDOWN_TIMEOUT.as_millis() as f64),
        ],
    );
    assert!(took < SHUTDOWN_TIMEOUT, "SIGTERM took {took:?}:\n{logs}");
    assert!(
        logs.contains("everything queued was delivered"),
        "it says nothing was dropped:\n{logs}"
    );
    assert!(
        !logs.contains("dropped"),
        "nothing is said to be dropped:\n{logs}"
    );
    drop(held);
}

/// A downstream that never answers: what the queue held is dropped at the deadline,
/// and the last words give the count per exporter and pipeline.
#[test]
fn what_the_shutdown_timeout_drops_is_counted_per_exporter_and_pipeline() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Hold);
    let ports = Ports::ANY;
    let mut agent = Opscope::start(&config(&ports, &sink));
    let ports = agent.ports();
    post_spans(&ports, 5);
    post_spans(&ports, 3);
    std::thread::sleep(Duration::from_millis(300));
    let took = stop(&mut agent);
    let logs = agent.logs();
    assert!(
        took < SHUTDOWN_TIMEOUT + Duration::from_secs(3),
        "SIGTERM took {took:?}"
    );
    let dropped = logs
        .lines()
        .find(|line| line.contains("dropped at shutdown"))
        .unwrap_or_else(|| panic!("the drop is reported:\n{logs}"));
    assert!(dropped.contains("8 spans not delivered"), "{dropped}");
    assert!(dropped.contains("exporter=otlp/sink"), "{dropped}");
    assert!(dropped.contains("pipeline=traces"), "{dropped}");
    sink.release();
}
