//! The Prometheus rules of deploy/prometheus: promtool checks them and runs their unit
//! tests, and every alert has a test that fires it and one that does not.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use opscope_testkit::prometheus::promtool_or_skip;
use serde_json::Value;

use crate::support::{document, repo};

fn promtool(promtool: &Path, args: &[&str]) {
    let output = Command::new(promtool)
        .args(args)
        .current_dir(repo("deploy/prometheus"))
        .output()
        .expect("run promtool");
    assert!(
        output.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_prometheus_rules_check_and_pass_their_unit_tests() {
    let Some(binary) = promtool_or_skip() else {
        return;
    };
    promtool(&binary, &["check", "rules", "rules.yaml"]);
    promtool(&binary, &["test", "rules", "tests.yaml"]);
}

#[test]
fn every_alert_has_a_unit_test() {
    let rules = document(&repo("deploy/prometheus/rules.yaml"));
    let alerts: BTreeSet<String> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["alert"].as_str().map(String::from))
        .collect();
    let tests = document(&repo("deploy/prometheus/tests.yaml"));
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .collect();
    for alert in &alerts {
        let of_alert: Vec<&&Value> = cases.iter().filter(|c| c["alertname"] == **alert).collect();
        let fires = of_alert
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()));
        let silent = of_alert
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(Vec::is_empty));
        assert!(fires && silent, "{alert}: tested firing and silent");
    }
    assert_eq!(alerts.len(), 9, "{alerts:?}");
}
