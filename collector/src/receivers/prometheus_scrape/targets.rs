//! Scrape targets: `host:port` with the labels of their group, from the config and
//! from a targets file that is read again whenever its content changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use opscope_model::config::check_listen_address;

/// Largest targets file read.
const MAX_TARGETS_FILE_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub address: String,
    /// Resource attributes of this target's series, from its group in the file.
    pub labels: BTreeMap<String, String>,
}

impl Target {
    pub fn new(address: &str) -> Self {
        Self {
            address: address.to_string(),
            labels: BTreeMap::new(),
        }
    }
}

/// A target as the config writes it: `host:port`, no scheme, no path.
pub fn check_target(address: &str) -> Result<(), String> {
    if address.contains('/') || address.chars().any(char::is_whitespace) {
        return Err(format!(
            "invalid target \"{address}\"; write host:port (the scheme and metrics_path are settings)"
        ));
    }
    check_listen_address(address).map_err(|_| {
        format!("invalid target \"{address}\"; write host:port, e.g. 10.244.1.17:8080")
    })
}

/// One entry of a YAML or JSON targets file.
#[derive(Deserialize)]
#[serde(untagged)]
enum Entry {
    Address(String),
    Group(TargetGroup),
}

/// A Prometheus file_sd group.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetGroup {
    targets: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// Reads the targets of a file's text: a YAML/JSON list (of addresses or of
/// file_sd groups) when it starts with `[` or `-`, else one address per line
/// (`#` starts a comment).
pub fn parse_targets(text: &str) -> Result<Vec<Target>, String> {
    let first = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'));
    let targets = match first {
        Some(line) if line.starts_with(['[', '-']) => document_targets(text)?,
        _ => line_targets(text),
    };
    for target in &targets {
        check_target(&target.address)?;
    }
    Ok(targets)
}

fn document_targets(text: &str) -> Result<Vec<Target>, String> {
    let entries: Vec<Entry> = serde_saphyr::from_str(text)
        .map_err(|e| format!("not a list of targets or target groups: {e}"))?;
    let targets = entries.into_iter().flat_map(|entry| match entry {
        Entry::Address(address) => vec![Target::new(&address)],
        Entry::Group(group) => group
            .targets
            .iter()
            .map(|address| Target {
                address: address.clone(),
                labels: group.labels.clone(),
            })
            .collect(),
    });
    Ok(targets.collect())
}

fn line_targets(text: &str) -> Vec<Target> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(Target::new)
        .collect()
}

/// A targets file followed over time.
pub struct TargetsFile {
    path: PathBuf,
    /// What the last read gave (the text, or why it failed), to tell a change.
    last_read: Option<Result<String, String>>,
}

impl TargetsFile {
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            last_read: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The targets when the file changed since the last call (or on the first),
    /// `None` when it did not; a file that cannot be read or parsed is an error
    /// reported once per change.
    pub fn changed_targets(&mut self) -> Option<Result<Vec<Target>, String>> {
        let read = read_bounded(&self.path);
        if self.last_read.as_ref() == Some(&read) {
            return None;
        }
        self.last_read = Some(read.clone());
        Some(read.and_then(|text| parse_targets(&text)))
    }
}

fn read_bounded(path: &Path) -> Result<String, String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    if size > MAX_TARGETS_FILE_BYTES {
        return Err(format!(
            "{} is larger than {MAX_TARGETS_FILE_BYTES} bytes",
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(targets: &[Target]) -> Vec<&str> {
        targets.iter().map(|t| t.address.as_str()).collect()
    }

    #[test]
    fn lines_lists_and_file_sd_groups() {
        let lines = "# operator pods\n10.244.1.17:8080\n\n  10.244.2.9:8443  # leader\n";
        assert_eq!(
            addresses(&parse_targets(lines).unwrap()),
            ["10.244.1.17:8080", "10.244.2.9:8443"]
        );
        let json = r#"["10.244.1.17:8080", "[::1]:9090"]"#;
        assert_eq!(
            addresses(&parse_targets(json).unwrap()),
            ["10.244.1.17:8080", "[::1]:9090"]
        );
        let yaml = "- targets: [10.244.1.17:8080, 10.244.2.9:8080]\n  labels:\n    k8s.pod.name: kuberay-operator-6bc4f7d9c8-x2k4p\n- 10.0.0.1:9090\n";
        let targets = parse_targets(yaml).unwrap();
        assert_eq!(
            addresses(&targets),
            ["10.244.1.17:8080", "10.244.2.9:8080", "10.0.0.1:9090"]
        );
        assert_eq!(
            targets[1].labels.get("k8s.pod.name").map(String::as_str),
            Some("kuberay-operator-6bc4f7d9c8-x2k4p")
        );
        assert!(targets[2].labels.is_empty());
        assert_eq!(parse_targets("").unwrap(), []);
    }

    #[test]
    fn bad_files_say_why() {
        assert!(
            parse_targets("http://10.0.0.1:8080/metrics\n")
                .unwrap_err()
                .contains("host:port")
        );
        assert!(
            parse_targets("10.0.0.1\n")
                .unwrap_err()
                .contains("10.0.0.1")
        );
        assert!(
            parse_targets("- {target: [a:1]}\n")
                .unwrap_err()
                .contains("not a list")
        );
        assert!(parse_targets("[1, 2").is_err());
    }

    #[test]
    fn a_file_is_reported_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("targets");
        let mut file = TargetsFile::new(&path);
        assert!(matches!(file.changed_targets(), Some(Err(e)) if e.contains("cannot read")));
        assert!(file.changed_targets().is_none(), "the same error once");
        std::fs::write(&path, "10.0.0.1:8080\n").unwrap();
        assert_eq!(
            addresses(&file.changed_targets().unwrap().unwrap()),
            ["10.0.0.1:8080"]
        );
        assert!(file.changed_targets().is_none());
        std::fs::write(&path, "10.0.0.1:8080\n10.0.0.2:8080\n").unwrap();
        assert_eq!(file.changed_targets().unwrap().unwrap().len(), 2);
    }
}
