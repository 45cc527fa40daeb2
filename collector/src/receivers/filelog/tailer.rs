//! One poll round of the receiver: find files, notice rotations, read each file's next
//! batch in turn, hand it to the pipeline, let finished files go, checkpoint.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::checkpoint::{CheckpointEntry, CheckpointStore};
use super::config::{FilelogConfig, LineFormat, StartAt};
use super::discovery::{Discovery, find_copy};
use super::identity::FileIdentity;
use super::open::SkippedFiles;
use super::reader::BatchLimits;
use super::tail::{FileBatch, ReadSettings, TailedFile};
use super::watch::{Arrival, Watch};
use crate::consumer::{Acknowledgements, Consumer, Refusal};
use crate::self_telemetry::ReceiverMetrics;

/// Files tracked at once (a few hundred bytes each, in memory and in the checkpoint).
const MAX_TRACKED_FILES: usize = 10_000;
/// Record bytes per request, next to `max_batch` records.
const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// The checkpoint is written at most this often while files are read back to back.
const MIN_CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);
/// Checkpoints waiting for durable pipelines to confirm their records, at most;
/// beyond, reading waits for the oldest.
const MAX_PENDING_CHECKPOINTS: usize = 64;

/// A checkpoint to write once the records read up to it are confirmed queued by the
/// pipelines that acknowledge durably.
struct PendingCheckpoint {
    entries: Vec<CheckpointEntry>,
    confirmations: Acknowledgements,
}

/// What the round asks of the loop that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Caught up, or the pipeline is full: wait for the poll interval.
    Idle,
    /// Files hold more to read now.
    More,
    /// Shutting down, or no pipeline takes the records.
    Stop,
}

enum Pumped {
    Nothing,
    Read { more: bool },
    Refused(Refusal),
}

/// What every round needs from outside: where records go and what is counted.
pub struct Outlet {
    pub consumer: Consumer<ExportLogsServiceRequest>,
    pub metrics: ReceiverMetrics,
}

pub struct Tailer {
    id: String,
    start_at: StartAt,
    max_open_files: usize,
    poll_interval: Duration,
    settings: ReadSettings,
    discovery: Discovery,
    store: CheckpointStore,
    outlet: Outlet,
    files: Vec<TailedFile>,
    to_resume: Vec<CheckpointEntry>,
    /// No checkpoint existed: `start_at` applies to the files found first.
    first_run: bool,
    last_discovery: Option<Instant>,
    last_save: Option<Instant>,
    dirty: bool,
    save_failing: bool,
    /// Confirmations of the records handed over since the last checkpoint taken.
    unconfirmed: Acknowledgements,
    /// Checkpoints taken, oldest first, not yet confirmed.
    pending: VecDeque<PendingCheckpoint>,
    /// A pipeline could not confirm records it took: the checkpoint stays where it was,
    /// so that a restart reads them again.
    checkpoint_frozen: bool,
    /// Where the next round starts among the files not rotated (fairness).
    next_active: usize,
    warned_file_limit: bool,
    /// Paths that could not be opened, warned about and counted once each.
    skipped: SkippedFiles,
    /// Files opened as they appeared; `None` when inotify cannot be had.
    watch: Option<Watch>,
}

impl Tailer {
    pub fn new(
        id: &str,
        config: &FilelogConfig,
        store: CheckpointStore,
        previous: Option<Vec<CheckpointEntry>>,
        outlet: Outlet,
    ) -> Self {
        Self {
            id: id.to_string(),
            start_at: config.start_at,
            max_open_files: config.max_open_files,
            poll_interval: config.poll_interval,
            settings: ReadSettings {
                limits: BatchLimits {
                    max_records: config.max_batch,
                    max_bytes: MAX_BATCH_BYTES,
                },
                max_log_size: config.max_log_size,
                format: config.format,
                force_flush_period: config.force_flush_period,
                rotation_grace: config.poll_interval,
            },
            discovery: Discovery::new(config),
            store,
            files: Vec::new(),
            first_run: previous.is_none(),
            to_resume: previous.unwrap_or_default(),
            last_discovery: None,
            last_save: None,
            dirty: false,
            save_failing: false,
            unconfirmed: Acknowledgements::default(),
            pending: VecDeque::new(),
            checkpoint_frozen: false,
            next_active: 0,
            warned_file_limit: false,
            skipped: SkippedFiles::new(id, outlet.metrics.clone()),
            outlet,
            watch: Watch::start(id, &config.include, Discovery::new(config)),
        }
    }

