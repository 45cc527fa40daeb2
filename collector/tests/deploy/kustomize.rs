//! The kustomize trees of deploy/kubernetes and the audit examples beside them: the
//! kinds they hold, the agents' and gateways' promises, the copies they need, and
//! their renders (render.py against kustomize) and validation against the Kubernetes
//! schemas.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output};

use crate::support::{
    deploy_script, describe, document, documents, objects_by_identity, python_with, read, repo,
    strings,
};

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
    // The node's directory is the install's own, named by its namespace as the
    // chart names it: two installs on one node do not share their queues' files.
    assert_eq!(host_path("state"), "/var/lib/opscope/opscope");
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

const KUSTOMIZE_TREES: [&str; 6] = [
    "deploy/kubernetes/base",
    "deploy/kubernetes/single-node",
    "deploy/kubernetes/overlays/servicemonitor",
    "deploy/kubernetes/overlays/prometheus-rule",
    "deploy/kubernetes/overlays/ebpf",
    "deploy/kubernetes/overlays/ebpf-privileged",
];

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
