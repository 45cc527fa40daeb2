//! A real Prometheus on a free loopback port that scrapes one target every second
//! (`honor_labels: true`, job `opscope`), evaluates rule files every second, receives
//! remote write and answers PromQL; and `promtool check metrics`.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::backend::{
    ServerProcess, free_port, http_client, installed_or_skip, poll_until, temp_dir,
};

/// A series an instant query returned: its labels and value.
pub type QueriedSeries = (BTreeMap<String, String>, f64);

/// The `prometheus` binary, or `None` (with the reason printed) when the test may skip.
pub fn prometheus_or_skip() -> Option<PathBuf> {
    installed_or_skip(&["prometheus"], "prometheus")
}

/// The `promtool` binary, or `None` (with the reason printed) when the test may skip.
pub fn promtool_or_skip() -> Option<PathBuf> {
    installed_or_skip(&["promtool"], "prometheus")
}

/// `promtool check metrics` on an exposition: its verdict and what it said.
pub fn promtool_check(promtool: &Path, exposition: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(exposition.as_bytes())
            .expect("promtool reads stdin");
    }
    let output = child.wait_with_output().expect("promtool finishes");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

/// A Prometheus server on a free loopback port, killed on drop.
pub struct PrometheusServer {
    process: ServerProcess,
    http: reqwest::Client,
}

impl PrometheusServer {
    /// Starts Prometheus scraping `scrape_target` (`host:port`) and waits until it is ready.
    pub async fn start(binary: &Path, scrape_target: impl Display) -> Self {
        Self::start_with_rules(binary, scrape_target, &[]).await
    }

    /// As [`Self::start`], also evaluating the recording and alerting rules of
    /// `rule_files` every second.
    pub async fn start_with_rules(
        binary: &Path,
        scrape_target: impl Display,
        rule_files: &[PathBuf],
    ) -> Self {
        let dir = temp_dir("opscope-prometheus");
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, scrape_config(scrape_target, rule_files))
            .expect("config written");
        let port = free_port();
        let mut command = Command::new(binary);
        command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-remote-write-receiver")
            .arg("--enable-feature=exemplar-storage");
        let base_url = format!("http://127.0.0.1:{port}");
        let process = ServerProcess::start("prometheus", command, base_url, dir).await;
        Self {
            process,
            http: http_client(),
        }
    }

    /// `path` (with its leading `/`) on the server.
    pub fn url(&self, path: &str) -> String {
        self.process.url(path)
    }

    /// Where remote write is received.
    pub fn remote_write_url(&self) -> String {
        self.url("/api/v1/write")
    }

    /// The last lines Prometheus logged.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// The series an instant query returns: labels and value.
    pub async fn query(&self, promql: &str) -> Vec<QueriedSeries> {
        let body = self.get_json("/api/v1/query", &[("query", promql)]).await;
        let results = body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        results.iter().map(queried_series).collect()
    }

    /// The exemplars Prometheus stored for a series selector in the last minutes.
    pub async fn exemplars(&self, selector: &str) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (start, end) = ((now - 600).to_string(), (now + 60).to_string());
        let params = [("query", selector), ("start", &start), ("end", &end)];
        self.get_json("/api/v1/query_exemplars", &params)
            .await
            .to_string()
    }

    /// Waits until `check` holds for the query's answer; fails with what was seen.
    pub async fn eventually(
        &self,
        promql: &str,
        check: impl Fn(&[QueriedSeries]) -> bool,
    ) -> Vec<QueriedSeries> {
        let answer = poll_until(move || self.query(promql), |answer| check(answer)).await;
        answer.unwrap_or_else(|last| {
            panic!(
                "{promql} never matched; last answer {last:?}\n{}",
                self.log_tail()
            )
        })
    }

    /// A GET of the HTTP API with query parameters; `null` when it fails.
    async fn get_json(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let Ok(url) = url::Url::parse_with_params(&self.url(path), params) else {
            return Value::Null;
        };
        let Ok(response) = self.http.get(url).send().await else {
            return Value::Null;
        };
        let body = response.text().await.unwrap_or_default();
        serde_json::from_str(&body).unwrap_or_default()
    }
}

fn scrape_config(scrape_target: impl Display, rule_files: &[PathBuf]) -> String {
    let rules: String = rule_files
        .iter()
        .map(|path| format!("  - '{}'\n", path.display()))
        .collect();
    let rules = if rules.is_empty() {
        String::new()
    } else {
        format!("rule_files:\n{rules}")
    };
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rules}\
         scrape_configs:\n  - job_name: opscope\n    honor_labels: true\n    \
         static_configs:\n      - targets: ['{scrape_target}']\n"
    )
}

/// One element of an instant query's `result`.
fn queried_series(result: &Value) -> QueriedSeries {
    let labels = result["metric"]
        .as_object()
        .map(|metric| {
            metric
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let value = result["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    (labels, value)
}

/// A check for [`PrometheusServer::eventually`]: exactly one series, of `value`, with
/// all of `labels`.
pub fn one_with(
    value: f64,
    labels: &'static [(&'static str, &'static str)],
) -> impl Fn(&[QueriedSeries]) -> bool {
    move |answer| {
        answer.len() == 1
            && answer.iter().all(|(series, v)| {
                *v == value
                    && labels
                        .iter()
                        .all(|(name, want)| series.get(*name).map(String::as_str) == Some(*want))
            })
    }
}
