//! The correlator's journal: every batch the correlator takes, appended to a segment
//! log under its `storage` directory, so that a process killed and started again
//! rebuilds its objects' state by taking the same batches again, in order.
//!
//! The correlator works on event time, so the batches of the journal give the same
//! state when they are taken again. Only what can still matter is kept: the
//! correlator forgets an object idle for `idle_expiry`, and takes nothing older than
//! its `lateness`, so batches older than both are dropped from the journal's front
//! (and the oldest beyond `max_size_mib`, counted). A record is one kind byte, the
//! wall-clock time it was appended (u64 LE nanoseconds) and the OTLP request.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use opscope_model::config::{FieldError, Validate, storage_directory};
use opscope_model::hash::fnv1a;
use opscope_model::repeated_warning::RepeatedWarning;
use opscope_model::timestamp::Nanos;
use opscope_model::{Telemetry, TelemetryKind};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::prost::Message;
use opscope_storage::{Fsync, LogError, SegmentLog};
use serde::Deserialize;

/// The file, in the journal's directory, naming the journal: 16 hex digits.
const ID_FILE: &str = "journal-id";

/// The largest record buffer kept between batches.
const SCRATCH_KEPT: usize = 4 << 20;
/// Segments of a few MiB (a quarter of the journal at most): the front is dropped a
/// segment at a time.
const SEGMENT_BYTES: u64 = 8 << 20;
/// A process killed loses nothing already written (the page cache outlives it); a
/// machine that fails loses at most this much.
const FSYNC_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalConfig {
    /// The directory of the journal's segment files (a gateway's volume).
    pub directory: PathBuf,
    /// The journal's size on disk at most; beyond, its oldest batches are dropped.
    #[serde(default = "default_max_size_mib")]
    pub max_size_mib: u64,
}

fn default_max_size_mib() -> u64 {
    1024
}

impl Validate for JournalConfig {
    fn validate(&self) -> Result<(), FieldError> {
        storage_directory("directory", &self.directory)?;
        if self.max_size_mib == 0 {
            return Err(FieldError::new("max_size_mib", "must be at least 1"));
        }
        Ok(())
    }
}

/// A batch read back from the journal.
#[derive(Debug)]
pub enum Journaled {
    Traces(ExportTraceServiceRequest),
    Logs(ExportLogsServiceRequest),
    Metrics(ExportMetricsServiceRequest),
}

/// What the journal did, for self-telemetry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalStats {
    pub appended: u64,
    /// Batches taken again at start.
    pub replayed: u64,
    /// Batches dropped from the front to stay within `max_size_mib`, in total.
    pub dropped_for_size: u64,
    /// Batches that could not be written or read back, in total.
    pub failed: u64,
    pub bytes: u64,
}

#[derive(Debug)]
pub struct Journal {
    /// Tells this journal's batches from another's once handed over: made when the
    /// directory is first used, kept as long as it is.
    id: u64,
    log: SegmentLog,
    /// The sequence number and append time of each batch kept, oldest first.
    kept: VecDeque<(u64, Nanos)>,
    retention: Nanos,
    max_bytes: u64,
    stats: JournalStats,
    /// The record being written; its capacity stays, bounded by the largest batch.
    scratch: Vec<u8>,
    /// A full disk fails every batch: said once a minute, counted in `stats.failed`.
    write_failures: RepeatedWarning,
}

impl Journal {
    /// Opens the journal of `config`, keeping batches for `retention`. What a
    /// previous run left is read back with [`replay_next`](Self::replay_next), one
    /// batch at a time, before anything is appended: decoded, a journal takes several
    /// times its size on disk, so it is never held whole.
    pub fn open(config: &JournalConfig, retention: Duration) -> Result<Self, LogError> {
        let max_bytes = config.max_size_mib.saturating_mul(1 << 20);
        let (log, recovery) = SegmentLog::open(
            &config.directory,
            SEGMENT_BYTES.min(max_bytes / 4),
            Fsync::Interval(FSYNC_INTERVAL),
        )?;
        if recovery.truncated_bytes > 0 {
            tracing::warn!(directory = %config.directory.display(), bytes = recovery.truncated_bytes,
                "correlator journal: cut off a torn tail");
        }
        let stats = JournalStats {
            bytes: log.bytes(),
            ..JournalStats::default()
        };
        let id = journal_id(&config.directory).map_err(|source| LogError::Io {
            path: config.directory.join(ID_FILE),
            source,
        })?;
        Ok(Self {
            id,
            log,
            kept: VecDeque::new(),
            retention: u64::try_from(retention.as_nanos()).unwrap_or(u64::MAX),
            max_bytes,
            stats,
            scratch: Vec::new(),
            write_failures: RepeatedWarning::default(),
        })
    }