    /// Fires when the watcher opened new files, to read them without waiting for the
    /// poll interval.
    pub fn woken(&self) -> Option<Arc<Notify>> {
        self.watch.as_ref().map(Watch::woken)
    }

    /// Blocking file work, bounded: each file gets at most one batch per round.
    pub fn round(&mut self, shutdown: &CancellationToken) -> Round {
        let now = Instant::now();
        self.resume_files(now);
        self.take_arrivals(now);
        if self
            .last_discovery
            .is_none_or(|at| now.duration_since(at) >= self.poll_interval)
        {
            self.discover(now);
        }
        let round = self.read_files(shutdown, now);
        self.release_finished(now);
        self.save(false);
        round
    }

    /// Writes the last checkpoint.
    pub fn stop(&mut self) {
        self.save(true);
    }

    /// How long a record may grow, and what a line is.
    fn lines(&self) -> (usize, LineFormat) {
        (self.settings.max_log_size, self.settings.format)
    }

    fn resume_files(&mut self, now: Instant) {
        for entry in std::mem::take(&mut self.to_resume) {
            if !self.discovery.accepts(Path::new(&entry.path)) {
                continue;
            }
            match TailedFile::resume(&entry, self.lines(), now, &mut self.skipped) {
                Some(file) if !self.tracks(file.identity()) => self.add(file),
                Some(_) => {}
                None => tracing::info!(
                    receiver = %self.id,
                    path = %entry.path,
                    "a checkpointed file is gone (or is no longer a regular file); lines it \
                    held past the checkpoint were not read"
                ),
            }
        }
    }

    /// The files the watcher opened as they appeared (new files: read from their start).
    fn take_arrivals(&mut self, now: Instant) {
        let Some(watch) = &self.watch else {
            return;
        };
        let arrivals: Vec<Arrival> = watch.arrivals().collect();
        let start_at = if self.first_run {
            self.start_at
        } else {
            StartAt::Beginning
        };
        for Arrival {
            path,
            file,
            renamed,
        } in arrivals
        {
            if self.files.len() >= MAX_TRACKED_FILES {
                self.warn_file_limit();
                break;
            }
            let Ok(mut file) = TailedFile::opened(&path, file, start_at, self.lines(), now) else {
                continue;
            };
            if self.tracks(file.identity()) {
                continue;
            }
            if renamed {
                file.mark_rotated(now);
            } else {
                // The file it replaced at `path` was rotated: its lines come first.
                for earlier in self.files.iter_mut().filter(|f| f.path() == path) {
                    earlier.mark_rotated(now);
                }
            }
            self.add(file);
        }
    }

    fn discover(&mut self, now: Instant) {
        self.last_discovery = Some(now);
        if let Some(watch) = &mut self.watch {
            watch.retry();
        }
        self.notice_rotations(now);
        let active: HashSet<PathBuf> = self
            .files
            .iter()
            .filter(|f| !f.is_rotated())
            .map(|f| f.path().to_path_buf())
            .collect();
        let start_at = if self.first_run {
            self.start_at
        } else {
            StartAt::Beginning
        };
        for path in self.discovery.find(MAX_TRACKED_FILES) {
            if active.contains(&path) {
                continue;
            }
            if self.files.len() >= MAX_TRACKED_FILES {
                self.warn_file_limit();
                break;
            }
            match TailedFile::open(&path, start_at, self.lines(), now) {
                Ok(file) if !self.tracks(file.identity()) => self.add(file),
                Ok(_) => {}
                Err(err) => self.skipped.report(&path, &err),
            }
        }
        // From now on a checkpoint exists, so a restart reads new files from their start.
        self.dirty |= self.first_run;
        self.first_run = false;
    }

    /// Files whose path now holds another file, or nothing, are rotated.
    fn notice_rotations(&mut self, now: Instant) {
        for file in self.files.iter_mut().filter(|f| !f.is_rotated()) {
            match std::fs::metadata(file.path()) {
                Ok(metadata) if FileIdentity::of(&metadata) == file.identity() => {}
                Ok(_) => file.mark_rotated(now),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => file.mark_rotated(now),
                Err(_) => {}
            }
        }
    }

    fn tracks(&self, identity: FileIdentity) -> bool {
        self.files.iter().any(|f| f.identity() == identity)
    }

    fn add(&mut self, mut file: TailedFile) {
        if self.open_handles() >= self.max_open_files {
            file.close();
        }
        self.files.push(file);
        self.dirty = true;
    }

