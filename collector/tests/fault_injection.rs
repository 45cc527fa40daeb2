//! Faults of a real backend, injected at the socket: the OTLP/HTTP exporter's backend
//! closes the connection mid-request, answers 429 with `Retry-After`, hangs past the
//! exporter's timeout, answers 503, and finally takes the data. Every accepted span
//! arrives exactly once, and the pause asked for by `Retry-After` is kept.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Opscope, OtlpSink, Ports, http_post, numbered_spans, wait_until};
use flate2::read::GzDecoder;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

const TIMEOUT: Duration = Duration::from_secs(30);

/// What the backend does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Reads the request head, then closes the connection without an answer.
    CloseMidRequest,
    /// Answers this status, with `Retry-After` in seconds when given.
    Status(u16, Option<u64>),
    /// Reads the request and never answers.
    Hang,
}

#[derive(Default)]
struct Backend {
    /// Faults for the next requests, in order; then every request is taken.
    script: Vec<Fault>,
    /// When each request arrived, and what was done with it (`None`: taken).
    attempts: Vec<(Instant, Option<Fault>)>,
    /// How many times each span name was taken.
    taken: BTreeMap<String, usize>,
}

/// An OTLP/HTTP backend on a loopback port that plays a script of faults; written on
/// raw sockets so that it can misbehave below HTTP.
struct FaultyBackend {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<Backend>>,
    _runtime: Runtime,
}

impl FaultyBackend {
    fn start(script: Vec<Fault>) -> Self {
        let runtime = Runtime::new().expect("backend runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the backend");
        let addr = listener.local_addr().expect("backend address");
        let state = Arc::new(Mutex::new(Backend {
            script,
            ..Backend::default()
        }));
        let shared = Arc::clone(&state);
        runtime.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        Self {
            addr,
            state,
            _runtime: runtime,
        }
    }

    fn attempts(&self) -> Vec<(Instant, Option<Fault>)> {
        self.state.lock().expect("backend lock").attempts.clone()
    }

