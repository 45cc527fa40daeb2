//! The storage of a durable sending queue: an append-only log of records in segment
//! files, read in order by the queue's consumers and deleted once delivered.
//!
//! A record is one frame (`frame`). A segment file is named by the sequence number
//! of its first record (`00000000000000000042.seg`); records follow one another, so
//! a record's sequence number is implicit. The file `offset` holds the first sequence
//! number not yet done and is replaced atomically. Written by hand: no maintained
//! crate offers a synchronous, fsync-controlled segment log with this recovery
//! contract.
//!
//! One log to a directory: opening takes the directory's lock (`dir_lock`) and
//! refuses, naming the holder, when another log has it. Only regular files are
//! opened (`regular_file`): a segment name that holds something else (a FIFO, a
//! device) is skipped and counted, and numbering goes on past it; an offset that is
//! not a regular file is unreadable.
//!
//! Recovery on open: every segment from the offset on is read frame by frame
//! (`scan`). A damaged frame in the middle of a segment is skipped, counted and
//! logged, and the frames after it are kept with their sequence numbers; a torn or
//! corrupt tail (a crash mid-write) is cut off, counted and logged.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::dir_lock::DirLock;
pub use crate::error::LogError;
use crate::error::io_error;
pub use crate::frame::MAX_RECORD_BYTES;
use crate::frame::{Frame, HEADER, header, read_frame, skip_frames};
use crate::regular_file::{Access, is_not_regular, names_other_than_a_file, open_regular};
use crate::scan::{Hole, scan};

/// The largest sequence number taken from disk (2^62: centuries of records at
/// millions a second), so that counting on from one never overflows.
const MAX_SEQUENCE: u64 = 1 << 62;
const SEGMENT_SUFFIX: &str = ".seg";
const OFFSET_FILE: &str = "offset";
const OFFSET_TEMPORARY: &str = "offset.tmp";
/// The most of the offset file read: a number and a newline.
const OFFSET_BYTES: u64 = 64;

/// When appended records are forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// After every record, before it counts as queued.
    Always,
    /// At the first append after the interval has passed since the last sync (and on
    /// close): a crash loses at most the records of one interval.
    Interval(Duration),
    /// Left to the operating system.
    Never,
}

/// What opening a log found on disk.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Records left undone by the previous run, to be delivered now.
    pub pending: u64,
    /// Bytes cut off torn or corrupt tails.
    pub truncated_bytes: u64,
    /// Segments whose tail was cut off.
    pub truncated_segments: u64,
    /// Damaged frames skipped inside segments, each with whatever could not be read
    /// up to the next intact frame; the records after them are kept.
    pub skipped_frames: u64,
    /// Bytes of those damaged stretches (left on disk, read past).
    pub skipped_bytes: u64,
    /// Names of segments or of the offset under which there is no regular file (a
    /// FIFO, a device, a directory): not opened, not read.
    pub skipped_files: u64,
}

#[derive(Debug)]
struct Segment {
    first: u64,
    /// Records in the segment, holes included.
    records: u64,
    bytes: u64,
    path: PathBuf,
    /// Damaged stretches, oldest first; their numbers are done.
    holes: Vec<Hole>,
}

impl Segment {
    fn end(&self) -> u64 {
        self.first + self.records
    }

    /// `sequence`, or the first number after the hole it falls in.
    fn readable_from(&self, sequence: u64) -> u64 {
        let index = sequence.saturating_sub(self.first);
        self.holes
            .iter()
            .find(|hole| hole.index <= index && index < hole.end())
            .map_or(sequence, |hole| self.first + hole.end())
    }

    /// The segment's file, positioned at the frame of `sequence` (a number no hole
    /// holds): from the start, or from the end of the last hole before it.
    fn open_at(&self, sequence: u64) -> Result<File, LogError> {
        let index = sequence.saturating_sub(self.first);
        let (start, skip) = self
            .holes
            .iter()
            .rev()
            .find(|hole| hole.end() <= index)
            .map_or((0, index), |hole| (hole.resume, index - hole.end()));
        let mut file = open_regular(&self.path, Access::Read).map_err(io_error(&self.path))?;
        skip_frames(&mut file, start, skip).map_err(io_error(&self.path))?;
        Ok(file)
    }
}