    fn open_handles(&self) -> usize {
        self.files.iter().filter(|f| f.has_handle()).count()
    }

    fn warn_file_limit(&mut self) {
        if !self.warned_file_limit {
            self.warned_file_limit = true;
            tracing::warn!(receiver = %self.id, limit = MAX_TRACKED_FILES, "more files match than can be tracked; the rest wait");
        }
    }

    fn read_files(&mut self, shutdown: &CancellationToken, now: Instant) -> Round {
        let rotated_paths: HashSet<PathBuf> = self
            .files
            .iter()
            .filter(|f| f.is_rotated())
            .map(|f| f.path().to_path_buf())
            .collect();
        let mut handles = self.open_handles();
        let mut more = false;
        for index in self.reading_order() {
            if shutdown.is_cancelled() {
                return Round::Stop;
            }
            let Some(file) = self.files.get(index) else {
                continue;
            };
            if !file.is_rotated()
                && rotated_paths.contains(file.path())
                && self.predecessor_unread(file.path())
            {
                continue;
            }
            match self.pump(index, &mut handles, now) {
                Pumped::Nothing => {}
                Pumped::Read {
                    more: file_has_more,
                } => more |= file_has_more,
                // The lines stay in the file: read again once there is room.
                Pumped::Refused(Refusal::Full | Refusal::MemoryLimit) => {
                    self.next_active = index;
                    return Round::Idle;
                }
                Pumped::Refused(refusal) => return self.refused_for_good(refusal),
            }
        }
        if more { Round::More } else { Round::Idle }
    }

    /// Whether a rotated file that was at `path` still holds lines to deliver: the
    /// file now at `path` waits, so that lines arrive in the order they were written.
    fn predecessor_unread(&self, path: &Path) -> bool {
        self.files
            .iter()
            .any(|f| f.is_rotated() && f.path() == path && !f.is_drained())
    }

    /// Rotated files first (older data), then the others from where the last round stopped.
    fn reading_order(&self) -> Vec<usize> {
        let (rotated, active): (Vec<usize>, Vec<usize>) = (0..self.files.len())
            .partition(|&i| self.files.get(i).is_some_and(TailedFile::is_rotated));
        let split = active.partition_point(|&i| i < self.next_active);
        let (before, after) = active.split_at(split);
        rotated.iter().chain(after).chain(before).copied().collect()
    }

    fn refused_for_good(&self, refusal: Refusal) -> Round {
        if refusal == Refusal::NoPipeline {
            tracing::error!(receiver = %self.id, "no logs pipeline lists this receiver; it stops");
        }
        Round::Stop
    }

    /// One batch of one file to the pipeline.
    fn pump(&mut self, index: usize, handles: &mut usize, now: Instant) -> Pumped {
        if !self.ensure_handle(index, handles, now) {
            return Pumped::Nothing;
        }
        match self.read_batch(index, now) {
            Ok(Some(batch)) => self.deliver(index, batch),
            Ok(None) => Pumped::Read { more: true },
            Err(err) => {
                if let Some(file) = self.files.get_mut(index) {
                    tracing::debug!(receiver = %self.id, path = %file.path().display(), %err, "cannot read; retried");
                    file.close();
                    *handles = handles.saturating_sub(1);
                }
                Pumped::Nothing
            }
        }
    }

    /// The file's next batch; `None` when it was found truncated (and dealt with).
    fn read_batch(&mut self, index: usize, now: Instant) -> io::Result<Option<FileBatch>> {
        let Some(file) = self.files.get_mut(index) else {
            return Ok(None);
        };
        if file.check_truncated(now)? {
            self.on_truncated(index, now);
            return Ok(None);
        }
        file.next_batch(&self.settings, now).map(Some)
    }

    /// Hands the batch to the pipeline; what was accepted is committed, a refused
    /// batch is read again later.
    fn deliver(&mut self, index: usize, batch: FileBatch) -> Pumped {
        let Some(file) = self.files.get_mut(index) else {
            return Pumped::Nothing;
        };
        for _ in 0..batch.bad_lines {
            self.outlet.metrics.refused("bad_line", 1);
        }
        let Some(request) = batch.request else {
            self.dirty |= file.accept();
            return Pumped::Read { more: batch.more };
        };
        match self.outlet.consumer.push_acknowledged(request) {
            Ok(confirmations) => {
                self.unconfirmed.extend(confirmations);
                self.outlet.metrics.accepted(batch.records);
                self.dirty |= file.accept();
                Pumped::Read { more: batch.more }
            }
            Err(refusal) => {
                file.refuse();
                self.outlet.metrics.refused(refusal.reason(), 0);
                Pumped::Refused(refusal)
            }
        }
    }

