//! The harness's scenarios: what load each offers, and the opscope config it runs
//! against (OTLP/gRPC in, the scenario's processors, OTLP/gRPC out to the null sink,
//! directly or routed by object).

use std::time::Duration;

use opscope_workload::WorkloadConfig;

use crate::signal::Signal;

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub what: &'static str,
    pub signal: Signal,
    pub processors: &'static [&'static str],
    /// Items per second offered; `None` for as fast as accepted.
    pub rate: Option<f64>,
    pub duration: Duration,
    pub batch: usize,
    pub objects: usize,
    /// Send to the sink through the `loadbalancing` exporter, routed by object over
    /// two gateway entries that are both the sink, instead of the `otlp` exporter.
    pub routed: bool,
    /// A gateway of the tier: records tagged by the load generator (as the agents
    /// route them), the correlator with its journal, nothing sent on; what it
    /// accepts is what it took.
    pub gateway: bool,
}

const FULL: &[&str] = &["operator_tagger", "correlator", "batch"];

/// Every scenario, in the order the harness runs them.
pub fn all() -> Vec<Scenario> {
    let throughput = |name, what, signal, processors| Scenario {
        name,
        what,
        signal,
        processors,
        rate: None,
        duration: Duration::from_secs(10),
        batch: 512,
        objects: 1000,
        routed: false,
        gateway: false,
    };
    vec![
        throughput(
            "traces_passthrough",
            "reconcile traces through the batch processor only",
            Signal::Traces,
            &["batch"],
        ),
        throughput(
            "traces_full",
            "reconcile traces tagged, correlated and batched",
            Signal::Traces,
            FULL,
        ),
        throughput(
            "logs_full",
            "controller-runtime JSON log records tagged, correlated and batched",
            Signal::Logs,
            FULL,
        ),
        throughput(
            "metrics",
            "operator pod metrics tagged, correlated and batched",
            Signal::Metrics,
            FULL,
        ),
        Scenario {
            routed: true,
            ..throughput(
                "traces_routed",
                "traces_full, sent on routed by object (the agent of a gateway tier)",
                Signal::Traces,
                FULL,
            )
        },
        Scenario {
            gateway: true,
            ..throughput(
                "gateway",
                "tagged reconcile traces into a gateway's correlator, journaled",
                Signal::Traces,
                &["correlator"],
            )
        },
        Scenario {
            name: "steady_10k",
            what: "10 000 spans/s for 20 s over 10 000 objects, full pipeline: CPU and resident memory at a steady load",
            signal: Signal::Traces,
            processors: FULL,
            rate: Some(10_000.0),
            duration: Duration::from_secs(20),
            batch: 200,
            objects: 10_000,
            routed: false,
            gateway: false,
        },
    ]
}

/// Where the `gateway` scenario's correlator keeps its journal; emptied before each
/// run and removed after it.
pub fn journal_directory() -> std::path::PathBuf {
    std::env::temp_dir().join("opscope-bench-journal")
}

pub fn find(name: &str) -> Option<Scenario> {
    all().into_iter().find(|s| s.name == name)
}

impl Scenario {
    pub fn workload(&self) -> WorkloadConfig {
        WorkloadConfig {
            objects: self.objects,
            pods: (self.objects / 100).max(3),
            ..WorkloadConfig::default()
        }
    }

    /// The opscope config: receivers on `grpc_port` and `http_port`, export to the
    /// sink at `sink_port` uncompressed (the sink counts, it should not inflate).
    pub fn opscope_config(&self, grpc_port: u16, http_port: u16, sink_port: u16) -> String {
        let pipeline = match self.signal {
            Signal::Traces => "traces",
            Signal::Logs => "logs",
            Signal::Metrics => "metrics",
        };
        let processors = self.processors.join(", ");
        let max_objects = (self.objects * 2).max(10_000);
        if self.gateway {
            let journal = journal_directory();
            return format!(
                r#"receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{grpc_port}", max_recv_msg_size_mib: 64 }}
processors:
  correlator: {{ max_objects: {max_objects}, storage: {{ directory: "{journal}" }} }}
service:
  pipelines:
    {pipeline}: {{ receivers: [otlp], processors: [{processors}] }}
  telemetry:
    logs: {{ level: warn }}
    metrics: {{ address: "127.0.0.1:0" }}
"#,
                journal = journal.display()
            );
        }
        let (exporter, settings) = if self.routed {
            (
                "loadbalancing",
                format!(
                    r#"protocol: {{ otlp: {{ tls: {{ insecure: true }}, compression: none }} }}
    resolver: {{ static: {{ hostnames: ["127.0.0.1:{sink_port}", "http://127.0.0.1:{sink_port}"] }} }}"#
                ),
            )
        } else {
            (
                "otlp/sink",
                format!(
                    r#"endpoint: "http://127.0.0.1:{sink_port}"
    tls: {{ insecure: true }}
    compression: none"#
                ),
            )
        };
        format!(
            r#"receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{grpc_port}", max_recv_msg_size_mib: 64 }}
      http: {{ endpoint: "127.0.0.1:{http_port}" }}
processors:
  operator_tagger: {{}}
  correlator: {{ max_objects: {max_objects} }}
  batch: {{ send_batch_size: 1024, timeout: 200ms }}
exporters:
  {exporter}:
    {settings}
service:
  pipelines:
    {pipeline}: {{ receivers: [otlp], processors: [{processors}], exporters: [{exporter}] }}
  telemetry:
    logs: {{ level: warn }}
    metrics: {{ address: "127.0.0.1:0" }}
"#
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_are_unique_and_found() {
        let scenarios = all();
        for scenario in &scenarios {
            assert_eq!(find(scenario.name).map(|s| s.name), Some(scenario.name));
        }
        let mut names: Vec<_> = scenarios.iter().map(|s| s.name).collect();
        names.dedup();
        assert_eq!(names.len(), 7);
        assert!(find("nope").is_none());
    }
}