/// Where the consumers read next.
#[derive(Debug)]
struct ReadCursor {
    sequence: u64,
    /// The open segment (by its first sequence number), positioned at the next frame.
    file: Option<(u64, File)>,
}

/// An append-only log of records with a consumer offset. Not thread-safe by itself:
/// the durable queue holds it under a lock.
#[derive(Debug)]
pub struct SegmentLog {
    dir: PathBuf,
    segment_bytes: u64,
    fsync: Fsync,
    segments: VecDeque<Segment>,
    writer: Option<File>,
    next_sequence: u64,
    /// Every record below this one is done (delivered or given up).
    committed: u64,
    /// Records at or above `committed` that are done, out of order.
    done: BTreeSet<u64>,
    /// Runs of sequence numbers no record stands for (lost to a cut-off tail or a
    /// hole, or the name of a file left unread), by first number: end (exclusive).
    /// Kept as runs, since a damaged file name can make one huge.
    missing: BTreeMap<u64, u64>,
    cursor: ReadCursor,
    last_sync: Instant,
    unsynced: bool,
    /// The directory's lock, held as long as the log lives.
    _lock: DirLock,
}

impl SegmentLog {
    /// Opens (or creates) the log in `dir`, recovering what a previous run left.
    /// Refused with [`LogError::Locked`] while another log has `dir` open.
    pub fn open(
        dir: &Path,
        segment_bytes: u64,
        fsync: Fsync,
    ) -> Result<(Self, Recovery), LogError> {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let lock = DirLock::acquire(dir)?;
        let mut recovery = Recovery::default();
        let committed = read_offset(&dir.join(OFFSET_FILE), &mut recovery);
        let (segments, named_past) = recover_segments(dir, committed, &mut recovery)?;
        let next_sequence = segments
            .back()
            .map_or(committed, Segment::end)
            .max(committed)
            .max(named_past);
        let mut log = Self {
            dir: dir.to_path_buf(),
            segment_bytes: segment_bytes.max(HEADER + 1),
            fsync,
            segments,
            writer: None,
            next_sequence,
            committed,
            done: BTreeSet::new(),
            missing: BTreeMap::new(),
            cursor: ReadCursor {
                sequence: committed,
                file: None,
            },
            last_sync: Instant::now(),
            unsynced: false,
            _lock: lock,
        };
        log.mark_missing_done();
        recovery.pending = log.pending();
        Ok((log, recovery))
    }
    /// Records appended and not yet done.
    pub fn pending(&self) -> u64 {
        let done_above = self.done.len() as u64;
        let missing: u64 = self.missing.iter().map(|(start, end)| end - start).sum();
        (self.next_sequence - self.committed)
            .saturating_sub(done_above)
            .saturating_sub(missing)
    }

    /// Bytes of the segments on disk.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    /// Appends one record and returns its sequence number; with `Fsync::Always` it is
    /// on disk when this returns.
    pub fn append(&mut self, payload: &[u8]) -> Result<u64, LogError> {
        if payload.len() > MAX_RECORD_BYTES {
            return Err(LogError::TooLarge(payload.len()));
        }
        // A new segment too when the last one does not end where numbering goes on
        // (numbers were taken past it by the name of a file left unread).
        let full = self.segments.back().is_none_or(|last| {
            last.bytes >= self.segment_bytes || last.end() != self.next_sequence
        });
        if full || self.writer.is_none() {
            self.start_segment(full)?;
        }
        let frame_header = header(payload);
        let (Some(writer), Some(segment)) = (self.writer.as_mut(), self.segments.back_mut()) else {
            return Err(LogError::Io {
                path: self.dir.clone(),
                source: io::Error::other("no segment open for writing"),
            });
        };
        // Header and payload written apart: the payload is not copied into a frame.
        // A crash between the two leaves a torn frame, which recovery cuts off.
        let written = writer
            .write_all(&frame_header)
            .and_then(|()| writer.write_all(payload))
            .and_then(|()| writer.flush());
        if let Err(source) = written {
            // A partial frame may be on disk: cut it off so the segment stays readable.
            let _ = writer.set_len(segment.bytes);
            let _ = writer.seek(SeekFrom::Start(segment.bytes));
            return Err(LogError::Io {
                path: segment.path.clone(),
                source,
            });
        }
        segment.bytes += HEADER + payload.len() as u64;
        segment.records += 1;
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.unsynced = true;
        self.sync_if_due(false)?;
        Ok(sequence)
    }