    /// The next batch a previous run left that is still within the retention at
    /// `now`, with the wall-clock time it was appended at, oldest first; `None` once
    /// all are read. Older batches are dropped from the journal on the way.
    pub fn replay_next(&mut self, now: Nanos) -> Result<Option<(Nanos, Journaled)>, LogError> {
        let oldest = now.saturating_sub(self.retention);
        loop {
            let (sequence, record) = match self.log.read_next() {
                Ok(Some(next)) => next,
                Ok(None) => {
                    self.stats.bytes = self.log.bytes();
                    return Ok(None);
                }
                Err(error) => {
                    self.stats.failed += 1;
                    tracing::warn!(%error, "correlator journal: a batch cannot be read back");
                    continue;
                }
            };
            match decode(&record) {
                Some((appended, batch)) if appended >= oldest => {
                    self.kept.push_back((sequence, appended));
                    self.stats.replayed += 1;
                    return Ok(Some((appended, batch)));
                }
                decoded => {
                    if decoded.is_none() {
                        self.stats.failed += 1;
                    }
                    self.log.complete(sequence)?;
                }
            }
        }
    }

    /// Appends `batch`, taken at `now`, and drops what has aged out or overflows.
    pub fn append<T: Telemetry>(&mut self, batch: &T, now: Nanos) {
        // One buffer for every record: a batch's encoding is large, and a new one each
        // time cost more than the encoding.
        let record = &mut self.scratch;
        record.clear();
        record.push(kind_byte(T::KIND));
        record.extend_from_slice(&now.to_le_bytes());
        batch.encode_request_into(record);
        let appended = self.log.append(record);
        if record.capacity() > SCRATCH_KEPT {
            // One very large batch does not hold its size for good.
            *record = Vec::new();
        }
        match appended {
            Ok(sequence) => {
                self.kept.push_back((sequence, now));
                self.stats.appended += 1;
            }
            Err(error) => {
                self.stats.failed += 1;
                if let Some(not_logged) = self.write_failures.occurred_now() {
                    tracing::warn!(%error, not_logged, "correlator journal: a batch could not be written; a restart will not see it");
                }
            }
        }
        self.trim(now);
    }

    /// Up to `limit` kept batches from sequence number `first` on, with their
    /// sequence numbers, oldest first; a batch that cannot be read is left out.
    pub fn read_kept(&self, first: u64, limit: usize) -> Vec<(u64, Journaled)> {
        match self.log.read_range(first, limit) {
            Ok(records) => records
                .into_iter()
                .filter_map(|(sequence, record)| Some((sequence, decode(&record)?.1)))
                .collect(),
            Err(error) => {
                tracing::warn!(%error, "correlator journal: cannot be read back for a hand-over");
                Vec::new()
            }
        }
    }

