//! The servers against clients that hold on: bodies sent most of the way and then
//! stalled (over HTTP/1 and as half-sent gRPC streams on one HTTP/2 connection) are
//! counted against the memory limiter and refused before the agent passes its
//! limit; headers trickled byte by byte are cut off after `read_header_timeout`;
//! connections beyond `max_connections` or the descriptor limit are refused while
//! `/healthz` and `/metrics` keep answering; and shutdown does not wait for a
//! request that stopped arriving.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Opscope, OtlpSink, Ports, RssSampler, http_get, report_fault, wait_until};

const MIB: u64 = 1024 * 1024;
const LIMIT_MIB: u64 = 256;
const SPIKE_MIB: u64 = 96;

/// The agent with both OTLP protocols, a memory limiter in every pipeline, and
/// `http` / `grpc` settings added to those of the protocols.
fn config(ports: &Ports, sink: &OtlpSink, http: &str, grpc: &str) -> String {
    let limiter = format!(
        "processors:\n  memory_limiter: {{ check_interval: 100ms, limit_mib: {LIMIT_MIB}, spike_limit_mib: {SPIKE_MIB} }}\n"
    );
    let exporter = format!("{{ endpoint: {}, compression: none }}", sink.endpoint());
    ports
        .config("otlp/sink", &exporter)
        .replacen("processors:\n", &limiter, 1)
        .replace("processors: [batch]", "processors: [memory_limiter, batch]")
        .replace(
            &format!("grpc: {{ endpoint: 127.0.0.1:{} }}", ports.grpc),
            &format!("grpc: {{ endpoint: 127.0.0.1:{}{grpc} }}", ports.grpc),
        )
        .replace(
            &format!("http: {{ endpoint: 127.0.0.1:{} }}", ports.http),
            &format!("http: {{ endpoint: 127.0.0.1:{}{http} }}", ports.http),
        )
}

fn refused_requests(opscope: &Opscope, ports: &Ports, transport: &str, reason: &str) -> f64 {
    opscope.metric_value(
        &ports.metrics_addr(),
        "opscope_receiver_refused_requests_total",
        &[("transport", transport), ("reason", reason)],
    )
}

fn connection_series(opscope: &Opscope, ports: &Ports, family: &str, reason: &str) -> f64 {
    opscope.metric_value(&ports.metrics_addr(), family, &[("reason", reason)])
}

/// Whether the server closed `stream` (a read sees the end or a reset) within `timeout`.
fn closed_within(stream: &mut TcpStream, timeout: Duration) -> bool {
    stream
        .set_read_timeout(Some(timeout))
        .expect("set a read timeout");
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn partial_http_bodies_stay_under_the_memory_limit() {
    const CONNECTIONS: usize = 40;
    const ANNOUNCED: usize = 20 * MIB as usize - 1024;
    const SENT: usize = 19 * MIB as usize;
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&config(&ports, &sink, "", ""));
    let ports = opscope.ports();
    let sampler = RssSampler::start(opscope.pid());
    let senders: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let addr = ports.http_addr();
            thread::spawn(move || {
                let mut stream = TcpStream::connect(&addr).expect("connect");
                stream
                    .set_write_timeout(Some(Duration::from_secs(20)))
                    .expect("write timeout");
                let head = format!(
                    "POST /v1/traces HTTP/1.1\r\nHost: opscope\r\nContent-Type: application/x-protobuf\r\nContent-Length: {ANNOUNCED}\r\n\r\n"
                );
                let _ = stream.write_all(head.as_bytes());
                let chunk = vec![0x0au8; 256 * 1024];
                let mut sent = 0;
                while sent < SENT && stream.write_all(&chunk).is_ok() {
                    sent += chunk.len();
                }
                // Stalled: the rest never comes. Keep the connection for the answer.
                stream
            })
        })
        .collect();
    let mut streams: Vec<TcpStream> = senders
        .into_iter()
        .map(|sender| sender.join().expect("a sender"))
        .collect();
    thread::sleep(Duration::from_secs(1));
    let mut answered_503 = 0;
    for stream in &mut streams {
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("read timeout");
        let mut head = [0u8; 12];
        if stream.read_exact(&mut head).is_ok() && head.ends_with(b"503") {
            answered_503 += 1;
        }
    }
    let peak = sampler.peak();
    let refused = refused_requests(&opscope, &ports, "http", "memory_limit");
    drop(streams);
    report_fault(
        "partial_http_bodies",
        &[
            ("connections", CONNECTIONS as f64),
            ("body_mib_sent", (SENT as u64 / MIB) as f64),
            ("refused_memory_limit", refused),
            ("answered_503", answered_503 as f64),
            ("peak_rss_mib", (peak / MIB) as f64),
            ("limit_mib", LIMIT_MIB as f64),
        ],
    );
    assert!(
        peak < LIMIT_MIB * MIB,
        "peak resident size {} MiB passed the {LIMIT_MIB} MiB limit",
        peak / MIB
    );
    assert!(refused > 0.0, "no body was refused for the memory limit");
    assert!(answered_503 > 0, "no client was told 503");
    assert!(http_get(&ports.health_addr(), "/healthz").is_ok_and(|r| r.status == 200));
}