    /// The next record for a consumer, in append order; `None` when all are handed out.
    /// A record that cannot be read back is skipped (marked done) and reported as an error.
    pub fn read_next(&mut self) -> Result<Option<(u64, Vec<u8>)>, LogError> {
        loop {
            if self.cursor.sequence >= self.next_sequence {
                return Ok(None);
            }
            let sequence = self.cursor.sequence;
            let Some(segment) = self
                .segments
                .iter()
                .find(|s| s.first <= sequence && sequence < s.end())
            else {
                // Lost to a cut-off tail, and already marked done.
                self.cursor.sequence = self
                    .segments
                    .iter()
                    .map(|s| s.first)
                    .find(|first| *first > sequence)
                    .unwrap_or(self.next_sequence);
                self.cursor.file = None;
                continue;
            };
            let readable = segment.readable_from(sequence);
            if readable != sequence {
                // A hole's numbers, already marked done.
                self.cursor.sequence = readable;
                self.cursor.file = None;
                continue;
            }
            let reopen = !matches!(&self.cursor.file, Some((first, _)) if *first == segment.first);
            if reopen {
                let file = segment.open_at(sequence)?;
                self.cursor.file = Some((segment.first, file));
            }
            let path = segment.path.clone();
            let Some((_, file)) = self.cursor.file.as_mut() else {
                continue;
            };
            self.cursor.sequence += 1;
            match read_frame(file) {
                Ok(Frame::Record(payload)) => return Ok(Some((sequence, payload))),
                Ok(Frame::End | Frame::Corrupt) | Err(_) => {
                    self.cursor.file = None;
                    self.complete(sequence)?;
                    return Err(LogError::Io {
                        path,
                        source: io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("record {sequence} cannot be read back"),
                        ),
                    });
                }
            }
        }
    }

    /// Up to `limit` records not yet done, from sequence number `first` on, read
    /// with file handles of their own: the consumers' place is not moved. A record
    /// that cannot be read back ends the range.
    pub fn read_range(&self, first: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, LogError> {
        let mut records = Vec::new();
        let first = first.max(self.committed);
        for segment in self.segments.iter().filter(|s| s.end() > first) {
            let mut sequence = first.max(segment.first);
            let mut file: Option<File> = None;
            while sequence < segment.end() {
                if records.len() >= limit {
                    return Ok(records);
                }
                let readable = segment.readable_from(sequence);
                if readable != sequence {
                    sequence = readable;
                    file = None;
                    continue;
                }
                let file = match &mut file {
                    Some(file) => file,
                    None => file.insert(segment.open_at(sequence)?),
                };
                match read_frame(file) {
                    Ok(Frame::Record(payload)) => {
                        if !self.done.contains(&sequence) {
                            records.push((sequence, payload));
                        }
                    }
                    _ => return Ok(records),
                }
                sequence += 1;
            }
        }
        Ok(records)
    }

    /// Marks a record done: delivered, or given up for good. Advances the offset over
    /// every record done in a row and deletes the segments wholly behind it.
    pub fn complete(&mut self, sequence: u64) -> Result<(), LogError> {
        if sequence < self.committed {
            return Ok(());
        }
        self.done.insert(sequence);
        let before = self.committed;
        self.advance_committed();
        if self.committed == before {
            return Ok(());
        }
        self.write_offset()?;
        // The segment being written goes too once everything is done, so that a small
        // disk is freed; the next append starts a new one.
        let all_done = self.committed >= self.next_sequence;
        while let Some(first) = self.segments.front() {
            let behind = first.end() <= self.committed;
            let writing = self.segments.len() == 1;
            if !behind || (writing && !all_done) {
                break;
            }
            if writing {
                self.sync_if_due(true)?;
                self.writer = None;
                self.cursor.file = None;
            }
            if let Some(segment) = self.segments.pop_front() {
                remove(&segment.path);
            }
        }
        Ok(())
    }

    /// Forces what was appended to disk.
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.sync_if_due(true)
    }

    fn sync_if_due(&mut self, force: bool) -> Result<(), LogError> {
        let due = match self.fsync {
            Fsync::Always => true,
            Fsync::Interval(interval) => force || self.last_sync.elapsed() >= interval,
            Fsync::Never => false,
        };
        if !(self.unsynced && due) {
            return Ok(());
        }
        if let (Some(writer), Some(segment)) = (&self.writer, self.segments.back()) {
            writer.sync_data().map_err(io_error(&segment.path))?;
        }
        self.unsynced = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Opens the last segment for appending, or a new one when it is full or missing.
    fn start_segment(&mut self, new: bool) -> Result<(), LogError> {
        self.sync_if_due(true)?;
        if new {
            let path = self
                .dir
                .join(format!("{:020}{SEGMENT_SUFFIX}", self.next_sequence));
            self.segments.push_back(Segment {
                first: self.next_sequence,
                records: 0,
                bytes: 0,
                path,
                holes: Vec::new(),
            });
        }
        let Some(segment) = self.segments.back() else {
            return Ok(());
        };
        let file = open_regular(&segment.path, Access::Append).map_err(io_error(&segment.path))?;
        if new && self.fsync != Fsync::Never {
            // The new file's directory entry must survive a crash too.
            sync_dir(&self.dir);
        }
        self.writer = Some(file);
        Ok(())
    }

    fn write_offset(&self) -> Result<(), LogError> {
        let path = self.dir.join(OFFSET_FILE);
        let temporary = self.dir.join(OFFSET_TEMPORARY);
        // Made anew: whatever is left under the name (a FIFO, a link) is never opened.
        match fs::remove_file(&temporary) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => {
                return Err(io_error(&temporary)(error));
            }
            _ => {}
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)
            .map_err(io_error(&temporary))?;
        writeln!(file, "{}", self.committed).map_err(io_error(&temporary))?;
        if self.fsync == Fsync::Always {
            file.sync_data().map_err(io_error(&temporary))?;
        }
        fs::rename(&temporary, &path).map_err(io_error(&path))
    }

    /// Records the sequence numbers no record stands for (records lost to a cut-off
    /// tail or to a hole, the name of a file left unread) as missing, so that the
    /// offset moves past them.
    fn mark_missing_done(&mut self) {
        let mut expected = self.committed;
        for segment in &self.segments {
            let holes = segment
                .holes
                .iter()
                .map(|hole| (segment.first + hole.index, segment.first + hole.end()));
            for (start, end) in std::iter::once((expected, segment.first)).chain(holes) {
                let start = start.max(self.committed);
                if start < end {
                    self.missing.insert(start, end);
                }
            }
            expected = expected.max(segment.end());
        }
        if expected < self.next_sequence {
            self.missing.insert(expected, self.next_sequence);
        }
        self.advance_committed();
        self.cursor.sequence = self.committed;
    }

    /// Moves the offset over every record done, or missing, in a row.
    fn advance_committed(&mut self) {
        loop {
            if self.done.remove(&self.committed) {
                self.committed += 1;
            } else if let Some(end) = self.missing.remove(&self.committed) {
                self.committed = end;
            } else {
                break;
            }
        }
    }
}