    pub fn stats(&self) -> JournalStats {
        self.stats.clone()
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    fn trim(&mut self, now: Nanos) {
        let oldest = now.saturating_sub(self.retention);
        while let Some(&(sequence, appended)) = self.kept.front() {
            let aged_out = appended < oldest;
            // The batch being written stays, whatever its size.
            let too_big = self.log.bytes() > self.max_bytes && self.kept.len() > 1;
            if !aged_out && !too_big {
                break;
            }
            if too_big && !aged_out {
                self.stats.dropped_for_size += 1;
                if self.stats.dropped_for_size == 1 {
                    tracing::warn!(
                        max_bytes = self.max_bytes,
                        "correlator journal: full, dropping its oldest batches; raise storage.max_size_mib to keep the correlator's whole horizon"
                    );
                }
            }
            self.kept.pop_front();
            if let Err(error) = self.log.complete(sequence) {
                self.stats.failed += 1;
                tracing::warn!(%error, "correlator journal: an old batch could not be dropped");
                break;
            }
        }
        self.stats.bytes = self.log.bytes();
    }
}

/// The id of the journal in `directory`, made (from the time, the process and the
/// directory, which no two journals share) and written the first time.
fn journal_id(directory: &Path) -> std::io::Result<u64> {
    let path = directory.join(ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            if let Ok(id) = u64::from_str_radix(text.trim(), 16) {
                return Ok(id);
            }
            tracing::warn!(path = %path.display(), "correlator journal: its id is unreadable; a new one is made");
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let seed = format!(
        "{}:{}:{}",
        opscope_model::timestamp::now_unix_nanos(),
        std::process::id(),
        directory.display()
    );
    let id = fnv1a(seed.as_bytes());
    // Written beside and renamed: a crash leaves the old file or the whole new one.
    let written = directory.join(format!("{ID_FILE}.tmp"));
    std::fs::write(&written, format!("{id:016x}\n"))?;
    std::fs::rename(&written, &path)?;
    Ok(id)
}

fn kind_byte(kind: TelemetryKind) -> u8 {
    match kind {
        TelemetryKind::Traces => 1,
        TelemetryKind::Logs => 2,
        TelemetryKind::Metrics => 3,
    }
}

/// A record's append time and batch; `None` for a record this build cannot read.
fn decode(record: &[u8]) -> Option<(Nanos, Journaled)> {
    let (&kind, rest) = record.split_first()?;
    let (time, request) = rest.split_first_chunk::<8>()?;
    let appended = u64::from_le_bytes(*time);
    let batch = match kind {
        1 => Journaled::Traces(ExportTraceServiceRequest::decode(request).ok()?),
        2 => Journaled::Logs(ExportLogsServiceRequest::decode(request).ok()?),
        3 => Journaled::Metrics(ExportMetricsServiceRequest::decode(request).ok()?),
        _ => return None,
    };
    Some((appended, batch))
}

#[cfg(test)]
mod tests {
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};

    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn batch(name: &str) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        name: name.into(),
                        ..Span::default()
                    }],
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
    }

    /// Opens the journal and reads back what it holds, as a start does.
    fn open(config: &JournalConfig, retention: Duration, now: Nanos) -> (Journal, Vec<Journaled>) {
        let mut journal = Journal::open(config, retention).unwrap();
        let mut batches = Vec::new();
        while let Some((_, batch)) = journal.replay_next(now).unwrap() {
            batches.push(batch);
        }
        (journal, batches)
    }

    fn names(batches: &[Journaled]) -> Vec<String> {
        batches
            .iter()
            .map(|batch| match batch {
                Journaled::Traces(traces) => traces.resource_spans[0].scope_spans[0].spans[0]
                    .name
                    .clone(),
                other => panic!("a trace batch was journaled, read back {other:?}"),
            })
            .collect()
    }

    #[test]
    fn batches_within_the_retention_come_back_in_order_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let config = JournalConfig {
            directory: dir.path().to_path_buf(),
            max_size_mib: 16,
        };
        let retention = Duration::from_secs(60);
        let (mut journal, replayed) = open(&config, retention, 1_000 * SECOND);
        assert!(replayed.is_empty());
        for (i, name) in ["old", "a", "b", "c"].iter().enumerate() {
            journal.append(&batch(name), (1_000 + 30 * i as u64) * SECOND);
        }
        drop(journal);
        // 100 s later "old" (t = 1000 s) is out of the 60 s retention; "a" (1030 s) too.
        let (journal, replayed) = open(&config, retention, 1_100 * SECOND);
        assert_eq!(names(&replayed), ["b", "c"]);
        assert_eq!(journal.stats().replayed, 2);
        drop(journal);
        let (_, again) = open(&config, retention, 1_100 * SECOND);
        assert_eq!(
            names(&again),
            ["b", "c"],
            "opening does not consume the journal"
        );
    }

    #[test]
    fn a_full_journal_drops_its_oldest_batches_and_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let config = JournalConfig {
            directory: dir.path().to_path_buf(),
            max_size_mib: 1,
        };
        let (mut journal, _) = open(&config, Duration::from_secs(3600), SECOND);
        let big = "x".repeat(300 << 10);
        for i in 0..8 {
            journal.append(&batch(&format!("{i}{big}")), SECOND + i);
        }
        let stats = journal.stats();
        assert!(stats.dropped_for_size > 0, "{stats:?}");
        assert_eq!(stats.appended, 8);
        drop(journal);
        let (_, replayed) = open(&config, Duration::from_secs(3600), SECOND);
        let kept = names(&replayed);
        assert!(kept.len() < 8 && !kept.is_empty(), "{}", kept.len());
        assert!(kept.last().is_some_and(|name| name.starts_with('7')));
    }

    #[test]
    fn a_record_this_build_cannot_read_is_skipped_and_counted() {
        assert!(decode(&[9, 0, 0, 0, 0, 0, 0, 0, 0]).is_none());
        assert!(decode(&[1, 0]).is_none());
        assert!(decode(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff]).is_none());
    }
}