/// A gRPC message prefix (uncompressed) announcing `length` bytes.
fn grpc_prefix(length: u32) -> Bytes {
    let mut prefix = vec![0u8];
    prefix.extend_from_slice(&length.to_be_bytes());
    Bytes::from(prefix)
}

/// Sends `bytes` on `stream` as the peer's flow control lets it; false if the
/// stream was reset (the server answered).
async fn send_within_window(stream: &mut h2::SendStream<Bytes>, mut bytes: usize) -> bool {
    const CHUNK: usize = 64 * 1024;
    while bytes > 0 {
        stream.reserve_capacity(CHUNK.min(bytes));
        let capacity = match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(capacity)) => capacity,
            _ => return false,
        };
        if stream
            .send_data(Bytes::from(vec![0x0au8; capacity]), false)
            .is_err()
        {
            return false;
        }
        bytes -= capacity;
    }
    true
}

#[test]
fn half_sent_grpc_streams_stay_under_the_memory_limit() {
    const STREAMS: usize = 250;
    const MESSAGE: u32 = 4 * 1024 * 1024 - 64;
    const SENT: usize = 3_900_000;
    const PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&config(&ports, &sink, "", ""));
    let ports = opscope.ports();
    let sampler = RssSampler::start(opscope.pid());
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (advertised, opened, unavailable) = runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(ports.grpc_url().trim_start_matches("http://"))
            .await
            .expect("connect");
        let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
        let mut connection = connection;
        let advertised = {
            // The server's SETTINGS arrive with the first exchange.
            let _ = tokio::time::timeout(Duration::from_millis(300), &mut connection).await;
            connection.max_concurrent_send_streams()
        };
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut streams = tokio::task::JoinSet::new();
        let mut opened = 0;
        for _ in 0..STREAMS {
            let Ok(Ok(mut client)) =
                tokio::time::timeout(Duration::from_secs(2), client.clone().ready()).await
            else {
                break;
            };
            let request = http::Request::post(PATH)
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .expect("a request");
            let Ok((response, mut stream)) = client.send_request(request, false) else {
                break;
            };
            opened += 1;
            streams.spawn(async move {
                let _ = stream.send_data(grpc_prefix(MESSAGE), false);
                send_within_window(&mut stream, SENT).await;
                // Half-sent: the end of the message never comes.
                let answer = tokio::time::timeout(Duration::from_secs(5), response).await;
                let status = match answer {
                    Ok(Ok(response)) => response
                        .headers()
                        .get("grpc-status")
                        .and_then(|status| status.to_str().ok())
                        .map(str::to_owned),
                    _ => None,
                };
                (status, stream)
            });
        }
        let mut unavailable = 0;
        let mut held = Vec::new();
        while let Some(finished) = streams.join_next().await {
            let (status, stream) = finished.expect("a stream task");
            unavailable += usize::from(status.as_deref() == Some("14"));
            held.push(stream);
        }
        drop(held);
        (advertised, opened, unavailable)
    });
    let peak = sampler.peak();
    let refused = refused_requests(&opscope, &ports, "grpc", "memory_limit");
    report_fault(
        "half_sent_grpc_streams",
        &[
            ("streams_tried", STREAMS as f64),
            ("streams_opened", opened as f64),
            ("max_concurrent_streams", advertised as f64),
            ("unavailable", unavailable as f64),
            ("refused_memory_limit", refused),
            ("peak_rss_mib", (peak / MIB) as f64),
            ("limit_mib", LIMIT_MIB as f64),
        ],
    );
    assert_eq!(advertised, 100, "SETTINGS_MAX_CONCURRENT_STREAMS");
    assert!(
        peak < LIMIT_MIB * MIB,
        "peak resident size {} MiB passed the {LIMIT_MIB} MiB limit",
        peak / MIB
    );
    assert!(unavailable > 0, "no stream was answered UNAVAILABLE");
    assert!(refused > 0.0, "no stream was counted as refused");
}

