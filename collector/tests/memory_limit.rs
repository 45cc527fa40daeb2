//! The memory limiter over real sockets: with the downstream blocked and a small
//! limit, receivers refuse with a retryable `memory_limit` refusal before the agent's
//! resident memory reaches the hard limit, and once the downstream is back everything
//! that was accepted is delivered and new data is taken again; and after a burst, the
//! idle agent gives the memory it used back to the kernel.

mod common;

use std::time::{Duration, Instant};

use common::{
    Behaviour, Opscope, OtlpSink, Ports, http_post, numbered_spans, resident_bytes, wait_until,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use tokio::runtime::Runtime;
use tonic::Code;
use tonic::transport::Channel;

const MIB: u64 = 1024 * 1024;
/// The soft limit (80 MiB) well above a debug build's resident size at idle (about
/// 50 MiB), so that once the data is delivered use falls below it by the release
/// margin (12 MiB) however large the binary grows.
const LIMIT_MIB: u64 = 128;
const SPIKE_MIB: u64 = 48;
/// What the resident size may exceed the hard limit by: the limiter samples every
/// 100 ms, and requests being decoded or encoded when it does are not yet counted.
const RSS_MARGIN_MIB: u64 = 16;
const SPANS_PER_REQUEST: usize = 200;
/// Each span carries this much attribute text, so a request is about 220 KB.
const PAYLOAD_BYTES: usize = 1024;
const TIMEOUT: Duration = Duration::from_secs(30);

fn config(ports: &Ports, sink: &OtlpSink) -> String {
    // A queue far larger than the limit, so that the limiter, not the queue, pushes back.
    let exporter = format!(
        "{{ endpoint: {}, timeout: 60s, compression: none, \
         sending_queue: {{ queue_size: 100000, num_consumers: 2 }}, \
         retry_on_failure: {{ initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 0 }} }}",
        sink.endpoint()
    );
    let limiter = format!(
        "processors:\n  memory_limiter: {{ check_interval: 100ms, limit_mib: {LIMIT_MIB}, spike_limit_mib: {SPIKE_MIB} }}\n"
    );
    ports
        .config("otlp/sink", &exporter)
        .replacen("processors:\n", &limiter, 1)
        .replace("processors: [batch]", "processors: [memory_limiter, batch]")
}

fn spans(request: usize) -> ExportTraceServiceRequest {
    spans_of(request, SPANS_PER_REQUEST)
}

fn spans_of(request: usize, count: usize) -> ExportTraceServiceRequest {
    numbered_spans(request, count, &"x".repeat(PAYLOAD_BYTES))
}

/// What a load run saw.
#[derive(Default)]
struct Load {
    accepted_spans: usize,
    refusals: usize,
    max_resident: u64,
}

#[test]
fn over_the_soft_limit_receivers_refuse_and_nothing_accepted_is_lost() {
    let sink = OtlpSink::grpc();
    sink.set_behaviour(Behaviour::Hold);
    let ports = Ports::ANY;
    let opscope = Opscope::start(&config(&ports, &sink));
    let ports = opscope.ports();
    let idle = resident_bytes(opscope.pid());
    let runtime = Runtime::new().expect("client runtime");
    let mut client: TraceServiceClient<Channel> = runtime
        .block_on(TraceServiceClient::connect(ports.grpc_url()))
        .expect("connect to opscope");
    client = client.max_decoding_message_size(16 * MIB as usize);

    // Keep sending for a while after the first refusal, as a retrying client would.
    let mut load = Load::default();
    let mut first_refusal = None;
    for request in 0..5000 {
        match runtime.block_on(client.export(spans(request))) {
            Ok(_) => load.accepted_spans += SPANS_PER_REQUEST,
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                assert!(status.message().contains("memory limit"), "{status:?}");
                load.refusals += 1;
                first_refusal.get_or_insert_with(Instant::now);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        load.max_resident = load.max_resident.max(resident_bytes(opscope.pid()));
        if first_refusal.is_some_and(|at| at.elapsed() > Duration::from_secs(3)) {
            break;
        }
    }
    common::report_fault(
        "memory_limit_blocked_backend",
        &[
            ("in", load.accepted_spans as f64),
            ("refused_requests", load.refusals as f64),
            ("idle_rss_mib", (idle / MIB) as f64),
            ("peak_rss_mib", (load.max_resident / MIB) as f64),
            ("limit_mib", LIMIT_MIB as f64),
        ],
    );
    assert!(load.refusals > 0, "the limiter refused nothing");
    assert!(load.accepted_spans > 0);
    assert!(
        load.max_resident < (LIMIT_MIB + RSS_MARGIN_MIB) * MIB,
        "peak RSS {} MiB",
        load.max_resident / MIB
    );

    let metrics = ports.metrics_addr();
    // Above the soft limit a request is refused before its message is read, so its
    // spans are not known: every refusal is a refused request, and only those
    // refused after decoding count their spans.
    let refused_requests = opscope.metric_value(
        &metrics,
        "opscope_receiver_refused_requests_total",
        &[("transport", "grpc"), ("reason", "memory_limit")],
    );
    assert_eq!(refused_requests, load.refusals as f64);
    let refused_spans = opscope.metric_value(
        &metrics,
        "opscope_receiver_refused_spans_total",
        &[("reason", "memory_limit")],
    );
    assert!(refused_spans <= (load.refusals * SPANS_PER_REQUEST) as f64);
    assert!(
        opscope.metric_value(&metrics, "opscope_memory_limiter_accounted_bytes", &[]) > 0.0,
        "the held data is counted"
    );
    let http = http_post(
        &ports.http_addr(),
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &spans(9999).encode_to_vec(),
    )
    .expect("HTTP request");
    assert_eq!(http.status, 503, "{}", http.text());
    assert!(http.header("Retry-After").is_some(), "{}", http.text());

    sink.release();
    assert!(
        sink.wait_for(TIMEOUT, |r| r.span_count() >= load.accepted_spans),
        "only {} of {} accepted spans arrived",
        sink.span_count(),
        load.accepted_spans
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        sink.span_count(),
        load.accepted_spans,
        "count in = count out"
    );
    let shed = opscope.metric_value(
        &metrics,
        "opscope_exporter_send_failed_spans_total",
        &[("reason", "memory_limit")],
    );
    assert_eq!(shed, 0.0, "the hard limit was never reached");

    common::report_fault(
        "memory_limit_after_delivery",
        &[("rss_mib", (resident_bytes(opscope.pid()) / MIB) as f64)],
    );
    // Once the data is gone, memory falls back below the soft limit and data is taken again.
    let mut client_again = client.clone();
    assert!(
        wait_until(TIMEOUT, || runtime
            .block_on(client_again.export(spans(10_000)))
            .is_ok()),
        "still refusing after delivery; state {}",
        opscope.metric_value(&metrics, "opscope_memory_limiter_state", &[])
    );
    assert_eq!(
        opscope.metric_value(&metrics, "opscope_memory_limiter_state", &[]),
        0.0
    );
    // The crossing is logged; between two checks of a loaded machine the usage can
    // pass both limits, and the change is then logged as the hard one.
    let logs = opscope.logs();
    assert!(
        logs.contains("memory above the soft limit")
            || logs.contains("memory above the hard limit"),
        "{logs}"
    );
}

/// docs/deploy.md promises freed memory goes back to the kernel: after a burst of large
/// requests, delivered, the idle agent's resident size falls back near what it was
/// before the burst instead of staying at the burst's peak.
#[test]
fn after_a_burst_the_idle_agent_returns_its_memory() {
    const CLIENTS: usize = 8;
    const REQUESTS_PER_CLIENT: usize = 12;
    /// About 2.2 MB a request.
    const SPANS: usize = 2000;
    /// What the idle agent may keep over its resident size before the burst: the
    /// runtime's and the allocator's own structures grow a little with use.
    const KEPT_MIB: u64 = 40;
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let exporter = format!(
        "{{ endpoint: {}, compression: none, sending_queue: {{ queue_size: 1000, num_consumers: 4 }} }}",
        sink.endpoint()
    );
    let opscope = Opscope::start(&ports.config("otlp/sink", &exporter));
    let ports = opscope.ports();
    std::thread::sleep(Duration::from_millis(500));
    let before = resident_bytes(opscope.pid());

    let peak = std::sync::atomic::AtomicU64::new(before);
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let (url, peak, pid) = (ports.grpc_url(), &peak, opscope.pid());
            scope.spawn(move || {
                let runtime = Runtime::new().expect("client runtime");
                let mut client_of = runtime
                    .block_on(TraceServiceClient::connect(url))
                    .expect("connect to opscope");
                for n in 0..REQUESTS_PER_CLIENT {
                    let request = spans_of(client * REQUESTS_PER_CLIENT + n, SPANS);
                    runtime
                        .block_on(client_of.export(request))
                        .expect("the burst is accepted");
                    peak.fetch_max(resident_bytes(pid), std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let sent = CLIENTS * REQUESTS_PER_CLIENT * SPANS;
    assert!(
        sink.wait_for(TIMEOUT, |r| r.span_count() >= sent),
        "{} of {sent} spans arrived",
        sink.span_count()
    );
    let peak = peak.into_inner();
    let started_idle = Instant::now();
    let bound = before + KEPT_MIB * MIB;
    let returned = wait_until(Duration::from_secs(12), || {
        resident_bytes(opscope.pid()) <= bound
    });
    let after = resident_bytes(opscope.pid());
    common::report_fault(
        "memory_returned_after_burst",
        &[
            ("in", sent as f64),
            ("before_rss_mib", (before / MIB) as f64),
            ("peak_rss_mib", (peak / MIB) as f64),
            ("idle_rss_mib", (after / MIB) as f64),
            ("idle_seconds", started_idle.elapsed().as_secs_f64()),
        ],
    );
    assert!(
        returned,
        "resident size {} MiB after {:.1} s idle; {} MiB before the burst, {} MiB at its peak",
        after / MIB,
        started_idle.elapsed().as_secs_f64(),
        before / MIB,
        peak / MIB
    );
}
