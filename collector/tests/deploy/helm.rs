//! The Helm chart of deploy/helm: it lints, renders the objects kustomize renders,
//! validates against the Kubernetes schemas, and its ebpf settings reach the agents.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::process::{Command, Output};

use serde_json::Value;

use crate::overlays::without_ebpf_receiver;
use crate::support::{comparable, deploy_script, describe, python_with, read, repo};

/// The chart's values that turn on every option.
const HELM_EVERY_OPTION: &str =
    "namespace.create=true,serviceMonitor.enabled=true,prometheusRule.enabled=true";

/// `helm` (built from its module) on the chart with `--set` values, or `None` when
/// the test may skip.
fn helm(args: &[&str]) -> Option<Output> {
    let binary = opscope_testkit::backend::built_or_skip("helm", "helm")?;
    Some(
        Command::new(binary)
            .args(args)
            .current_dir(repo(""))
            .output()
            .unwrap_or_else(|e| panic!("run helm: {e}")),
    )
}

fn helm_template(set: &str) -> Option<Output> {
    let mut args = vec![
        "template",
        "opscope",
        "deploy/helm/opscope",
        "--namespace",
        "opscope",
    ];
    if !set.is_empty() {
        args.extend(["--set", set]);
    }
    let output = helm(&args)?;
    assert!(
        output.status.success(),
        "helm template --set {set}: {}",
        describe(&output)
    );
    Some(output)
}

/// The values the chart is linted, rendered and validated with.
const HELM_SETS: [&str; 5] = [
    "",
    HELM_EVERY_OPTION,
    "gateway.enabled=false",
    "ebpf.enabled=true,ebpf.privileged=true",
    "gateway.enabled=false,ebpf.enabled=true",
];

#[test]
fn the_helm_chart_lints_with_the_default_values_and_every_option() {
    for set in HELM_SETS {
        let mut args = vec!["lint", "--strict", "deploy/helm/opscope"];
        if !set.is_empty() {
            args.extend(["--set", set]);
        }
        let Some(output) = helm(&args) else {
            return;
        };
        assert!(
            output.status.success(),
            "helm lint --set {set}: {}",
            describe(&output)
        );
    }
}

#[test]
fn the_helm_chart_renders_what_kustomize_renders() {
    if !python_with("yaml") {
        return;
    }
    // (values, the kustomize trees whose objects together are the chart's)
    let cases: [(&str, &[&str]); 5] = [
        ("", &["deploy/kubernetes/base"]),
        ("gateway.enabled=false", &["deploy/kubernetes/single-node"]),
        ("ebpf.enabled=true", &["deploy/kubernetes/overlays/ebpf"]),
        (
            "ebpf.enabled=true,ebpf.privileged=true",
            &["deploy/kubernetes/overlays/ebpf-privileged"],
        ),
        (
            HELM_EVERY_OPTION,
            &[
                "deploy/kubernetes/overlays/servicemonitor",
                "deploy/kubernetes/overlays/prometheus-rule",
            ],
        ),
    ];
    for (set, trees) in cases {
        let Some(chart) = helm_template(set) else {
            return;
        };
        let mut kustomize = BTreeMap::new();
        for tree in trees {
            let rendered = deploy_script("render.py", &[tree]);
            assert!(rendered.status.success(), "{tree}: {}", describe(&rendered));
            kustomize.extend(comparable(&rendered.stdout));
        }
        let mut chart = comparable(&chart.stdout);
        if !set.contains("namespace.create=true") {
            // `helm install --create-namespace` makes it; kustomize ships one.
            kustomize.remove("Namespace opscope");
        }
        let chart_kinds: BTreeSet<&String> = chart.keys().collect();
        let kustomize_kinds: BTreeSet<&String> = kustomize.keys().collect();
        assert_eq!(
            chart_kinds, kustomize_kinds,
            "--set {set:?}: the objects differ"
        );
        for (key, expected) in &kustomize {
            let object = chart.remove(key).expect("the same object");
            assert_eq!(
                &object, expected,
                "--set {set:?}: {key} differs from kustomize's ({trees:?})"
            );
        }
        println!(
            "helm template --set {set:?}: {} objects as kustomize renders them",
            kustomize.len()
        );
    }
}

#[test]
fn the_helm_chart_validates_against_the_kubernetes_schemas() {
    if !python_with("yaml, kubernetes_validate") {
        return;
    }
    for set in HELM_SETS {
        let Some(chart) = helm_template(set) else {
            return;
        };
        let mut child = Command::new("python3")
            .arg(repo("deploy/kubernetes/validate.py"))
            .arg("-")
            .current_dir(repo(""))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("validate.py starts");
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&chart.stdout)
                .expect("validate.py reads the chart");
        }
        let output = child.wait_with_output().expect("validate.py finishes");
        assert!(
            output.status.success(),
            "--set {set:?}: {}",
            describe(&output)
        );
        println!(
            "helm template --set {set:?}: {}",
            String::from_utf8_lossy(&output.stdout).trim()
        );
    }
}

/// Two releases on one node (in two namespaces: the objects' names are fixed) keep
/// their agents' state in two directories of the node, not in one they would share.
#[test]
fn the_helm_charts_agents_keep_their_state_in_a_directory_of_their_namespace() {
    for namespace in ["opscope", "team-b"] {
        let args = [
            "template",
            "opscope",
            "deploy/helm/opscope",
            "--namespace",
            namespace,
        ];
        let Some(output) = helm(&args) else {
            return;
        };
        assert!(output.status.success(), "{}", describe(&output));
        let objects = comparable(&output.stdout);
        let pod = &objects["DaemonSet opscope-agent"]["spec"]["template"]["spec"];
        let state = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|volume| volume["name"] == "state")
            .expect("the agent has a state volume");
        assert_eq!(
            state["hostPath"]["path"],
            format!("/var/lib/opscope/{namespace}")
        );
    }
}

/// The chart's `ebpf` settings reach the receiver, on the all-in-one agent too.
#[test]
fn the_helm_charts_ebpf_settings_reach_the_agents_config() {
    let set = "gateway.enabled=false,ebpf.enabled=true,ebpf.interval=30s,\
               ebpf.apiServers={10.0.0.5:6443,[fd00::5]:6443},ebpf.namespaces={team-a}";
    let Some(chart) = helm_template(set) else {
        return;
    };
    let objects = comparable(&chart.stdout);
    let text = objects["ConfigMap opscope-config"]["data"]["opscope.yaml"]
        .as_str()
        .unwrap_or_default();
    assert!(
        without_ebpf_receiver(text) == read(&repo("config/single-node.yaml")),
        "config/single-node.yaml with the ebpf receiver, and nothing else changed:\n{text}"
    );
    let config: Value = serde_saphyr::from_str(text).expect("the agent's config is YAML");
    let ebpf = &config["receivers"]["ebpf"];
    assert_eq!(
        ebpf["api_servers"],
        serde_json::json!(["10.0.0.5:6443", "[fd00::5]:6443"])
    );
    assert_eq!(ebpf["namespaces"], serde_json::json!(["team-a"]));
    assert_eq!(ebpf["interval"], "30s");
    assert_eq!(
        config["service"]["pipelines"]["metrics"]["receivers"],
        serde_json::json!(["otlp", "ebpf"])
    );
}
