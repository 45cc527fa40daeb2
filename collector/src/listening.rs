//! The addresses the agent's listeners bound, named by the setting that asked for each
//! (`receivers.otlp.protocols.grpc`, `extensions.health_check`, …): a setting may ask
//! for port 0, and only the bound address tells a client where to connect. Written as
//! one JSON object to the `--listen-report` file once every listener is bound.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

/// The bound address of every listener, by its setting's path. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Listening(Arc<Mutex<BTreeMap<String, SocketAddr>>>);

impl Listening {
    /// Records that the listener of `setting` is bound to `address`, and says so in
    /// the log.
    pub fn record(&self, setting: String, address: SocketAddr) {
        tracing::info!(%setting, %address, "listening");
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(setting, address);
    }

    /// Every bound address, by setting.
    pub fn addresses(&self) -> BTreeMap<String, SocketAddr> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Writes the addresses to `path` as `{"<setting>": "<ip>:<port>", …}`. The file
    /// appears whole or not at all (written beside it, then renamed), so a reader that
    /// polls for it never sees half of it.
    pub fn write_report(&self, path: &Path) -> io::Result<()> {
        let addresses: BTreeMap<String, String> = (self.addresses().into_iter())
            .map(|(setting, address)| (setting, address.to_string()))
            .collect();
        let json = serde_json::to_vec_pretty(&addresses)?;
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        std::fs::write(&partial, json)?;
        std::fs::rename(&partial, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_each_listener_by_its_setting() {
        let listening = Listening::default();
        listening.record(
            "receivers.otlp.protocols.grpc".into(),
            "127.0.0.1:40001".parse().unwrap(),
        );
        listening.record(
            "extensions.health_check".into(),
            "127.0.0.1:40002".parse().unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("listening.json");
        listening.write_report(&path).unwrap();
        let report: BTreeMap<String, String> =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(report["receivers.otlp.protocols.grpc"], "127.0.0.1:40001");
        assert_eq!(report["extensions.health_check"], "127.0.0.1:40002");
        assert!(!dir.path().join("listening.json.partial").exists());
    }
}