/// One connection's 100 half-sent gRPC messages hold at most its share of the memory
/// budget (a quarter of the soft limit) and are cut off after `read_timeout`: another
/// client's request is taken meanwhile, and every stalled stream is answered.
#[test]
fn half_sent_grpc_messages_of_one_connection_hold_its_share_and_time_out() {
    const STREAMS: usize = 100;
    const MESSAGE: u32 = 4 * 1024 * 1024 - 64;
    const SENT: usize = 3_900_000;
    const PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start(&config(&ports, &sink, "", ", read_timeout: 3s"));
    let ports = opscope.ports();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let started = Instant::now();
    let (other_client, answered, slowest) = runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(ports.grpc_url().trim_start_matches("http://"))
            .await
            .expect("connect");
        let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let (sent_tx, mut sent_rx) = tokio::sync::mpsc::channel(STREAMS);
        let mut streams = tokio::task::JoinSet::new();
        for _ in 0..STREAMS {
            let Ok(Ok(mut client)) =
                tokio::time::timeout(Duration::from_secs(2), client.clone().ready()).await
            else {
                break;
            };
            let request = http::Request::post(PATH)
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .expect("a request");
            let Ok((response, mut stream)) = client.send_request(request, false) else {
                break;
            };
            let sent = sent_tx.clone();
            streams.spawn(async move {
                let _ = stream.send_data(grpc_prefix(MESSAGE), false);
                send_within_window(&mut stream, SENT).await;
                let _ = sent.send(()).await;
                // Half-sent: the end of the message never comes.
                let answer = tokio::time::timeout(Duration::from_secs(30), response).await;
                (answer.is_ok_and(|answer| answer.is_ok()), stream)
            });
        }
        drop(sent_tx);
        // Every stream has sent what it will (or was cut off on the way).
        while sent_rx.recv().await.is_some() {}
        let payload = "x".repeat(3_000);
        let mut other = opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient::connect(ports.grpc_url())
            .await
            .expect("another client connects")
            .max_encoding_message_size(8 << 20);
        let other_client = other
            .export(common::numbered_spans(0, 1_000, &payload))
            .await
            .map(|_| ())
            .map_err(|status| status.to_string());
        let (mut answered, mut held) = (0, Vec::new());
        while let Some(finished) = streams.join_next().await {
            let (was_answered, stream) = finished.expect("a stream task");
            answered += usize::from(was_answered);
            held.push(stream);
        }
        (other_client, answered, started.elapsed())
    });
    report_fault(
        "half_sent_grpc_messages_of_one_connection",
        &[
            ("streams", STREAMS as f64),
            ("answered", answered as f64),
            ("slowest_answer_s", slowest.as_secs_f64()),
        ],
    );
    assert_eq!(
        other_client,
        Ok(()),
        "another client's 3 MB request while one connection stalls its messages"
    );
    assert_eq!(answered, STREAMS, "every stalled stream is answered");
}

#[test]
fn slowloris_connections_are_closed_after_read_header_timeout() {
    const CONNECTIONS: usize = 50;
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let http = ", read_header_timeout: 1s";
    let opscope = Opscope::start(&config(&ports, &sink, http, ""));
    let ports = opscope.ports();
    let mut streams: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| {
            let mut stream = TcpStream::connect(ports.http_addr()).expect("connect");
            stream
                .write_all(b"POST /v1/traces HTTP/1.1\r\nHost: opscope\r\n")
                .expect("write the request line");
            stream
        })
        .collect();
    let started = Instant::now();
    // One more header byte on every connection every 200 ms, as slowloris does.
    while started.elapsed() < Duration::from_millis(2500) {
        for stream in &mut streams {
            let _ = stream.write_all(b"X");
        }
        thread::sleep(Duration::from_millis(200));
    }
    let mut closed = 0;
    for stream in &mut streams {
        closed += usize::from(closed_within(stream, Duration::from_millis(500)));
    }
    let counted = connection_series(
        &opscope,
        &ports,
        "opscope_server_connections_closed_total",
        "read_header_timeout",
    );
    report_fault(
        "slowloris_headers",
        &[
            ("connections", CONNECTIONS as f64),
            ("closed_after_1s_timeout", closed as f64),
            ("counted", counted),
        ],
    );
    assert_eq!(closed, CONNECTIONS, "connections still open after 3 s");
    assert_eq!(counted, CONNECTIONS as f64);
}

