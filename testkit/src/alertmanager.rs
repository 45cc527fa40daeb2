//! A real Alertmanager on a loopback port of its choosing, clustering off, routing every alert to
//! a receiver that notifies no one: a test sends it alerts and reads back what it lists.
//! Debian's (0.25) from `PATH`, or 0.35 as `testkit/backends/build alertmanager` builds
//! it from its module.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::backend::{
    LoggedAddress, ServerProcess, built_or_skip, http_client, installed_or_skip, poll_until,
    temp_dir,
};

/// Debian's name for the binary, then upstream's.
const BINARIES: [&str; 2] = ["prometheus-alertmanager", "alertmanager"];
/// What Alertmanager logs with the address it bound (`msg="Listening on"
/// address=127.0.0.1:34833`).
const LISTENING: LoggedAddress = LoggedAddress {
    line: "Listening on",
    key: "address=",
};
const CONFIG: &str = "route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n";

/// The Alertmanager binary, or `None` (with the reason printed) when the test may skip.
pub fn alertmanager_or_skip() -> Option<PathBuf> {
    installed_or_skip(&BINARIES, "prometheus-alertmanager")
}

/// Alertmanager 0.35 built from its module, or `None` (with the reason printed) when
/// the test may skip.
pub fn alertmanager_built_or_skip() -> Option<PathBuf> {
    built_or_skip("alertmanager", "alertmanager")
}

/// An Alertmanager on a loopback port of its choosing, killed on drop.
pub struct Alertmanager {
    process: ServerProcess,
    url: String,
    http: reqwest::Client,
}

impl Alertmanager {
    /// Starts Alertmanager and waits until it is ready.
    pub async fn start(binary: &Path) -> Self {
        let dir = temp_dir("opscope-alertmanager");
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(&config, CONFIG).expect("write config");
        let mut command = Command::new(binary);
        command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--cluster.listen-address=");
        let process =
            ServerProcess::start_on_port_zero("alertmanager", command, LISTENING, "/-/ready", dir)
                .await;
        let url = process.url("");
        Self {
            process,
            url,
            http: http_client(),
        }
    }

    /// The base URL, as the alertmanager exporter's `endpoint`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `host:port`, as a Prometheus `alertmanagers` target.
    pub fn host_port(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// The active alerts Alertmanager lists with the given `alertname`.
    pub async fn active_alerts(&self, alertname: &str) -> Vec<Value> {
        let url = self.process.url("/api/v2/alerts?active=true");
        let answer = self.http.get(url).send().await.expect("GET /api/v2/alerts");
        let body = answer.bytes().await.expect("alerts body");
        let alerts: Vec<Value> = serde_json::from_slice(&body).expect("alerts JSON");
        alerts
            .into_iter()
            .filter(|alert| alert["labels"]["alertname"] == alertname)
            .filter(|alert| alert["status"]["state"] == "active")
            .collect()
    }

    /// Waits until the active alerts named `alertname` satisfy `expected`; returns them.
    pub async fn wait_for(
        &self,
        alertname: &str,
        expected: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let alerts = poll_until(move || self.active_alerts(alertname), |a| expected(a)).await;
        alerts.unwrap_or_else(|last| {
            panic!("alertmanager lists {last:#?}\n{}", self.process.log_tail())
        })
    }
}

/// An alert's labels.
pub fn labels(alert: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(alert["labels"].clone()).expect("labels are strings")
}
