//! A real Jaeger v2 (built by `testkit/backends/build jaeger`) on loopback ports of its
//! choosing, read from its log: OTLP over gRPC and HTTP into in-memory storage, and the query API the Jaeger UI
//! reads (`/api/services`, `/api/traces`, `/api/traces/{id}`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::backend::{
    LoggedAddress, ServerProcess, built_or_skip, http_client, poll_until, temp_dir,
};

/// Where Jaeger logs the addresses it bound: its query server's HTTP listener, and
/// its OTLP receiver's (the query server's gRPC listener, on a line with the same
/// message, logs `"addr": "127.0.0.1:0"`).
const QUERY_HTTP: LoggedAddress = LoggedAddress {
    line: "Query server started",
    key: "\"http_addr\": \"",
};
const OTLP_GRPC: LoggedAddress = LoggedAddress {
    line: "Starting GRPC server",
    key: "\"endpoint\": \"",
};
const OTLP_HTTP: LoggedAddress = LoggedAddress {
    line: "Starting HTTP server",
    key: "\"endpoint\": \"",
};

/// The `jaeger` binary, or `None` (with the reason printed) when the test may skip.
pub fn jaeger_or_skip() -> Option<PathBuf> {
    built_or_skip("jaeger", "jaeger")
}

/// A Jaeger on loopback ports of its choosing, killed on drop.
pub struct Jaeger {
    process: ServerProcess,
    otlp_grpc: String,
    otlp_http: String,
    http: reqwest::Client,
}

/// One span as the query API returns it: the Jaeger JSON model, with its process's
/// service name and its tags and references read out.
#[derive(Debug, Clone)]
pub struct QueriedSpan {
    /// 32 lowercase hex digits (Jaeger drops the leading zeros; they are put back).
    pub trace_id: String,
    pub span_id: String,
    pub operation: String,
    pub service: String,
    pub tags: Vec<(String, Value)>,
    /// `(refType, trace id, span id)`; OTLP links arrive as `FOLLOWS_FROM`.
    pub references: Vec<(String, String, String)>,
}

impl QueriedSpan {
    /// The tag `key` as text (strings as they are, other values in JSON).
    pub fn tag(&self, key: &str) -> Option<String> {
        self.tags
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| match v {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
    }
}

impl Jaeger {
    /// Starts Jaeger and waits until its query API answers.
    pub async fn start(binary: &Path) -> Self {
        let dir = temp_dir("opscope-jaeger");
        let config = dir.path().join("jaeger.yaml");
        std::fs::write(&config, CONFIG).expect("config");
        let mut command = Command::new(binary);
        command.arg(format!("--config={}", config.display()));
        let mut process =
            ServerProcess::start_on_port_zero("jaeger", command, QUERY_HTTP, "/api/services", dir)
                .await;
        let otlp_grpc = format!("http://{}", process.logged_address(OTLP_GRPC).await);
        let otlp_http = format!("http://{}", process.logged_address(OTLP_HTTP).await);
        Self {
            process,
            otlp_grpc,
            otlp_http,
            http: http_client(),
        }
    }

    /// Its OTLP/gRPC endpoint, as an otlp exporter's `endpoint`.
    pub fn otlp_grpc_endpoint(&self) -> &str {
        &self.otlp_grpc
    }

    /// Its OTLP/HTTP base URL.
    pub fn otlp_http_endpoint(&self) -> &str {
        &self.otlp_http
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// The services Jaeger has spans of.
    pub async fn services(&self) -> Vec<String> {
        let body = self.get_json("/api/services", &[]).await;
        strings(&body["data"])
    }

    /// The operations (span names) Jaeger has of `service`.
    pub async fn operations(&self, service: &str) -> Vec<String> {
        let body = self
            .get_json(&format!("/api/services/{service}/operations"), &[])
            .await;
        body["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|operation| operation["name"].as_str().map(String::from))
            .collect()
    }

    /// The spans of the traces a search by service (and operation, when given) finds
    /// in the last hour, at most `limit` traces.
    pub async fn search(
        &self,
        service: &str,
        operation: Option<&str>,
        limit: usize,
    ) -> Vec<QueriedSpan> {
        let limit = limit.to_string();
        let mut params = vec![("service", service), ("lookback", "1h"), ("limit", &limit)];
        if let Some(operation) = operation {
            params.push(("operation", operation));
        }
        spans(&self.get_json("/api/traces", &params).await)
    }

    /// The spans of one trace (`trace_id` in hex), empty when Jaeger has none.
    pub async fn trace(&self, trace_id: &str) -> Vec<QueriedSpan> {
        spans(&self.get_json(&format!("/api/traces/{trace_id}"), &[]).await)
    }

    /// Waits until `check` holds for what `probe` answers; fails with the last answer.
    pub async fn eventually<T: std::fmt::Debug, F: Future<Output = T>>(
        &self,
        what: &str,
        probe: impl FnMut() -> F,
        check: impl Fn(&T) -> bool,
    ) -> T {
        poll_until(probe, check).await.unwrap_or_else(|last| {
            panic!(
                "jaeger: {what} not seen; last answer {last:#?}\n{}",
                self.log_tail()
            )
        })
    }

    async fn get_json(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let Ok(url) = url::Url::parse_with_params(&self.process.url(path), params) else {
            return Value::Null;
        };
        let Ok(response) = self.http.get(url).send().await else {
            return Value::Null;
        };
        serde_json::from_str(&response.text().await.unwrap_or_default()).unwrap_or_default()
    }
}

/// Jaeger's own config: the OTLP receiver into a memory store the query API reads,
/// every listener on a port of its choosing; its self-telemetry off, so that no fixed
/// port is bound.
const CONFIG: &str = "service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:0
    grpc:
      endpoint: 127.0.0.1:0
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
      http:
        endpoint: 127.0.0.1:0
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
";

fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item.as_str().map(String::from))
        .collect()
}

/// Every span of a `{"data": [trace, ...]}` answer.
fn spans(answer: &Value) -> Vec<QueriedSpan> {
    let mut out = Vec::new();
    for trace in answer["data"].as_array().into_iter().flatten() {
        let processes = &trace["processes"];
        for span in trace["spans"].as_array().into_iter().flatten() {
            let process = span["processID"].as_str().unwrap_or_default();
            let tags = span["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|tag| {
                    let key = tag["key"].as_str().unwrap_or_default().to_string();
                    (key, tag["value"].clone())
                })
                .collect();
            let references = span["references"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|reference| {
                    (
                        reference["refType"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        full_trace_id(reference["traceID"].as_str().unwrap_or_default()),
                        reference["spanID"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            out.push(QueriedSpan {
                trace_id: full_trace_id(span["traceID"].as_str().unwrap_or_default()),
                span_id: span["spanID"].as_str().unwrap_or_default().to_string(),
                operation: span["operationName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                service: processes[process]["serviceName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                tags,
                references,
            });
        }
    }
    out
}

/// A Jaeger trace id in its 32-digit OTLP form.
pub fn full_trace_id(id: &str) -> String {
    format!("{:0>32}", id.to_ascii_lowercase())
}
