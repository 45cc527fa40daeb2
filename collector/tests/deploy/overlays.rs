//! The ebpf overlays: their agent config is the DaemonSet's with the receiver, and
//! they add only what the kernel probe needs.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{
    CONFIG_ENV, comparable, deploy_script, describe, document, python_with, read, repo, strings,
    validate,
};

/// An agent config with the `ebpf` receiver taken out again: its lines in
/// `receivers` (with the comment above them) and `ebpf` in the `metrics` pipeline's
/// receivers, which is what overlays/ebpf and the chart's `ebpf.enabled` add.
pub fn without_ebpf_receiver(config: &str) -> String {
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