impl Drop for SegmentLog {
    fn drop(&mut self) {
        if let Err(error) = self.sync() {
            tracing::warn!(%error, "durable queue: last sync failed");
        }
    }
}

/// The segments of `dir` with records from `committed` on, recovered; and the first
/// sequence number past the name of every segment file left unread, which numbering
/// must go past (a new segment must not take the name of a file that is not ours).
fn recover_segments(
    dir: &Path,
    committed: u64,
    recovery: &mut Recovery,
) -> Result<(VecDeque<Segment>, u64), LogError> {
    let (unread, listed): (Vec<_>, Vec<_>) = list_segments(dir)?
        .into_iter()
        .partition(|(_, path)| names_other_than_a_file(path));
    let mut named_past = 0;
    for (first, path) in &unread {
        tracing::warn!(segment = %path.display(),
            "durable queue: skipping a segment name that holds no regular file (a FIFO, a device, a directory)");
        recovery.skipped_files += 1;
        named_past = named_past.max(first + 1);
    }
    let mut segments: VecDeque<Segment> = VecDeque::new();
    for (position, (first, path)) in listed.iter().enumerate() {
        let next = listed.get(position + 1).map(|(next, _)| *next);
        let segment = recover_segment(*first, path, next, recovery)?;
        if segment.end() <= committed {
            remove(&segment.path);
            continue;
        }
        if let Some(before) = segments
            .back()
            .filter(|before| segment.first < before.end())
        {
            // A damaged name: its records would take sequence numbers the segment
            // before holds, and the next append would reuse one.
            tracing::warn!(segment = %segment.path.display(), overlapped = %before.path.display(),
                "durable queue: dropping a segment that starts inside the one before it");
            recovery.truncated_bytes += segment.bytes;
            recovery.truncated_segments += 1;
            remove(&segment.path);
            continue;
        }
        segments.push_back(segment);
    }
    Ok((segments, named_past))
}