#[test]
fn connections_beyond_max_connections_are_refused_while_health_and_metrics_answer() {
    const MAX: usize = 20;
    const BEYOND: usize = 30;
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let http = format!(", max_connections: {MAX}");
    let opscope = Opscope::start(&config(&ports, &sink, &http, ""));
    let ports = opscope.ports();
    let connect = || TcpStream::connect(ports.http_addr()).expect("connect");
    let mut held: Vec<TcpStream> = (0..MAX).map(|_| connect()).collect();
    assert!(wait_until(Duration::from_secs(5), || {
        opscope.metric_value(
            &ports.metrics_addr(),
            "opscope_server_connections",
            &[("server", "otlp"), ("transport", "http")],
        ) == MAX as f64
    }));
    let refused_at_once = (0..BEYOND)
        .filter(|_| closed_within(&mut connect(), Duration::from_secs(1)))
        .count();
    let health = http_get(&ports.health_addr(), "/healthz").map(|r| r.status);
    let counted = connection_series(
        &opscope,
        &ports,
        "opscope_server_connections_refused_total",
        "max_connections",
    );
    assert!(
        !closed_within(&mut held[0], Duration::from_millis(50)),
        "connections within the limit stay open"
    );
    drop(held);
    let after = wait_until(Duration::from_secs(5), || {
        common::http_post(
            &ports.http_addr(),
            "/v1/traces",
            &[("Content-Type", "application/json")],
            br#"{"resourceSpans":[]}"#,
        )
        .is_ok_and(|r| r.status == 200)
    });
    report_fault(
        "max_connections",
        &[
            ("max_connections", MAX as f64),
            ("refused", refused_at_once as f64),
            ("counted", counted),
        ],
    );
    assert_eq!(refused_at_once, BEYOND);
    assert_eq!(counted, BEYOND as f64);
    assert_eq!(
        health.ok(),
        Some(200),
        "/healthz while the receiver is full"
    );
    assert!(
        after,
        "the receiver takes requests again once connections close"
    );
}

#[test]
fn at_the_descriptor_limit_health_and_metrics_still_answer() {
    const DESCRIPTORS: u64 = 512;
    const CONNECTIONS: usize = 600;
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let opscope = Opscope::start_with_descriptor_limit(&config(&ports, &sink, "", ""), DESCRIPTORS);
    let ports = opscope.ports();
    let held: Vec<TcpStream> = (0..CONNECTIONS)
        .filter_map(|_| TcpStream::connect(ports.http_addr()).ok())
        .collect();
    thread::sleep(Duration::from_millis(500));
    let health = http_get(&ports.health_addr(), "/healthz").map(|r| r.status);
    let metrics = http_get(&ports.metrics_addr(), "/metrics").map(|r| r.status);
    let refused = connection_series(
        &opscope,
        &ports,
        "opscope_server_connections_refused_total",
        "descriptors",
    );
    drop(held);
    report_fault(
        "descriptor_limit",
        &[
            ("descriptor_limit", DESCRIPTORS as f64),
            ("connections", CONNECTIONS as f64),
            ("refused_descriptors", refused),
        ],
    );
    assert_eq!(health.ok(), Some(200), "/healthz at the descriptor limit");
    assert_eq!(metrics.ok(), Some(200), "/metrics at the descriptor limit");
    assert!(refused > 0.0, "no connection was refused for descriptors");
}

#[test]
fn shutdown_does_not_wait_for_a_stalled_request() {
    let sink = OtlpSink::grpc();
    let ports = Ports::ANY;
    let mut opscope = Opscope::start(&config(&ports, &sink, "", ""));
    let ports = opscope.ports();
    let mut stream = TcpStream::connect(ports.http_addr()).expect("connect");
    stream
        .write_all(
            b"POST /v1/traces HTTP/1.1\r\nHost: opscope\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"resourceSpans\":[",
        )
        .expect("write half a request");
    thread::sleep(Duration::from_millis(1500));
    let asked = Instant::now();
    opscope.sigterm();
    let exited = opscope.wait_exit(Duration::from_secs(20));
    let took = asked.elapsed();
    report_fault(
        "shutdown_with_stalled_request",
        &[
            ("shutdown_timeout_s", 10.0),
            ("exit_after_ms", took.as_millis() as f64),
        ],
    );
    assert!(exited.is_some_and(|status| status.success()), "{exited:?}");
    assert!(
        took < Duration::from_secs(4),
        "shutdown took {took:?} with a stalled request open"
    );
    assert!(closed_within(&mut stream, Duration::from_secs(1)));
}
