//! The configs of `config/`: they validate, say what they need, and acknowledge
//! durably where they have durable storage.

use crate::support::{CONFIG_ENV, document, repo, validate};

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
