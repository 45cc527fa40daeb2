//! What `deploy/` and `config/` ship: every config validates with `opscope validate`,
//! the kustomize trees are well-formed YAML of the expected kinds with the agent's
//! promises (read-only pod logs, non-root, probes...), copies kustomize needs inside
//! its tree match their sources, and the Prometheus rules pass `promtool check rules`
//! and their unit tests.
//!
//! The kustomize trees are rendered by `deploy/kubernetes/render.py` (checked against
//! kustomize where it is installed) and validated against the Kubernetes OpenAPI
//! schemas by `deploy/kubernetes/validate.py`; no cluster is needed. Those tests skip
//! without PyYAML and kubernetes-validate unless `OPSCOPE_REQUIRE_BACKENDS=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use opscope_testkit::backend::backends_required;
use opscope_testkit::prometheus::promtool_or_skip;
use serde_json::Value;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every YAML document of a file.
fn documents(path: &Path) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(&read(path))
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
        .into_iter()
        .filter(|doc| !doc.is_null())
        .collect()
}

fn document(path: &Path) -> Value {
    let mut docs = documents(path);
    assert_eq!(docs.len(), 1, "{}: one document", path.display());
    docs.remove(0)
}

/// The environment the shipped configs read, as the manifests set it.
const CONFIG_ENV: &[(&str, &str)] = &[
    ("KUBE_NODE_NAME", "node-1"),
    ("POD_IP", "10.244.1.7"),
    ("CLUSTER_NAME", "test"),
    ("LOKI_ENDPOINT", "http://loki:3100"),
    (
        "PROMETHEUS_REMOTE_WRITE_ENDPOINT",
        "http://prometheus:9090/api/v1/write",
    ),
    ("JAEGER_OTLP_ENDPOINT", "http://jaeger-collector:4317"),
    ("ALERTMANAGER_ENDPOINT", "http://alertmanager:9093"),
    (
        "OPSCOPE_GATEWAY_HOSTNAME",
        "opscope-gateway.opscope.svc.cluster.local",
    ),
    // Where the Secret opscope-audit-token is mounted; here a token of the tests.
    (
        "OPSCOPE_AUDIT_TOKEN_FILE",
        "tests/fixtures/kubernetes/audit-token",
    ),
];

