//! A real VictoriaLogs (built by `testkit/backends/build victorialogs`) on a loopback
//! port of its choosing: it takes Loki's push API at `/insert/loki/api/v1/push` (protobuf +
//! snappy, `X-Scope-OrgID` as its tenant) and answers LogsQL at `/select/logsql/query`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value};

use crate::backend::{
    LoggedAddress, ServerProcess, built_or_skip, http_client, poll_until, temp_dir,
};

/// What VictoriaLogs logs with the address it bound
/// (`started server at http://127.0.0.1:38445/`).
const LISTENING: LoggedAddress = LoggedAddress {
    line: "started server at",
    key: "http://",
};

/// The `victoria-logs` binary, or `None` (with the reason printed) when the test may skip.
pub fn victorialogs_or_skip() -> Option<PathBuf> {
    built_or_skip("victoria-logs", "victorialogs")
}

/// One log entry a query returned: its fields (`_msg`, `_time`, `_stream`, the stream
/// labels and the structured metadata, each a field of its own).
pub type LogEntry = Map<String, Value>;

/// A VictoriaLogs on a loopback port of its choosing, killed on drop.
pub struct VictoriaLogs {
    process: ServerProcess,
    http: reqwest::Client,
}

impl VictoriaLogs {
    /// Starts VictoriaLogs and waits until it is healthy.
    pub async fn start(binary: &Path) -> Self {
        let dir = temp_dir("opscope-victorialogs");
        let mut command = Command::new(binary);
        command
            .arg("-httpListenAddr=127.0.0.1:0")
            .arg(format!(
                "-storageDataPath={}",
                dir.path().join("data").display()
            ))
            // Real operator lines keep the time they were logged, years ago.
            .arg("-retentionPeriod=100y")
            // Keep each line as Loki would (VictoriaLogs otherwise splits a JSON line
            // into fields and has no `_msg` when it holds no `msg`).
            .arg("-loki.disableMessageParsing");
        let process =
            ServerProcess::start_on_port_zero("victoria-logs", command, LISTENING, "/health", dir)
                .await;
        Self {
            process,
            http: http_client(),
        }
    }

    /// The base URL for a `loki` exporter's `endpoint`: the exporter appends
    /// `/loki/api/v1/push`.
    pub fn loki_endpoint(&self) -> String {
        self.process.url("/insert")
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// The entries a LogsQL query over all time returns, for the default tenant
    /// or `tenant` (`account` or `account:project`, as `X-Scope-OrgID` names it).
    pub async fn query(&self, logsql: &str, tenant: Option<&str>) -> Vec<LogEntry> {
        let params = [("query", logsql), ("limit", "10000")];
        let Ok(url) =
            url::Url::parse_with_params(&self.process.url("/select/logsql/query"), params)
        else {
            return Vec::new();
        };
        let mut request = self.http.get(url);
        if let Some(tenant) = tenant {
            let (account, project) = tenant.split_once(':').unwrap_or((tenant, "0"));
            request = request
                .header("AccountID", account)
                .header("ProjectID", project);
        }
        let Ok(response) = request.send().await else {
            return Vec::new();
        };
        let body = response.text().await.unwrap_or_default();
        body.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|entry| entry.as_object().cloned())
            .collect()
    }

    /// Waits until the query's answer satisfies `check`; fails with the last answer.
    pub async fn eventually(
        &self,
        logsql: &str,
        tenant: Option<&str>,
        check: impl Fn(&[LogEntry]) -> bool,
    ) -> Vec<LogEntry> {
        let answer = poll_until(|| self.query(logsql, tenant), |entries| check(entries)).await;
        answer.unwrap_or_else(|last| {
            panic!(
                "victoria-logs: {logsql} never matched; last answer {last:#?}\n{}",
                self.log_tail()
            )
        })
    }
}

/// A field of an entry as text.
pub fn field<'a>(entry: &'a LogEntry, name: &str) -> Option<&'a str> {
    entry.get(name).and_then(Value::as_str)
}

/// A LogsQL exact-match filter on a field, its value quoted as LogsQL strings are.
pub fn exact(field: &str, value: &str) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_default();
    format!("{field}:={quoted}")
}
