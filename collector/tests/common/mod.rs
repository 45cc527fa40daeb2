//! Integration-test harness: runs the opscope binary, talks HTTP to it and stands in for its downstream.
#![allow(dead_code)] // each test binary uses its own subset of the harness

mod agent;
pub mod audit;
pub mod fleet;
mod http;
pub mod pod_logs;
pub mod reconciles;
mod requests;
mod resident;
mod sink;

// Not every test binary uses every item.
#[allow(unused_imports)]
pub use agent::{Opscope, sum_samples};
#[allow(unused_imports)]
pub use http::{HttpResponse, http_get, http_post};
#[allow(unused_imports)]
pub use requests::numbered_spans;
#[allow(unused_imports)]
pub use resident::{RssSampler, resident_bytes};
#[allow(unused_imports)]
pub use sink::{Behaviour, OtlpSink, Received};

#[allow(unused_imports)]
pub use opscope_testkit::backend::free_port;

use std::thread;
use std::time::{Duration, Instant};

/// Prints one line of a fault test's figures (`fault <test>: in=… out=… duplicated=…
/// refused=…`), so that `cargo test -- --nocapture | grep '^fault '` gives the
/// summary of the fault suite.
pub fn report_fault(test: &str, figures: &[(&str, f64)]) {
    let figures: Vec<String> = figures
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    println!("fault {test}: {}", figures.join(" "));
}

/// A `/24` of `127.0.0.0/8` of the caller's own (`127.b.c`), picked at random: tests
/// listen on 127.0.0.1 or port 0, so that a port on an address of this block is free
/// for a listener whose address must be written down before it starts (and again
/// after it stops), whatever else runs on the machine.
pub fn own_loopback_block() -> String {
    use std::hash::{BuildHasher, RandomState};
    let random = RandomState::new()
        .hash_one(std::process::id())
        .to_le_bytes();
    format!("127.{}.{}", 1 + random[0] % 254, random[1])
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The loopback ports one opscope instance listens on.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub grpc: u16,
    pub http: u16,
    pub health: u16,
    pub metrics: u16,
}

impl Ports {
    /// Port 0 for each: a config written with these has every listener take a free
    /// port; [`Opscope::ports`] tells the ones the agent bound.
    pub const ANY: Ports = Ports {
        grpc: 0,
        http: 0,
        health: 0,
        metrics: 0,
    };

    /// URL of the OTLP/gRPC receiver, as an SDK exporter wants it.
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc)
    }

    /// Base URL of the OTLP/HTTP receiver (append `/v1/traces` etc.).
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    pub fn http_addr(&self) -> String {
        format!("127.0.0.1:{}", self.http)
    }

    pub fn health_addr(&self) -> String {
        format!("127.0.0.1:{}", self.health)
    }

    pub fn metrics_addr(&self) -> String {
        format!("127.0.0.1:{}", self.metrics)
    }

    /// A complete config: the OTLP receiver on both protocols, a short batch, and one
    /// exporter named `exporter` (e.g. `otlp/sink`) with `settings` given as a YAML flow
    /// mapping (e.g. `{ endpoint: http://127.0.0.1:4317, compression: gzip }`), used by
    /// the traces, logs and metrics pipelines; health check and self-telemetry enabled.
    pub fn config(&self, exporter: &str, settings: &str) -> String {
        format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: 127.0.0.1:{grpc} }}
      http: {{ endpoint: 127.0.0.1:{http} }}
processors:
  batch: {{ timeout: 50ms, send_batch_size: 512 }}
exporters:
  {exporter}: {settings}
extensions:
  health_check: {{ endpoint: 127.0.0.1:{health} }}
service:
  extensions: [health_check]
  shutdown_timeout: 10s
  pipelines:
    traces: {{ receivers: [otlp], processors: [batch], exporters: [{exporter}] }}
    logs: {{ receivers: [otlp], processors: [batch], exporters: [{exporter}] }}
    metrics: {{ receivers: [otlp], processors: [batch], exporters: [{exporter}] }}
  telemetry:
    metrics: {{ address: 127.0.0.1:{metrics} }}
"#,
            grpc = self.grpc,
            http = self.http,
            health = self.health,
            metrics = self.metrics,
        )
    }
}
