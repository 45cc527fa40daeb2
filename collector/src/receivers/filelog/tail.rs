//! One tailed file: its identity, handle and record reader, the checks that tell a
//! rotation or a truncation, and its next batch of records as an OTLP request.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use opscope_model::timestamp::now_unix_nanos;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::resource::v1::Resource;

use super::checkpoint::{CheckpointEntry, Position};
use super::config::{LineFormat, StartAt};
use super::discovery::find_renamed;
use super::identity::{FileIdentity, Fingerprint};
use super::open::{SkippedFiles, open_regular};
use super::pod::file_resource;
use super::reader::{BatchLimits, Ending, ReadEnd, RecordReader, end_position};
use super::record::logs_request;

/// How files are read, the same for all of them.
#[derive(Debug, Clone, Copy)]
pub struct ReadSettings {
    pub limits: BatchLimits,
    pub max_log_size: usize,
    pub format: LineFormat,
    pub force_flush_period: Duration,
    /// How long a rotated file stays open, without growing, before it is read as
    /// complete and let go (writers may still append right after a rename).
    pub rotation_grace: Duration,
}

/// The next records of a file, as the request to hand on.
pub struct FileBatch {
    pub request: Option<ExportLogsServiceRequest>,
    pub records: usize,
    pub bad_lines: usize,
    /// The file holds more to read now.
    pub more: bool,
}

impl FileBatch {
    fn nothing() -> Self {
        Self {
            request: None,
            records: 0,
            bad_lines: 0,
            more: false,
        }
    }
}

pub struct TailedFile {
    /// Where the file was found; it may since have been renamed or deleted.
    path: PathBuf,
    source: String,
    resource: Resource,
    identity: FileIdentity,
    fingerprint: Fingerprint,
    handle: Option<File>,
    reader: RecordReader,
    /// Where reading resumes after a restart: everything before was accepted.
    committed: Position,
    size: u64,
    last_growth: Instant,
    rotated_at: Option<Instant>,
    at_end: bool,
    gone: bool,
}

impl TailedFile {
    /// A file found at `path` for the first time.
    pub fn open(
        path: &Path,
        start_at: StartAt,
        lines: (usize, LineFormat),
        now: Instant,
    ) -> io::Result<Self> {
        Self::opened(path, open_regular(path)?, start_at, lines, now)
    }

    /// A file that appeared as `path`, opened as `handle` (it may have been renamed since).
    pub fn opened(
        path: &Path,
        handle: File,
        start_at: StartAt,
        lines: (usize, LineFormat),
        now: Instant,
    ) -> io::Result<Self> {
        let position = match start_at {
            StartAt::Beginning => Position::START,
            StartAt::End => end_position(&handle)?,
        };
        let identity = FileIdentity::of(&handle.metadata()?);
        let fingerprint = Fingerprint::read(&handle)?;
        Ok(Self::new(
            path,
            handle,
            identity,
            fingerprint,
            position,
            lines,
            now,
        ))
    }

    /// A file of the checkpoint: at its path, or renamed to one of its rotated siblings.
    pub fn resume(
        entry: &CheckpointEntry,
        lines: (usize, LineFormat),
        now: Instant,
        skipped: &mut SkippedFiles,
    ) -> Option<Self> {
        let path = Path::new(&entry.path);
        let (handle, rotated) = match open_same(path, entry.identity, skipped) {
            Some(handle) => (handle, false),
            None => (
                find_renamed(path, entry.identity, entry.fingerprint, skipped)?,
                true,
            ),
        };
        let mut file = Self::new(
            path,
            handle,
            entry.identity,
            entry.fingerprint,
            entry.position,
            lines,
            now,
        );
        if rotated {
            file.mark_rotated(now);
        }
        Some(file)
    }

    fn new(
        path: &Path,
        handle: File,
        identity: FileIdentity,
        fingerprint: Fingerprint,
        position: Position,
        (max_log_size, format): (usize, LineFormat),
        now: Instant,
    ) -> Self {
        Self {
            path: path.to_path_buf(),
            source: path.display().to_string(),
            resource: file_resource(path),
            identity,
            fingerprint,
            size: handle.metadata().map_or(0, |m| m.len()),
            handle: Some(handle),
            reader: RecordReader::new(position, max_log_size, format),
            committed: position,
            last_growth: now,
            rotated_at: None,
            at_end: false,
            gone: false,
        }
    }