fn validate(config: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_opscope"));
    command.arg("validate").arg("-c").arg(config);
    for (name, _) in CONFIG_ENV {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("run opscope validate")
}

#[test]
fn every_shipped_config_validates() {
    for name in [
        "default.yaml",
        "daemonset.yaml",
        "gateway.yaml",
        "single-node.yaml",
        "local.yaml",
    ] {
        let path = repo("config").join(name);
        let output = validate(&path, CONFIG_ENV);
        assert!(
            output.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn the_daemonset_config_needs_its_backend_endpoints() {
    let output = validate(&repo("config/daemonset.yaml"), &[("KUBE_NODE_NAME", "n")]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("LOKI_ENDPOINT"), "{stderr}");
}

/// The deployment has durable storage (the node's hostPath, the gateway's volume
/// claim), so its queues answer clients only once a batch is on disk: with the
/// default `ack: enqueued` a `kill -9` loses what was acknowledged but still in memory.
#[test]
fn the_shipped_durable_queues_acknowledge_durably() {
    for name in ["daemonset.yaml", "gateway.yaml", "single-node.yaml"] {
        let config = document(&repo("config").join(name));
        let exporters = config["exporters"].as_object().expect("exporters");
        let durable: Vec<&String> = exporters
            .iter()
            .filter(|(_, exporter)| exporter["sending_queue"]["storage"].is_string())
            .map(|(exporter, _)| exporter)
            .collect();
        assert!(!durable.is_empty(), "{name}: durable queues");
        for exporter in durable {
            assert_eq!(
                exporters[exporter]["sending_queue"]["ack"], "durable",
                "{name}: exporters.{exporter}.sending_queue.ack"
            );
        }
    }
}

/// The kinds of the resources a kustomization lists, its overlays' bases included,
/// after checking that every file it names exists and parses.
fn kustomize_kinds(dir: &Path) -> Vec<String> {
    let kustomization = document(&dir.join("kustomization.yaml"));
    assert_eq!(kustomization["kind"], "Kustomization", "{}", dir.display());
    let mut kinds = Vec::new();
    for resource in strings(&kustomization["resources"]) {
        let path = dir.join(&resource);
        if path.is_dir() {
            kinds.extend(kustomize_kinds(&path));
        } else {
            for doc in documents(&path) {
                let kind = doc["kind"].as_str().unwrap_or_default().to_string();
                assert!(
                    !kind.is_empty() && doc["apiVersion"].is_string(),
                    "{}: a resource has apiVersion and kind",
                    path.display()
                );
                assert!(
                    doc["metadata"]["name"].is_string(),
                    "{}: a resource has a name",
                    path.display()
                );
                kinds.push(kind);
            }
        }
    }
    for generator in kustomization["configMapGenerator"]
        .as_array()
        .into_iter()
        .flatten()
    {
        kinds.push("ConfigMap".into());
        for file in strings(&generator["files"]) {
            let source = file.split_once('=').map_or(file.as_str(), |(_, f)| f);
            assert!(
                dir.join(source).is_file(),
                "{}: configMapGenerator file {source} exists",
                dir.display()
            );
        }
    }
    kinds
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

fn kinds_of(overlay: &str) -> BTreeSet<String> {
    kustomize_kinds(&repo("deploy/kubernetes").join(overlay))
        .into_iter()
        .collect()
}

fn set(kinds: &[&str]) -> BTreeSet<String> {
    kinds.iter().map(|k| k.to_string()).collect()
}

#[test]
fn the_kustomize_trees_hold_the_expected_kinds() {
    let single_node = [
        "Namespace",
        "ServiceAccount",
        "DaemonSet",
        "Service",
        "NetworkPolicy",
        "ConfigMap",
    ];
    assert_eq!(kinds_of("single-node"), set(&single_node));
    let base = [&single_node[..], &["StatefulSet", "PodDisruptionBudget"]].concat();
    assert_eq!(kinds_of("base"), set(&base));
    let with = |more: &[&str]| set(&[&base[..], more].concat());
    assert_eq!(
        kinds_of("overlays/servicemonitor"),
        with(&["ServiceMonitor"])
    );
    assert_eq!(
        kinds_of("overlays/prometheus-rule"),
        with(&["PrometheusRule"])
    );
    assert_eq!(kinds_of("overlays/ebpf"), with(&[]));
    assert_eq!(kinds_of("overlays/ebpf-privileged"), with(&[]));
    // Neither agents nor gateways call the API server, so they are granted nothing;
    // nor does the kernel probe, which names pods from the node's folders.
    for overlay in [
        "base",
        "single-node",
        "overlays/servicemonitor",
        "overlays/prometheus-rule",
        "overlays/ebpf",
        "overlays/ebpf-privileged",
    ] {
        let kinds = kinds_of(overlay);
        assert!(
            !kinds.contains("ClusterRole") && !kinds.contains("Role"),
            "{overlay}: no RBAC"
        );
    }
}

#[test]
fn the_daemonset_keeps_the_agents_promises() {
    let daemonset = document(&repo("deploy/kubernetes/single-node/daemonset.yaml"));
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let ports: BTreeSet<u64> = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["containerPort"].as_u64())
        .collect();
    assert!(
        [4317, 4318, 8888, 8889, 9765, 13133]
            .iter()
            .all(|p| ports.contains(p)),
        "{ports:?}"
    );
    assert!(container["resources"]["requests"].is_object());
    assert!(container["resources"]["limits"]["memory"].is_string());
    let node_name = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "KUBE_NODE_NAME")
        .expect("KUBE_NODE_NAME is set");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );

    let mount = |name: &str| {
        container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("volume {name} is mounted"))
    };
    let host_path = |name: &str| {
        pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
            .map(|v| v["hostPath"]["path"].clone())
            .unwrap_or_default()
    };
    assert_eq!(host_path("pod-logs"), "/var/log/pods");
    assert_eq!(mount("pod-logs")["readOnly"], true);
    assert_eq!(host_path("state"), "/var/lib/opscope");
    assert_eq!(mount("state")["mountPath"], "/var/lib/opscope");

    // The config's paths are those the DaemonSet mounts.
    let config = read(&repo("config/daemonset.yaml"));
    assert!(config.contains("storage: /var/lib/opscope/filelog"));
    assert!(config.contains("storage: /var/lib/opscope/queue"));
    assert!(config.contains("include: [/var/log/pods/*/*/*.log]"));

    let otlp = document(&repo("deploy/kubernetes/single-node/service-otlp.yaml"));
    assert_eq!(otlp["spec"]["internalTrafficPolicy"], "Local");
}

/// The default deployment is the multi-node shape: agents that route by object to
/// three gateways, which take the audit webhook; one gateway may be drained at a time.
#[test]
fn the_base_is_a_tier_of_three_gateways_the_agents_route_to() {
    let base = |name: &str| document(&repo("deploy/kubernetes/base").join(name));
    let gateways = base("gateway-statefulset.yaml");
    assert_eq!(gateways["spec"]["replicas"], 3);
    assert_eq!(gateways["spec"]["serviceName"], "opscope-gateway");
    let anti_affinity = &gateways["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert_eq!(
        anti_affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(base("gateway-pdb.yaml")["spec"]["maxUnavailable"], 1);
    let service = base("gateway-service.yaml");
    assert_eq!(
        service["spec"]["clusterIP"], "None",
        "headless: one record per gateway"
    );
    let kustomization = base("kustomization.yaml");
    assert_eq!(kustomization["resources"][0], "../single-node");
    let audit_selector = &kustomization["patches"][0]["patch"];
    assert!(
        audit_selector
            .as_str()
            .is_some_and(|patch| patch.contains("component: gateway")),
        "the audit webhook goes to the gateways"
    );

    let agent = document(&repo("config/daemonset.yaml"));
    let routing = &agent["exporters"]["loadbalancing"];
    assert_eq!(routing["routing_key"], "k8s.object");
    assert_eq!(
        routing["resolver"]["dns"]["hostname"],
        "${env:OPSCOPE_GATEWAY_HOSTNAME}"
    );
    for pipeline in ["traces", "logs"] {
        let exporters = &agent["service"]["pipelines"][pipeline]["exporters"];
        assert!(
            exporters
                .as_array()
                .is_some_and(|list| list.iter().any(|e| e == "loadbalancing")),
            "the agent routes its {pipeline}"
        );
        let processors = &agent["service"]["pipelines"][pipeline]["processors"];
        assert!(
            processors
                .as_array()
                .is_some_and(|list| list.iter().all(|p| p != "correlator")),
            "the gateways correlate {pipeline}, not the agent"
        );
    }
    let gateway = document(&repo("config/gateway.yaml"));
    assert!(gateway["receivers"]["k8s_audit"].is_object());
    assert_eq!(
        gateway["service"]["pipelines"]["logs/audit"]["exporters"][0], "loadbalancing",
        "audit events go on to their object's owner"
    );
}

#[test]
fn copies_inside_the_kustomize_trees_match_their_sources() {
    for (copy, source) in [
        (
            "deploy/kubernetes/single-node/opscope.yaml",
            "config/single-node.yaml",
        ),
        ("deploy/kubernetes/base/agent.yaml", "config/daemonset.yaml"),
        ("deploy/kubernetes/base/gateway.yaml", "config/gateway.yaml"),
    ] {
        assert!(
            read(&repo(copy)) == read(&repo(source)),
            "{copy} differs from {source}: cp {source} {copy}"
        );
    }
    let rules = document(&repo("deploy/prometheus/rules.yaml"));
    let rule = document(&repo(
        "deploy/kubernetes/overlays/prometheus-rule/prometheusrule.yaml",
    ));
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(
        rule["spec"]["groups"], rules["groups"],
        "the PrometheusRule's groups are those of deploy/prometheus/rules.yaml"
    );
}

#[test]
fn the_audit_examples_are_a_webhook_kubeconfig_and_a_policy() {
    let kubeconfig = document(&repo("deploy/kubernetes/audit-webhook-kubeconfig.yaml"));
    assert_eq!(kubeconfig["kind"], "Config");
    let server = kubeconfig["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap_or_default();
    assert!(server.ends_with(":9765/audit"), "{server}");
    let policy = document(&repo("deploy/kubernetes/audit-policy.yaml"));
    assert_eq!(policy["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(policy["kind"], "Policy");
    let levels: Vec<&str> = policy["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["level"].as_str())
        .collect();
    assert!(levels.contains(&"RequestResponse"), "{levels:?}");
    assert_eq!(levels.last(), Some(&"None"), "anything else is not logged");
}

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

const KUSTOMIZE_TREES: [&str; 6] = [
    "deploy/kubernetes/base",
    "deploy/kubernetes/single-node",
    "deploy/kubernetes/overlays/servicemonitor",
    "deploy/kubernetes/overlays/prometheus-rule",
    "deploy/kubernetes/overlays/ebpf",
    "deploy/kubernetes/overlays/ebpf-privileged",
];

/// Whether `python3` imports `modules`; when not, the reason is printed and the test is
/// to be skipped, or it panics when `OPSCOPE_REQUIRE_BACKENDS=1`.
fn python_with(modules: &str) -> bool {
    let imports = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output();
    if imports.is_ok_and(|output| output.status.success()) {
        return true;
    }
    let current = std::thread::current();
    let test = current.name().unwrap_or("test");
    let reason = format!(
        "python3 cannot import {modules} (python3 -m pip install kubernetes-validate pyyaml)"
    );
    assert!(
        !backends_required(),
        "{test}: OPSCOPE_REQUIRE_BACKENDS=1 but {reason}"
    );
    // Past the test harness's capture, so that a skip is seen.
    let _ = writeln!(std::io::stderr(), "skipping {test}: {reason}");
    false
}

/// A script of deploy/kubernetes, run from the repository's root.
fn deploy_script(script: &str, args: &[&str]) -> Output {
    Command::new("python3")
        .arg(repo("deploy/kubernetes").join(script))
        .args(args)
        .current_dir(repo(""))
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"))
}

fn describe(output: &Output) -> String {
    format!(
        "{}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Rendered objects by kind, namespace and name: kustomize sorts by kind, render.py
/// keeps the order of the files.
fn objects_by_identity(yaml: &[u8]) -> BTreeMap<String, Value> {
    let text = String::from_utf8_lossy(yaml);
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("rendered YAML: {e}"))
        .into_iter()
        .filter(|object| !object.is_null())
        .map(|object| {
            let metadata = &object["metadata"];
            let key = format!(
                "{} {}/{}",
                object["kind"].as_str().unwrap_or_default(),
                metadata["namespace"].as_str().unwrap_or_default(),
                metadata["name"].as_str().unwrap_or_default()
            );
            (key, object)
        })
        .collect()
}

/// kustomize's output of `tree`, from a `kustomize` or `kubectl` on PATH.
fn kustomize_build(tree: &str) -> Option<Output> {
    let root = repo("");
    [
        ("kustomize", vec!["build", tree]),
        ("kubectl", vec!["kustomize", tree]),
    ]
    .into_iter()
    .find_map(|(binary, args)| {
        Command::new(binary)
            .args(args)
            .current_dir(&root)
            .output()
            .ok()
    })
}

#[test]
fn the_renderer_outputs_what_kustomize_outputs() {
    if !python_with("yaml") {
        return;
    }
    for tree in KUSTOMIZE_TREES {
        let rendered = deploy_script("render.py", &[tree]);
        assert!(rendered.status.success(), "{tree}: {}", describe(&rendered));
        let Some(built) = kustomize_build(tree) else {
            // No Debian package has a kustomize recent enough for these trees (they
            // use `labels`), so CI cannot install one: skipped even when backends are
            // required.
            let _ = writeln!(
                std::io::stderr(),
                "skipping the comparison with kustomize: neither kustomize nor kubectl is on PATH"
            );
            return;
        };
        assert!(built.status.success(), "{tree}: {}", describe(&built));
        assert_eq!(
            objects_by_identity(&rendered.stdout),
            objects_by_identity(&built.stdout),
            "{tree}: render.py and kustomize differ"
        );
    }
}

#[test]
fn the_renderer_refuses_what_it_does_not_implement() {
    if !python_with("yaml") {
        return;
    }
    let fixtures = "collector/tests/fixtures/kubernetes/unsupported";
    for (fixture, refusal) in [
        ("images", "images not supported"),
        (
            "strategic-merge-patch",
            "strategic-merge patches are not supported",
        ),
    ] {
        let output = deploy_script("render.py", &[&format!("{fixtures}/{fixture}")]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{fixture}: {}",
            describe(&output)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(refusal), "{fixture}: {stderr}");
    }
}

#[test]
fn every_kustomize_tree_validates_against_the_kubernetes_schemas() {
    if !python_with("yaml, kubernetes_validate") {
        return;
    }
    let output = deploy_script("validate.py", &KUSTOMIZE_TREES);
    assert!(output.status.success(), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for tree in KUSTOMIZE_TREES {
        assert!(
            stdout
                .lines()
                .any(|line| line.starts_with(&format!("{tree}: "))
                    && line.contains(" valid for Kubernetes ")),
            "{tree} validated: {stdout}"
        );
    }
    // The custom resources were checked against their schemas, not passed over.
    assert!(
        stdout.contains("ServiceMonitor") && stdout.contains("PrometheusRule"),
        "{stdout}"
    );
}

#[test]
fn the_schema_validation_rejects_broken_manifests() {
    if !python_with("yaml, kubernetes_validate") {
        return;
    }
    let fixtures = "collector/tests/fixtures/kubernetes";
    let valid = deploy_script(
        "validate.py",
        &[&format!("{fixtures}/valid/deployment.yaml")],
    );
    assert!(valid.status.success(), "{}", describe(&valid));
    for (fixture, complaint) in [
        (
            "deployment-unknown-field.yaml",
            "spec.template.spec.containers[0]: Additional properties are not allowed ('imagePullPolicyy'",
        ),
        (
            "deployment-wrong-type.yaml",
            "containers[0].ports[0].containerPort: '8080' is not of type 'integer'",
        ),
        (
            "servicemonitor-bad-interval.yaml",
            "spec.endpoints[0].interval: '30 seconds' does not match",
        ),
        ("unknown-kind.yaml", "Couldn't find schema for kind Widget"),
    ] {
        let output = deploy_script("validate.py", &[&format!("{fixtures}/invalid/{fixture}")]);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{fixture}: {}",
            describe(&output)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(complaint), "{fixture}: {stderr}");
    }
}

/// An agent config with the `ebpf` receiver taken out again: its lines in
/// `receivers` (with the comment above them) and `ebpf` in the `metrics` pipeline's
/// receivers, which is what overlays/ebpf and the chart's `ebpf.enabled` add.
fn without_ebpf_receiver(config: &str) -> String {
    let lines: Vec<&str> = config.lines().collect();
    let Some(start) = lines.iter().position(|line| *line == "  ebpf:") else {
        panic!("no ebpf receiver in:\n{config}");
    };
    let comment = lines[..start]
        .iter()
        .rev()
        .take_while(|line| line.starts_with("  #"))
        .count();
    let body = lines[start + 1..]
        .iter()
        .take_while(|line| line.starts_with("    "))
        .count();
    let kept = [&lines[..start - comment], &lines[start + 1 + body..]].concat();
    (kept.join("\n") + "\n").replacen(
        "    metrics:\n      receivers: [otlp, ebpf]\n",
        "    metrics:\n      receivers: [otlp]\n",
        1,
    )
}

#[test]
fn the_ebpf_overlays_config_is_the_daemonset_config_with_the_receiver() {
    let path = "deploy/kubernetes/overlays/ebpf/agent.yaml";
    let text = read(&repo(path));
    assert!(
        without_ebpf_receiver(&text) == read(&repo("config/daemonset.yaml")),
        "{path} is config/daemonset.yaml with the ebpf receiver after the others and in \
         the metrics pipeline's receivers: copy config/daemonset.yaml there and add them again"
    );
    let config = document(&repo(path));
    let ebpf = &config["receivers"]["ebpf"];
    assert_eq!(
        ebpf["api_servers"],
        serde_json::json!(["${env:KUBERNETES_SERVICE_HOST}:${env:KUBERNETES_SERVICE_PORT}"])
    );
    assert_eq!(
        ebpf["namespaces"],
        serde_json::json!(["*-system", "*-operator*", "operators"])
    );
    assert_eq!(ebpf["interval"], "10s");
    let metrics = &config["service"]["pipelines"]["metrics"];
    assert_eq!(metrics["receivers"], serde_json::json!(["otlp", "ebpf"]));
    assert!(
        strings(&metrics["processors"]).contains(&"correlator".to_string()),
        "the agent correlates its node's pods' probe counts (api_request_storm)"
    );
}

/// overlays/ebpf's agent config validates as the shipped ones do, and its receiver's
/// settings are checked (with or without the `ebpf` feature).
#[test]
fn the_ebpf_overlays_config_validates() {
    let env = [
        CONFIG_ENV,
        &[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ],
    ]
    .concat();
    let path = repo("deploy/kubernetes/overlays/ebpf/agent.yaml");
    let output = validate(&path, &env);
    assert!(output.status.success(), "{}", describe(&output));

    let too_often = tempfile::NamedTempFile::new().expect("a temporary file");
    let config = read(&path).replacen("    interval: 10s\n", "    interval: 10ms\n", 1);
    std::fs::write(too_often.path(), config).expect("write the config");
    let output = validate(too_often.path(), &env);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("receivers.ebpf.interval"), "{stderr}");
}

/// The objects of a kustomize tree as render.py renders them, by kind and name.
fn rendered(tree: &str) -> BTreeMap<String, Value> {
    let output = deploy_script("render.py", &[tree]);
    assert!(output.status.success(), "{tree}: {}", describe(&output));
    comparable(&output.stdout)
}

/// What the kernel probe needs and nothing more: root with three capabilities (or
/// privileged, for old kernels), the host's BTF, tracefs, cgroups and container log
/// links read-only, and the receiver in the agent's config. No hostPID: the probe
/// keys its counts by cgroup id and names a cgroup's pod from the mounted folders.
#[test]
fn the_ebpf_overlays_add_only_what_the_kernel_probe_needs() {
    if !python_with("yaml") {
        return;
    }
    let base = rendered("deploy/kubernetes/base");
    let base_pod = &base["DaemonSet opscope-agent"]["spec"]["template"]["spec"];
    for (tree, privileged) in [
        ("deploy/kubernetes/overlays/ebpf", false),
        ("deploy/kubernetes/overlays/ebpf-privileged", true),
    ] {
        let overlay = rendered(tree);
        let changed: Vec<&str> = overlay
            .iter()
            .filter(|(key, object)| base.get(*key) != Some(*object))
            .map(|(key, _)| key.as_str())
            .collect();
        assert_eq!(
            changed,
            ["ConfigMap opscope-config", "DaemonSet opscope-agent"],
            "{tree}: only the agents and their config change"
        );
        assert_eq!(overlay.len(), base.len(), "{tree}: no object added");

        let pod = &overlay["DaemonSet opscope-agent"]["spec"]["template"]["spec"];
        for host_namespace in ["hostPID", "hostNetwork", "hostIPC"] {
            assert!(pod[host_namespace].is_null(), "{tree}: no {host_namespace}");
        }
        assert_eq!(
            pod["securityContext"], base_pod["securityContext"],
            "{tree}"
        );
        let init = strings(&pod["initContainers"][0]["command"]).join(" ");
        assert!(
            init.contains("chown -R 0:0 /var/lib/opscope"),
            "{tree}: the state directory is root's: {init}"
        );
        let container = &pod["containers"][0];
        let security = &container["securityContext"];
        assert_eq!(
            security["runAsUser"], 0,
            "{tree}: added capabilities work for root only"
        );
        assert_eq!(security["runAsNonRoot"], false, "{tree}");
        assert_eq!(security["readOnlyRootFilesystem"], true, "{tree}");
        if privileged {
            assert_eq!(security["privileged"], true, "{tree}");
        } else {
            assert!(security["privileged"].is_null(), "{tree}");
            assert_eq!(security["allowPrivilegeEscalation"], false, "{tree}");
            assert_eq!(
                security["capabilities"],
                serde_json::json!({"drop": ["ALL"], "add": ["BPF", "PERFMON", "SYS_RESOURCE"]}),
                "{tree}"
            );
        }

        let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
        let (mounts, volumes) = (list(&container["volumeMounts"]), list(&pod["volumes"]));
        let base_container = &base_pod["containers"][0];
        let (base_mounts, base_volumes) = (
            list(&base_container["volumeMounts"]),
            list(&base_pod["volumes"]),
        );
        assert_eq!(mounts[..base_mounts.len()], base_mounts, "{tree}: kept");
        assert_eq!(volumes[..base_volumes.len()], base_volumes, "{tree}: kept");
        let host_path = |name: &Value| {
            volumes
                .iter()
                .find(|volume| &volume["name"] == name)
                .map(|volume| volume["hostPath"]["path"].clone())
                .unwrap_or_default()
        };
        let mut added: Vec<(String, String)> = mounts[base_mounts.len()..]
            .iter()
            .map(|mount| {
                assert_eq!(mount["readOnly"], true, "{tree}: {mount}");
                let host = host_path(&mount["name"]);
                (
                    mount["mountPath"].as_str().unwrap_or_default().into(),
                    host.as_str().unwrap_or_default().into(),
                )
            })
            .collect();
        added.sort();
        let expected = [
            ("/host/sys/fs/cgroup", "/sys/fs/cgroup"),
            ("/sys/kernel/btf", "/sys/kernel/btf"),
            ("/sys/kernel/tracing", "/sys/kernel/tracing"),
            ("/var/log/containers", "/var/log/containers"),
        ]
        .map(|(mount, host)| (mount.to_string(), host.to_string()));
        assert_eq!(added, expected, "{tree}: (mount, host path)");
        assert_eq!(
            volumes.len() - base_volumes.len(),
            expected.len(),
            "{tree}: a volume per mount"
        );

        // The receiver's paths are those mounted; the host's cgroups beside the
        // container's own /sys/fs/cgroup, where the memory_limiter reads its limit.
        let text = overlay["ConfigMap opscope-config"]["data"]["opscope.yaml"]
            .as_str()
            .unwrap_or_default();
        let config: Value = serde_saphyr::from_str(text)
            .unwrap_or_else(|e| panic!("{tree}: the agent's config is not YAML: {e}"));
        let ebpf = &config["receivers"]["ebpf"];
        assert_eq!(ebpf["cgroup_root"], "/host/sys/fs/cgroup", "{tree}");
        assert_eq!(ebpf["pod_logs"], "/var/log/pods", "{tree}");
        assert!(
            !mounts
                .iter()
                .any(|mount| mount["mountPath"] == "/sys/fs/cgroup"),
            "{tree}"
        );
    }
}

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

/// Objects as both renders give them, comparable: a generated ConfigMap's content
/// suffix (kustomize's hash, the chart's own) cut from its name and from the pod
/// templates that mount it.
fn comparable(yaml: &[u8]) -> BTreeMap<String, Value> {
    let hashed: BTreeSet<String> = objects_by_identity(yaml)
        .values()
        .filter(|object| object["kind"] == "ConfigMap")
        .filter_map(|object| object["metadata"]["name"].as_str().map(String::from))
        .collect();
    let unhashed = |name: &str| -> String {
        match name.rsplit_once('-') {
            Some((base, suffix)) if suffix.len() == 10 && hashed.contains(name) => base.into(),
            _ => name.into(),
        }
    };
    objects_by_identity(yaml)
        .into_values()
        .map(|mut object| {
            rename_config_maps(&mut object, &unhashed);
            let metadata = &object["metadata"];
            let key = format!(
                "{} {}",
                object["kind"].as_str().unwrap_or_default(),
                metadata["name"].as_str().unwrap_or_default()
            );
            (key, object)
        })
        .collect()
}

/// Every string that names a generated ConfigMap, renamed.
fn rename_config_maps(value: &mut Value, unhashed: &dyn Fn(&str) -> String) {
    match value {
        Value::String(text) => *text = unhashed(text),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| rename_config_maps(v, unhashed)),
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| rename_config_maps(v, unhashed)),
        _ => {}
    }
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
