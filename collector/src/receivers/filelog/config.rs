//! Settings of the `filelog` receiver: which files to tail, which pods to keep, where
//! offsets are kept, and the limits that bound its memory and file handles.

use std::path::PathBuf;
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, duration, storage_directory};
use serde::Deserialize;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// What the lines of the files are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineFormat {
    /// Container runtime lines (CRI or docker json-file) around what a container wrote.
    #[default]
    Container,
    /// Each line is one record as it is, such as an API server's audit log.
    Lines,
}

/// Where a file seen for the first time, with no checkpoint, is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartAt {
    Beginning,
    End,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilelogConfig {
    /// Globs of the files to tail (`*`, `?`, `[...]`, `**`).
    pub include: Vec<String>,
    /// Globs of files not to tail, even when `include` matches them.
    pub exclude: Vec<String>,
    /// Only pods in namespaces matching one of these patterns (`*`, `?`); empty: all.
    pub namespaces: Vec<String>,
    /// Only pods whose name matches one of these patterns; empty: all.
    pub pods: Vec<String>,
    /// Only containers whose name matches one of these patterns; empty: all.
    pub containers: Vec<String>,
    /// For files found at the first poll when no checkpoint exists yet; files that
    /// appear later are always read from their beginning.
    pub start_at: StartAt,
    /// `container` (CRI or docker json-file, the default) or `lines`.
    pub format: LineFormat,
    /// Directory of the offsets checkpoint; without it offsets live in memory and a
    /// restart starts over at `start_at`.
    pub storage: Option<PathBuf>,
    #[serde(deserialize_with = "duration")]
    pub poll_interval: Duration,
    /// Longest record body in bytes; longer records are split and marked.
    pub max_log_size: usize,
    /// File handles held at once.
    pub max_open_files: usize,
    /// Records per request handed to the pipeline.
    pub max_batch: usize,
    /// How long a record whose end has not been written yet (a `P` piece at the end
    /// of the file) waits before it is sent as it is.
    #[serde(deserialize_with = "duration")]
    pub force_flush_period: Duration,
}

impl Default for FilelogConfig {
    fn default() -> Self {
        Self {
            include: vec!["/var/log/pods/*/*/*.log".into()],
            exclude: Vec::new(),
            namespaces: Vec::new(),
            pods: Vec::new(),
            containers: Vec::new(),
            start_at: StartAt::End,
            format: LineFormat::Container,
            storage: None,
            poll_interval: Duration::from_millis(500),
            max_log_size: MIB,
            max_open_files: 256,
            max_batch: 1000,
            force_flush_period: Duration::from_secs(5),
        }
    }
}

impl Validate for FilelogConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.include.is_empty() {
            return Err(FieldError::new("include", "name at least one glob"));
        }
        check_globs("include", &self.include)?;
        check_globs("exclude", &self.exclude)?;
        check_names("namespaces", &self.namespaces)?;
        check_names("pods", &self.pods)?;
        check_names("containers", &self.containers)?;
        if let Some(storage) = &self.storage {
            storage_directory("storage", storage)?;
        }
        check_range(
            "poll_interval",
            self.poll_interval,
            Duration::from_millis(10),
            Duration::from_secs(60),
        )?;
        check_range(
            "force_flush_period",
            self.force_flush_period,
            Duration::ZERO,
            Duration::from_secs(3600),
        )?;
        check_count("max_log_size", self.max_log_size, KIB, 64 * MIB)?;
        check_count("max_open_files", self.max_open_files, 1, 65_536)?;
        check_count("max_batch", self.max_batch, 1, 100_000)
    }
}

fn check_globs(field: &str, globs: &[String]) -> Result<(), FieldError> {
    for (index, text) in globs.iter().enumerate() {
        glob::Pattern::new(text).map_err(|err| {
            FieldError::new(
                format!("{field}[{index}]"),
                format!("invalid glob \"{text}\": {err}"),
            )
        })?;
    }
    Ok(())
}

fn check_names(field: &str, patterns: &[String]) -> Result<(), FieldError> {
    match patterns.iter().position(|p| p.trim().is_empty()) {
        Some(index) => Err(FieldError::new(
            format!("{field}[{index}]"),
            "must not be empty",
        )),
        None => Ok(()),
    }
}

fn check_range(
    field: &str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), FieldError> {
    if value < min || value > max {
        return Err(FieldError::new(
            field,
            format!("must be between {min:?} and {max:?}, not {value:?}"),
        ));
    }
    Ok(())
}

fn check_count(field: &str, value: usize, min: usize, max: usize) -> Result<(), FieldError> {
    if value < min || value > max {
        return Err(FieldError::new(
            field,
            format!("must be between {min} and {max}, not {value}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<FilelogConfig, String> {
        serde_json::from_str::<FilelogConfig>(json).map_err(|e| e.to_string())
    }

    fn invalid_field(json: &str) -> String {
        let config = parse(json).expect("parses");
        config.validate().expect_err("is invalid").field
    }

    #[test]
    fn defaults_tail_kubelet_pod_logs() {
        let config = parse("{}").expect("parses");
        assert_eq!(config.include, ["/var/log/pods/*/*/*.log"]);
        assert_eq!(config.start_at, StartAt::End);
        assert_eq!(config.poll_interval, Duration::from_millis(500));
        assert_eq!(config.max_log_size, MIB);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn settings_in_collector_notation() {
        let config = parse(
            r#"{"include":["/logs/*.log"],"start_at":"beginning","storage":"/var/lib/opscope",
                "poll_interval":"200ms","namespaces":["ray-*"],"max_batch":10}"#,
        )
        .expect("parses");
        assert_eq!(config.start_at, StartAt::Beginning);
        assert_eq!(config.poll_interval, Duration::from_millis(200));
        assert_eq!(config.namespaces, ["ray-*"]);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn unknown_keys_and_bad_values_name_their_field() {
        assert!(
            parse(r#"{"includes":[]}"#)
                .unwrap_err()
                .contains("unknown field")
        );
        assert!(
            parse(r#"{"start_at":"middle"}"#)
                .unwrap_err()
                .contains("unknown variant")
        );
        assert_eq!(invalid_field(r#"{"include":[]}"#), "include");
        assert_eq!(invalid_field(r#"{"exclude":["/a","/b/[x"]}"#), "exclude[1]");
        assert_eq!(invalid_field(r#"{"pods":[""]}"#), "pods[0]");
        assert_eq!(invalid_field(r#"{"storage":""}"#), "storage");
        assert_eq!(invalid_field(r#"{"storage":"/proc/self"}"#), "storage");
        assert_eq!(invalid_field(r#"{"poll_interval":"1ms"}"#), "poll_interval");
        assert_eq!(invalid_field(r#"{"max_log_size":100}"#), "max_log_size");
        assert_eq!(invalid_field(r#"{"max_open_files":0}"#), "max_open_files");
        assert_eq!(invalid_field(r#"{"max_batch":0}"#), "max_batch");
    }
}