    /// `None` for a path that is not UTF-8 (it is tailed, but not checkpointed).
    pub fn checkpoint_entry(&self) -> Option<CheckpointEntry> {
        Some(CheckpointEntry {
            path: self.path.to_str()?.to_string(),
            identity: self.identity,
            fingerprint: self.fingerprint,
            position: self.committed,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The next byte to read.
    pub fn read_offset(&self) -> u64 {
        self.reader.offset()
    }

    pub fn is_rotated(&self) -> bool {
        self.rotated_at.is_some()
    }

    /// Another file took its path, or it was deleted: it is read to its end, then let go.
    pub fn mark_rotated(&mut self, now: Instant) {
        self.rotated_at.get_or_insert(now);
    }

    pub fn has_handle(&self) -> bool {
        self.handle.is_some()
    }

    pub fn close(&mut self) {
        self.handle = None;
    }

    /// Read to its end and all of it delivered.
    pub fn is_drained(&self) -> bool {
        self.at_end
            && self.reader.offset() >= self.size
            && !self.reader.has_pending()
            && self.committed == self.reader.position()
    }

    /// A handle that can be closed to make room: the file is at its path to reopen.
    pub fn is_idle(&self) -> bool {
        self.has_handle() && !self.is_rotated() && self.is_drained()
    }

    /// Gone, or rotated and read to its end with everything delivered.
    pub fn is_finished(&self, now: Instant, grace: Duration) -> bool {
        self.gone || (self.rotation_settled(now, grace) && self.is_drained())
    }

    fn rotation_settled(&self, now: Instant, grace: Duration) -> bool {
        self.rotated_at
            .is_some_and(|at| now.duration_since(at) >= grace)
            && now.duration_since(self.last_growth) >= grace
    }

    /// Opens the file again: at its path while it is there, else among its rotated
    /// siblings; `false` when it is gone (then it is let go).
    pub fn reopen(&mut self, now: Instant, skipped: &mut SkippedFiles) -> bool {
        if !self.is_rotated() {
            if let Some(handle) = open_same(&self.path, self.identity, skipped) {
                self.handle = Some(handle);
                return true;
            }
            self.mark_rotated(now);
        }
        self.handle = find_renamed(&self.path, self.identity, self.fingerprint, skipped);
        self.gone = self.handle.is_none();
        !self.gone
    }

    /// Notes the file's growth; `true` when it was truncated: it is shorter than before,
    /// or starts with other bytes (copytruncate, or a new file on a reused inode).
    pub fn check_truncated(&mut self, now: Instant) -> io::Result<bool> {
        let Some(handle) = &self.handle else {
            return Ok(false);
        };
        let size = handle.metadata()?.len();
        if size < self.size || size < self.reader.offset() {
            return Ok(true);
        }
        if size == self.size {
            return Ok(false);
        }
        let Some(fingerprint) = self.fingerprint.recheck(handle)? else {
            return Ok(true);
        };
        self.fingerprint = fingerprint;
        self.size = size;
        self.last_growth = now;
        Ok(false)
    }

    /// After a copytruncate: the rest of what was not read is in the copy; it is read
    /// from there, as a rotated file.
    pub fn follow_copy(&mut self, copy: File, identity: FileIdentity, now: Instant) {
        self.size = copy.metadata().map_or(self.size, |m| m.len());
        self.handle = Some(copy);
        self.identity = identity;
        self.mark_rotated(now);
    }

    /// After a truncation with no copy to finish from: the file is read from its start.
    pub fn restart_from_beginning(&mut self) -> io::Result<()> {
        if let Some(handle) = &self.handle {
            self.fingerprint = Fingerprint::read(handle)?;
            self.size = handle.metadata()?.len();
        }
        self.reader.restart();
        self.committed = Position::START;
        self.at_end = false;
        Ok(())
    }

    /// Reads the next batch; a record whose end is overdue is sent as it is, and a
    /// rotated file that stopped growing is read as complete.
    pub fn next_batch(&mut self, settings: &ReadSettings, now: Instant) -> io::Result<FileBatch> {
        let caught_up =
            self.at_end && self.reader.offset() >= self.size && !self.reader.has_pending();
        let Some(handle) = self.handle.as_ref().filter(|_| !caught_up) else {
            return Ok(FileBatch::nothing());
        };
        let ending = if self.rotation_settled(now, settings.rotation_grace) {
            Ending::Complete
        } else {
            Ending::Growing
        };
        let (mut batch, end) = self.reader.read(handle, settings.limits, ending)?;
        self.at_end = end == ReadEnd::EndOfFile;
        let overdue = now.duration_since(self.last_growth) >= settings.force_flush_period;
        if self.at_end && overdue && self.reader.has_pending() {
            self.reader.flush(&mut batch);
        }
        let records = batch.records.len();
        let request = (records > 0).then(|| {
            logs_request(
                &self.resource,
                &self.source,
                batch.records,
                now_unix_nanos(),
            )
        });
        Ok(FileBatch {
            request,
            records,
            bad_lines: batch.bad_lines,
            more: !self.at_end,
        })
    }

    /// The last batch was accepted (or had no records): what it covered is committed.
    /// Returns whether the committed position moved.
    pub fn accept(&mut self) -> bool {
        let position = self.reader.position();
        let moved = position != self.committed;
        self.committed = position;
        moved
    }

    /// The last batch was refused: it is read again next time.
    pub fn refuse(&mut self) {
        self.reader.rewind(self.committed);
        self.at_end = false;
    }
}

/// The file at `path` if it is still the file `identity`.
fn open_same(path: &Path, identity: FileIdentity, skipped: &mut SkippedFiles) -> Option<File> {
    let handle = open_regular(path)
        .map_err(|err| skipped.report(path, &err))
        .ok()?;
    (FileIdentity::of(&handle.metadata().ok()?) == identity).then_some(handle)
}
