//! The harness's pieces together: the load generator against the null sink over
//! loopback counts exactly what the sink receives, for every signal, and the sink
//! measures a latency for what carries a send time.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use opscope_bench::Signal;
use opscope_bench::load::{self, LiveCounts, LoadSettings, Transport};
use opscope_bench::sink::NullSink;
use opscope_workload::WorkloadConfig;

fn settings(endpoint: String, signal: Signal, rate: Option<f64>) -> LoadSettings {
    LoadSettings {
        endpoint,
        transport: Transport::Grpc,
        signal,
        rate,
        duration: Some(Duration::from_secs(60)),
        max_requests: Some(20),
        batch: 100,
        concurrency: 3,
        workload: WorkloadConfig {
            objects: 200,
            pods: 4,
            ..WorkloadConfig::default()
        },
        tagged: false,
    }
}

#[tokio::test]
async fn what_the_generator_counts_as_accepted_the_sink_received() {
    let sink = NullSink::start().await.expect("sink");
    let endpoint = format!("http://{}", sink.addr());
    for signal in [Signal::Traces, Signal::Logs, Signal::Metrics] {
        let before = sink.counts().items(signal);
        let counts = load::run(
            &settings(endpoint.clone(), signal, None),
            Arc::new(LiveCounts::default()),
            Arc::new(AtomicBool::new(false)),
        )
        .await
        .expect("load ran");
        assert_eq!(counts.requests, 20, "{signal:?}");
        assert!(counts.sent >= 20 * 100, "{signal:?}: {counts:?}");
        assert_eq!(
            (counts.accepted, counts.refused, counts.failed),
            (counts.sent, 0, 0),
            "{signal:?}"
        );
        assert_eq!(
            sink.counts().items(signal) - before,
            counts.accepted,
            "{signal:?}"
        );
        assert!(
            !sink.take_latencies().is_empty(),
            "{signal:?}: send times stamped"
        );
    }
}

#[tokio::test]
async fn a_fixed_rate_run_sends_its_requests_too() {
    let sink = NullSink::start().await.expect("sink");
    let counts = load::run(
        &settings(
            format!("http://{}", sink.addr()),
            Signal::Traces,
            Some(1_000_000.0),
        ),
        Arc::new(LiveCounts::default()),
        Arc::new(AtomicBool::new(false)),
    )
    .await
    .expect("load ran");
    assert_eq!(counts.requests, 20);
    assert_eq!(sink.counts().spans, counts.accepted);
}

#[tokio::test]
async fn a_closed_port_fails_to_connect() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let result = load::run(
        &settings(format!("http://127.0.0.1:{port}"), Signal::Traces, None),
        Arc::new(LiveCounts::default()),
        Arc::new(AtomicBool::new(false)),
    )
    .await;
    assert!(result.is_err());
}