    fn taken(&self) -> BTreeMap<String, usize> {
        self.state.lock().expect("backend lock").taken.clone()
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<Backend>>) {
    let Some((head, mut body)) = read_head(&mut stream).await else {
        return;
    };
    let fault = {
        let mut state = state.lock().expect("backend lock");
        let fault = (!state.script.is_empty()).then(|| state.script.remove(0));
        state.attempts.push((Instant::now(), fault));
        fault
    };
    let status = match fault {
        Some(Fault::CloseMidRequest) => return,
        Some(Fault::Hang) => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            return;
        }
        Some(Fault::Status(status, retry_after)) => {
            let retry_after = retry_after
                .map(|seconds| format!("Retry-After: {seconds}\r\n"))
                .unwrap_or_default();
            let reply = format!(
                "HTTP/1.1 {status} Fault\r\n{retry_after}Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(reply.as_bytes()).await;
            return;
        }
        None => 200,
    };
    let length = header(&head, "content-length")
        .and_then(|value| value.parse::<usize>().ok())
        .unwrap_or(0);
    while body.len() < length {
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    if header(&head, "content-encoding").is_some_and(|e| e.eq_ignore_ascii_case("gzip")) {
        let mut inflated = Vec::new();
        GzDecoder::new(&body[..])
            .read_to_end(&mut inflated)
            .expect("a gzip body");
        body = inflated;
    }
    let request = ExportTraceServiceRequest::decode(&body[..]).expect("an OTLP trace request");
    {
        let mut state = state.lock().expect("backend lock");
        for resource in &request.resource_spans {
            for span in resource.scope_spans.iter().flat_map(|s| &s.spans) {
                *state.taken.entry(span.name.clone()).or_insert(0) += 1;
            }
        }
    }
    let reply = format!(
        "HTTP/1.1 {status} OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let _ = stream.write_all(reply.as_bytes()).await;
}

/// The request head (lowercase) and the body bytes read with it.
async fn read_head(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    loop {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            return Some((head, buffer[end + 4..].to_vec()));
        }
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == name)
        .map(|(_, value)| value.trim())
}

fn spans(request: usize) -> ExportTraceServiceRequest {
    numbered_spans(request, 10, "")
}

#[test]
fn every_fault_of_the_backend_is_retried_and_every_span_arrives_once() {
    let backend = FaultyBackend::start(vec![
        Fault::CloseMidRequest,
        Fault::Status(429, Some(1)),
        Fault::Hang,
        Fault::Status(503, None),
    ]);
    let ports = Ports::ANY;
    let exporter = format!(
        "{{ endpoint: http://{}, timeout: 500ms, compression: gzip, \
         sending_queue: {{ num_consumers: 1 }}, \
         retry_on_failure: {{ initial_interval: 20ms, max_interval: 100ms, max_elapsed_time: 20s }} }}",
        backend.addr
    );
    let opscope = Opscope::start(&ports.config("otlphttp/flaky", &exporter));
    let ports = opscope.ports();
    let client = Runtime::new().expect("client runtime");
    client.block_on(async {
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
        let mut client = TraceServiceClient::connect(ports.grpc_url())
            .await
            .expect("connect to opscope");
        for request in 0..3 {
            client.export(spans(request)).await.expect("accepted");
        }
    });

    let all = wait_until(TIMEOUT, || backend.taken().len() == 30);
    assert!(all, "{:?}\n{}", backend.taken(), opscope.logs());
    std::thread::sleep(Duration::from_millis(300));
    let taken = backend.taken();
    assert!(
        taken.values().all(|count| *count == 1),
        "each span once: {taken:?}"
    );

    let attempts = backend.attempts();
    let faults: Vec<Option<Fault>> = attempts.iter().map(|(_, fault)| *fault).collect();
    assert_eq!(
        &faults[..5],
        [
            Some(Fault::CloseMidRequest),
            Some(Fault::Status(429, Some(1))),
            Some(Fault::Hang),
            Some(Fault::Status(503, None)),
            None
        ],
        "the first batch met every fault in turn"
    );
    let paused = attempts[2].0 - attempts[1].0;
    assert!(
        paused >= Duration::from_millis(950),
        "Retry-After: 1 is kept, the retry came after {paused:?}"
    );
    let hung = attempts[3].0 - attempts[2].0;
    assert!(
        hung >= Duration::from_millis(450),
        "the hung request was abandoned at the 500ms timeout, after {hung:?}"
    );
    let sent = opscope.wait_for_metric(
        &ports.metrics_addr(),
        "opscope_exporter_sent_spans_total",
        &[("exporter", "otlphttp/flaky")],
        30.0,
        TIMEOUT,
    );
    assert_eq!(sent, 30.0);
    let failed = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_exporter_send_failed_spans_total",
        &[("exporter", "otlphttp/flaky")],
    );
    assert_eq!(failed, 0.0, "nothing given up");
    common::report_fault(
        "backend_close_429_hang_503",
        &[
            ("in", 30.0),
            ("out", taken.len() as f64),
            ("duplicated", 0.0),
            ("attempts", attempts.len() as f64),
            ("retry_after_pause_ms", paused.as_millis() as f64),
        ],
    );
}

/// A request of about 15 MB: 50 000 spans of some 300 bytes under five resources, one
/// of them (30 000 spans, 9 MB) larger than a gRPC message may be alone.
fn fifteen_megabytes() -> ExportTraceServiceRequest {
    let resources = [30_000, 5_000, 5_000, 5_000, 5_000];
    let mut first = 0u64;
    let resource_spans = resources
        .iter()
        .map(|&count| {
            let spans = (first..first + count)
                .map(|i| Span {
                    trace_id: [i.to_be_bytes(), [7; 8]].concat(),
                    span_id: (i + 1).to_be_bytes().to_vec(),
                    name: format!("span-{i:06}-{}", "x".repeat(270)),
                    ..Default::default()
                })
                .collect();
            first += count;
            ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest { resource_spans }
}

/// Sends a 15 MB OTLP/HTTP request through the agent to a second agent with the
/// default gRPC limit (4 MiB, refused with RESOURCE_EXHAUSTED), which forwards to a
/// sink; `settings` are the first agent's exporter settings. Returns the agent's logs.
fn through_a_4_mib_next_hop(test: &str, settings: &str) -> String {
    let sink = OtlpSink::grpc();
    // Sends of a debug build on a busy machine can take seconds: a timeout would send
    // again what was taken, and duplicates are not what is under test.
    let next_exporter = format!("{{ endpoint: {}, timeout: 60s }}", sink.endpoint());
    let next_hop = Opscope::start(&Ports::ANY.config("otlp/sink", &next_exporter));
    let next = next_hop.ports();
    let ports = Ports::ANY;
    let exporter = format!(
        "{{ endpoint: {}, timeout: 60s, {settings} }}",
        next.grpc_url()
    );
    let opscope = Opscope::start(&ports.config("otlp/next", &exporter));
    let ports = opscope.ports();

    let request = fifteen_megabytes();
    let body = request.encode_to_vec();
    assert!(body.len() > 14_000_000, "{} bytes", body.len());
    let started = Instant::now();
    let answer = http_post(
        &ports.http_addr(),
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &body,
    )
    .expect("post the request");
    assert_eq!(answer.status, 200, "{}", answer.text());

    // Two agents of a debug build take some 15 s to carry 15 MB on a busy machine.
    let unique = |received: &common::Received| {
        let mut names: Vec<&str> = received.spans().map(|span| span.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    };
    let arrived = sink.wait_for(4 * TIMEOUT, |received| unique(received) >= 50_000);
    let elapsed = started.elapsed();
    let received = sink.received();
    assert!(
        arrived,
        "{} of 50000 spans arrived\n{}",
        unique(&received),
        opscope.logs()
    );
    assert_eq!(
        received.span_count(),
        50_000,
        "each span once\n{}",
        opscope.logs()
    );
    let failed = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_exporter_send_failed_spans_total",
        &[("exporter", "otlp/next")],
    );
    assert_eq!(failed, 0.0, "nothing dropped\n{}", opscope.logs());
    let sent = opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_exporter_sent_spans_total",
        &[("exporter", "otlp/next")],
    );
    assert_eq!(sent, 50_000.0);
    common::report_fault(
        test,
        &[
            ("in", 50_000.0),
            ("out", received.span_count() as f64),
            (
                "duplicated",
                (received.span_count() - unique(&received)) as f64,
            ),
            ("dropped", failed),
            ("request_bytes", body.len() as f64),
            ("delivered_ms", elapsed.as_millis() as f64),
        ],
    );
    opscope.logs()
}

#[test]
fn a_15_mb_request_goes_to_a_4_mib_next_hop_in_parts_and_every_span_arrives() {
    let logs = through_a_4_mib_next_hop("request_15mb_next_hop_4mib", "compression: gzip");
    assert!(
        !logs.contains("refused a request for its size"),
        "max_request_size kept every request under the next hop's limit\n{logs}"
    );
}

#[test]
fn a_batch_the_next_hop_refuses_for_its_size_is_sent_again_in_halves() {
    // `max_request_size: 0` sends batches whole: the next hop's RESOURCE_EXHAUSTED is
    // what makes the agent cut them.
    let logs = through_a_4_mib_next_hop(
        "request_15mb_next_hop_4mib_refused",
        "compression: none, max_request_size: 0",
    );
    assert!(
        logs.contains("refused a request for its size"),
        "the next hop refused the whole batch\n{logs}"
    );
}
