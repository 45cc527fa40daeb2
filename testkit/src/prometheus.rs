//! A real Prometheus on a loopback port of its choosing that scrapes one target every second
//! (`honor_labels: true`, job `opscope`), evaluates rule files every second, receives
//! remote write and answers PromQL; and `promtool check metrics`. Debian's 2.x from
//! `PATH`, or 3.x as `testkit/backends/build prometheus` builds it from its module,
//! which also takes OTLP metrics and sends its alerts to an Alertmanager.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::backend::{
    LoggedAddress, ServerProcess, built_or_skip, http_client, installed_or_skip, poll_until,
    temp_dir,
};

/// What Prometheus logs with the address it bound (`msg="Listening on"
/// address=127.0.0.1:34833`); an earlier line names the configured `127.0.0.1:0`.
const LISTENING: LoggedAddress = LoggedAddress {
    line: "Listening on",
    key: "address=",
};

/// A series an instant query returned: its labels and value.
pub type QueriedSeries = (BTreeMap<String, String>, f64);

/// The `prometheus` binary, or `None` (with the reason printed) when the test may skip.
pub fn prometheus_or_skip() -> Option<PathBuf> {
    installed_or_skip(&["prometheus"], "prometheus")
}

/// Prometheus 3 built from its module, or `None` (with the reason printed) when the
/// test may skip.
pub fn prometheus3_or_skip() -> Option<PathBuf> {
    built_or_skip("prometheus", "prometheus")
}

/// What a Prometheus is started with beyond its scrape target.
#[derive(Debug, Default, Clone)]
pub struct PrometheusOptions {
    /// Recording and alerting rules, evaluated every second.
    pub rule_files: Vec<PathBuf>,
    /// Where firing alerts go (`host:port` of an Alertmanager).
    pub alertmanager: Option<String>,
    /// Take OTLP metrics at `/api/v1/otlp/v1/metrics` (Prometheus 3).
    pub otlp_receiver: bool,
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

/// A Prometheus server on a loopback port of its choosing, killed on drop.
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
        let options = PrometheusOptions {
            rule_files: rule_files.to_vec(),
            ..PrometheusOptions::default()
        };
        Self::start_with(binary, scrape_target, &options).await
    }

    /// As [`Self::start`], with `options`.
    pub async fn start_with(
        binary: &Path,
        scrape_target: impl Display,
        options: &PrometheusOptions,
    ) -> Self {
        let dir = temp_dir("opscope-prometheus");
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, scrape_config(scrape_target, options))
            .expect("config written");
        let mut command = Command::new(binary);
        command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--web.enable-remote-write-receiver")
            .arg("--enable-feature=exemplar-storage");
        if options.otlp_receiver {
            command.arg("--web.enable-otlp-receiver");
        }
        let process =
            ServerProcess::start_on_port_zero("prometheus", command, LISTENING, "/-/ready", dir)
                .await;
        Self {
            process,
            http: http_client(),
        }
    }

    /// `path` (with its leading `/`) on the server.
    pub fn url(&self, path: &str) -> String {
        self.process.url(path)
    }

    /// Where OTLP metrics are received, as an `otlphttp` exporter's `metrics_endpoint`.
    pub fn otlp_metrics_url(&self) -> String {
        self.url("/api/v1/otlp/v1/metrics")
    }

    /// Where remote write is received.
    pub fn remote_write_url(&self) -> String {
        self.url("/api/v1/write")
    }

    /// The last lines Prometheus logged.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// The sum of the samples of `family` on Prometheus's own metrics page (its
    /// self-telemetry, which it does not scrape here).
    pub async fn own_metric(&self, family: &str) -> f64 {
        let Ok(response) = self.http.get(self.url("/metrics")).send().await else {
            return 0.0;
        };
        let page = response.text().await.unwrap_or_default();
        page.lines()
            .filter(|line| {
                line.strip_prefix(family)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
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

fn scrape_config(scrape_target: impl Display, options: &PrometheusOptions) -> String {
    let rules: String = options
        .rule_files
        .iter()
        .map(|path| format!("  - '{}'\n", path.display()))
        .collect();
    let rules = if rules.is_empty() {
        String::new()
    } else {
        format!("rule_files:\n{rules}")
    };
    let alerting = options.alertmanager.as_ref().map_or(String::new(), |target| {
        format!("alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{target}']\n")
    });
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rules}{alerting}\
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