/// The segment of the file at `path` whose first record is `first`: its holes
/// found and skipped, its torn tail cut off. `next` is the first number of the
/// segment after it, which says how many records this one held.
fn recover_segment(
    first: u64,
    path: &Path,
    next: Option<u64>,
    recovery: &mut Recovery,
) -> Result<Segment, LogError> {
    let mut layout = open_regular(path, Access::Read)
        .and_then(|file| scan(&file))
        .map_err(io_error(path))?;
    if let Some(next) = next {
        layout.number_up_to(next.saturating_sub(first));
    }
    if !layout.holes.is_empty() {
        tracing::warn!(segment = %path.display(), damaged_frames = layout.holes.len(),
            skipped_bytes = layout.hole_bytes, records = layout.records,
            "durable queue: skipping damaged frames, keeping the records after them");
        recovery.skipped_frames += layout.holes.len() as u64;
        recovery.skipped_bytes += layout.hole_bytes;
    }
    if layout.kept_bytes < layout.file_bytes {
        let cut = layout.file_bytes - layout.kept_bytes;
        tracing::warn!(segment = %path.display(), cut_bytes = cut, kept_records = layout.records,
            "durable queue: cutting off a torn or corrupt tail");
        let file = open_regular(path, Access::Append).map_err(io_error(path))?;
        file.set_len(layout.kept_bytes).map_err(io_error(path))?;
        file.sync_all().map_err(io_error(path))?;
        recovery.truncated_bytes += cut;
        recovery.truncated_segments += 1;
    }
    Ok(Segment {
        first,
        records: layout.records,
        bytes: layout.kept_bytes,
        path: path.to_path_buf(),
        holes: layout.holes,
    })
}

/// The segment files of `dir` by first sequence number, oldest first; a name past
/// [`MAX_SEQUENCE`] is no segment of this log.
fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, LogError> {
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        let first = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_suffix(SEGMENT_SUFFIX))
            .and_then(|number| number.parse::<u64>().ok())
            .filter(|first| *first <= MAX_SEQUENCE);
        if let Some(first) = first {
            segments.push((first, path));
        }
    }
    segments.sort();
    Ok(segments)
}

/// The committed offset, or 0 (everything replayed: duplicates rather than loss) when
/// the file is missing or unreadable. An offset past [`MAX_SEQUENCE`] is corrupt: no
/// log lives to number that many records, and counting on from it would overflow.
fn read_offset(path: &Path, recovery: &mut Recovery) -> u64 {
    let read = open_regular(path, Access::Read).and_then(|file| {
        let mut text = String::new();
        file.take(OFFSET_BYTES).read_to_string(&mut text)?;
        Ok(text)
    });
    let text = match read {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return 0,
        Err(error) => {
            if is_not_regular(&error) {
                recovery.skipped_files += 1;
            }
            tracing::warn!(file = %path.display(), %error, "durable queue: unreadable offset, replaying from the start");
            return 0;
        }
    };
    match text.trim().parse() {
        Ok(offset) if offset <= MAX_SEQUENCE => offset,
        _ => {
            tracing::warn!(file = %path.display(), "durable queue: unreadable offset, replaying from the start");
            0
        }
    }
}

fn remove(path: &Path) {
    if let Err(error) = fs::remove_file(path) {
        tracing::warn!(segment = %path.display(), %error, "durable queue: cannot delete a delivered segment");
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}

#[cfg(test)]
#[path = "segment_log_tests.rs"]
mod tests;
