//! What the tests of the shipped files share: reading them, running `opscope
//! validate` and the scripts of deploy/kubernetes, and rendered objects by identity.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use opscope_testkit::backend::backends_required;
use serde_json::Value;

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every YAML document of a file.
pub fn documents(path: &Path) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(&read(path))
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
        .into_iter()
        .filter(|doc| !doc.is_null())
        .collect()
}

pub fn document(path: &Path) -> Value {
    let mut docs = documents(path);
    assert_eq!(docs.len(), 1, "{}: one document", path.display());
    docs.remove(0)
}

pub fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

/// The environment the shipped configs read, as the manifests set it.
pub const CONFIG_ENV: &[(&str, &str)] = &[
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

pub fn validate(config: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_opscope"));
    command.arg("validate").arg("-c").arg(config);
    for (name, _) in CONFIG_ENV {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("run opscope validate")
}

/// Whether `python3` imports `modules`; when not, the reason is printed and the test is
/// to be skipped, or it panics when `OPSCOPE_REQUIRE_BACKENDS=1`.
pub fn python_with(modules: &str) -> bool {
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
pub fn deploy_script(script: &str, args: &[&str]) -> Output {
    Command::new("python3")
        .arg(repo("deploy/kubernetes").join(script))
        .args(args)
        .current_dir(repo(""))
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"))
}

pub fn describe(output: &Output) -> String {
    format!(
        "{}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Rendered objects by kind, namespace and name: kustomize sorts by kind, render.py
/// keeps the order of the files.
pub fn objects_by_identity(yaml: &[u8]) -> BTreeMap<String, Value> {
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

/// Objects as both renders give them, comparable: a generated ConfigMap's content
/// suffix (kustomize's hash, the chart's own) cut from its name and from the pod
/// templates that mount it.
pub fn comparable(yaml: &[u8]) -> BTreeMap<String, Value> {
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