    /// Gives the file a handle, closing an idle one if the limit is reached; `false`
    /// when it has none this round.
    fn ensure_handle(&mut self, index: usize, handles: &mut usize, now: Instant) -> bool {
        if self.files.get(index).is_none_or(TailedFile::has_handle) {
            return self.files.get(index).is_some();
        }
        if *handles >= self.max_open_files {
            let Some(idle) = self.files.iter_mut().find(|f| f.is_idle()) else {
                return false;
            };
            idle.close();
            *handles = handles.saturating_sub(1);
        }
        let skipped = &mut self.skipped;
        let reopened = self
            .files
            .get_mut(index)
            .is_some_and(|file| file.reopen(now, skipped));
        if reopened {
            *handles += 1;
        }
        reopened
    }

    /// A copytruncated file is finished from its copy; another truncated file (or a new
    /// file on a reused inode) is read again from its start.
    fn on_truncated(&mut self, index: usize, now: Instant) {
        let Some(file) = self.files.get_mut(index) else {
            return;
        };
        let path = file.path().display().to_string();
        match find_copy(
            file.path(),
            file.identity(),
            file.fingerprint(),
            file.read_offset(),
            &mut self.skipped,
        ) {
            Some((copy, identity)) => {
                tracing::info!(receiver = %self.id, %path, "copytruncated; the rest is read from its copy");
                file.follow_copy(copy, identity, now);
                self.last_discovery = None;
            }
            None => {
                tracing::warn!(receiver = %self.id, %path, "truncated with no copy found; read again from its start");
                if let Err(err) = file.restart_from_beginning() {
                    tracing::debug!(receiver = %self.id, %path, %err, "cannot read; retried");
                    file.close();
                }
            }
        }
        self.dirty = true;
    }

    fn release_finished(&mut self, now: Instant) {
        let grace = self.settings.rotation_grace;
        let before = self.files.len();
        self.files.retain(|file| !file.is_finished(now, grace));
        if self.files.len() != before {
            self.dirty = true;
        }
    }

    /// Takes a checkpoint when due (or `force`d) and writes the newest one whose
    /// records are all confirmed queued; with `force`, waits for the confirmations.
    fn save(&mut self, force: bool) {
        let now = Instant::now();
        let due = self
            .last_save
            .is_none_or(|at| now.duration_since(at) >= MIN_CHECKPOINT_INTERVAL);
        let waiting = !self.pending.is_empty();
        if self.checkpoint_frozen || !(self.dirty || waiting) || !(due || force) {
            return;
        }
        self.last_save = Some(now);
        if self.dirty {
            let entries = self
                .files
                .iter()
                .filter_map(TailedFile::checkpoint_entry)
                .collect();
            self.pending.push_back(PendingCheckpoint {
                entries,
                confirmations: std::mem::take(&mut self.unconfirmed),
            });
            self.dirty = false;
        }
        let Some(entries) = self.confirmed_checkpoint(force) else {
            return;
        };
        match self.store.save(entries) {
            Ok(()) => self.save_failing = false,
            Err(err) => {
                // Taken again from the files' state at the next round.
                self.dirty = true;
                if !self.save_failing {
                    self.save_failing = true;
                    tracing::warn!(receiver = %self.id, %err, "cannot write the checkpoint; retried");
                }
            }
        }
    }

    /// The newest pending checkpoint whose records, and all before, are confirmed.
    fn confirmed_checkpoint(&mut self, wait: bool) -> Option<Vec<CheckpointEntry>> {
        let mut newest = None;
        loop {
            let must_wait = wait || self.pending.len() > MAX_PENDING_CHECKPOINTS;
            let Some(front) = self.pending.front_mut() else {
                break;
            };
            let settled = if must_wait {
                Some(std::mem::take(&mut front.confirmations).wait_blocking())
            } else {
                front.confirmations.settled()
            };
            match settled {
                Some(true) => newest = self.pending.pop_front().map(|pending| pending.entries),
                Some(false) => {
                    tracing::error!(receiver = %self.id,
                        "a pipeline could not confirm records it took; the checkpoint stays \
                        where it was, so a restart reads them again");
                    self.checkpoint_frozen = true;
                    self.pending.clear();
                    return None;
                }
                None => break,
            }
        }
        newest
    }
}
