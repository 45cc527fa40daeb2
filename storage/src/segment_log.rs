//! The storage of a durable sending queue: an append-only log of records in segment
//! files, read in order by the queue's consumers and deleted once delivered.
//!
//! A record is framed as `u32` LE payload length, `u32` LE CRC32C of the payload, the
//! payload. A segment file is named by the sequence number of its first record
//! (`00000000000000000042.seg`); records follow one another, so a record's sequence
//! number is implicit. The file `offset` holds the first sequence number not yet done
//! and is replaced atomically. Written by hand: no maintained crate offers a
//! synchronous, fsync-controlled segment log with this recovery contract.
//!
//! Recovery on open: every segment from the offset on is read frame by frame; the
//! first torn or corrupt frame (a crash mid-write, a bad disk block) and whatever
//! follows it in that segment is cut off, counted and logged. Nothing is read past a
//! bad checksum.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bytes of a frame header: length and checksum.
const HEADER: u64 = 8;
/// The largest record accepted; a longer length in a header means corruption.
pub const MAX_RECORD_BYTES: usize = 256 * 1024 * 1024;
/// The largest sequence number taken from disk (2^62: centuries of records at
/// millions a second), so that counting on from one never overflows.
const MAX_SEQUENCE: u64 = 1 << 62;
const SEGMENT_SUFFIX: &str = ".seg";
const OFFSET_FILE: &str = "offset";

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

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("a record of {0} bytes is larger than the {MAX_RECORD_BYTES} bytes a record may be")]
    TooLarge(usize),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    }
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
}

#[derive(Debug)]
struct Segment {
    first: u64,
    /// Records in the segment.
    records: u64,
    bytes: u64,
    path: PathBuf,
}

impl Segment {
    fn end(&self) -> u64 {
        self.first + self.records
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
    /// Runs of sequence numbers no segment holds (lost to a cut-off tail), by first
    /// number: end (exclusive). Kept as runs, since a damaged file name can make one
    /// huge.
    missing: BTreeMap<u64, u64>,
    cursor: ReadCursor,
    last_sync: Instant,
    unsynced: bool,
}

impl SegmentLog {
    /// Opens (or creates) the log in `dir`, recovering what a previous run left.
    pub fn open(
        dir: &Path,
        segment_bytes: u64,
        fsync: Fsync,
    ) -> Result<(Self, Recovery), LogError> {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let committed = read_offset(&dir.join(OFFSET_FILE));
        let mut recovery = Recovery::default();
        let mut segments: VecDeque<Segment> = VecDeque::new();
        for (first, path) in list_segments(dir)? {
            let scan = scan_segment(&path)?;
            if scan.valid_bytes < scan.file_bytes {
                let cut = scan.file_bytes - scan.valid_bytes;
                tracing::warn!(segment = %path.display(), cut_bytes = cut, kept_records = scan.records,
                    "durable queue: cutting off a torn or corrupt tail");
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_error(&path))?;
                file.set_len(scan.valid_bytes).map_err(io_error(&path))?;
                file.sync_all().map_err(io_error(&path))?;
                recovery.truncated_bytes += cut;
                recovery.truncated_segments += 1;
            }
            let segment = Segment {
                first,
                records: scan.records,
                bytes: scan.valid_bytes,
                path,
            };
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
        let next_sequence = segments
            .back()
            .map_or(committed, Segment::end)
            .max(committed);
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
        let full = self
            .segments
            .back()
            .is_none_or(|last| last.bytes >= self.segment_bytes);
        if full || self.writer.is_none() {
            self.start_segment(full)?;
        }
        let mut header = [0u8; HEADER as usize];
        let (length, checksum) = header.split_at_mut(4);
        length.copy_from_slice(&(payload.len() as u32).to_le_bytes());
        checksum.copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        let (Some(writer), Some(segment)) = (self.writer.as_mut(), self.segments.back_mut()) else {
            return Err(LogError::Io {
                path: self.dir.clone(),
                source: io::Error::other("no segment open for writing"),
            });
        };
        // Header and payload written apart: the payload is not copied into a frame.
        // A crash between the two leaves a torn frame, which recovery cuts off.
        let written = writer
            .write_all(&header)
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
            let reopen = !matches!(&self.cursor.file, Some((first, _)) if *first == segment.first);
            if reopen {
                let mut file = File::open(&segment.path).map_err(io_error(&segment.path))?;
                skip_frames(&mut file, sequence - segment.first)
                    .map_err(io_error(&segment.path))?;
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
            let mut file = File::open(&segment.path).map_err(io_error(&segment.path))?;
            let start = first.max(segment.first);
            skip_frames(&mut file, start - segment.first).map_err(io_error(&segment.path))?;
            for sequence in start..segment.end() {
                if records.len() >= limit {
                    return Ok(records);
                }
                match read_frame(&mut file) {
                    Ok(Frame::Record(payload)) => {
                        if !self.done.contains(&sequence) {
                            records.push((sequence, payload));
                        }
                    }
                    _ => return Ok(records),
                }
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
            });
        }
        let Some(segment) = self.segments.back() else {
            return Ok(());
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&segment.path)
            .map_err(io_error(&segment.path))?;
        if new && self.fsync != Fsync::Never {
            // The new file's directory entry must survive a crash too.
            sync_dir(&self.dir);
        }
        self.writer = Some(file);
        Ok(())
    }

    fn write_offset(&self) -> Result<(), LogError> {
        let path = self.dir.join(OFFSET_FILE);
        let temporary = self.dir.join("offset.tmp");
        let mut file = File::create(&temporary).map_err(io_error(&temporary))?;
        writeln!(file, "{}", self.committed).map_err(io_error(&temporary))?;
        if self.fsync == Fsync::Always {
            file.sync_data().map_err(io_error(&temporary))?;
        }
        fs::rename(&temporary, &path).map_err(io_error(&path))
    }

    /// Records the sequence numbers no segment holds (records lost to a cut-off
    /// tail) as missing, so that the offset moves past them.
    fn mark_missing_done(&mut self) {
        let mut expected = self.committed;
        for segment in &self.segments {
            if segment.first > expected {
                self.missing.insert(expected, segment.first);
            }
            expected = expected.max(segment.end());
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

enum Frame {
    Record(Vec<u8>),
    /// Clean end of the data.
    End,
    /// A torn or corrupt frame.
    Corrupt,
}

fn read_frame(file: &mut File) -> io::Result<Frame> {
    let mut header = [0u8; HEADER as usize];
    let got = read_full(file, &mut header)?;
    if got == 0 {
        return Ok(Frame::End);
    }
    if got < header.len() {
        return Ok(Frame::Corrupt);
    }
    let [l0, l1, l2, l3, c0, c1, c2, c3] = header;
    let length = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
    let checksum = u32::from_le_bytes([c0, c1, c2, c3]);
    if length > MAX_RECORD_BYTES {
        return Ok(Frame::Corrupt);
    }
    let mut payload = vec![0u8; length];
    if read_full(file, &mut payload)? < length || crc32c::crc32c(&payload) != checksum {
        return Ok(Frame::Corrupt);
    }
    Ok(Frame::Record(payload))
}

/// Reads until `buffer` is full or the file ends; returns the bytes read.
fn read_full(file: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        let Some(rest) = buffer.get_mut(filled..) else {
            break;
        };
        match file.read(rest) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Skips `count` frames from the start of a segment.
fn skip_frames(file: &mut File, count: u64) -> io::Result<()> {
    let mut position = 0;
    for _ in 0..count {
        let mut header = [0u8; HEADER as usize];
        if read_full(file, &mut header)? < header.len() {
            break;
        }
        let [l0, l1, l2, l3, ..] = header;
        let length = u64::from(u32::from_le_bytes([l0, l1, l2, l3]));
        position += HEADER + length;
        file.seek(SeekFrom::Start(position))?;
    }
    Ok(())
}

struct Scan {
    records: u64,
    valid_bytes: u64,
    file_bytes: u64,
}

fn scan_segment(path: &Path) -> Result<Scan, LogError> {
    let mut file = File::open(path).map_err(io_error(path))?;
    let file_bytes = file.metadata().map_err(io_error(path))?.len();
    let mut scan = Scan {
        records: 0,
        valid_bytes: 0,
        file_bytes,
    };
    while let Frame::Record(payload) = read_frame(&mut file).map_err(io_error(path))? {
        scan.records += 1;
        scan.valid_bytes += HEADER + payload.len() as u64;
    }
    Ok(scan)
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
fn read_offset(path: &Path) -> u64 {
    let Ok(text) = fs::read_to_string(path) else {
        return 0;
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
mod tests {
    use super::*;

    fn open(dir: &Path) -> (SegmentLog, Recovery) {
        SegmentLog::open(dir, 64, Fsync::Always).unwrap()
    }

    fn drain(log: &mut SegmentLog) -> Vec<(u64, Vec<u8>)> {
        std::iter::from_fn(|| log.read_next().unwrap()).collect()
    }

    fn record(n: u64) -> Vec<u8> {
        format!("record {n}").into_bytes()
    }

    fn write_segment(dir: &Path, name: &str, records: &[Vec<u8>]) {
        let mut bytes = Vec::new();
        for payload in records {
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
            bytes.extend_from_slice(payload);
        }
        fs::write(dir.join(format!("{name}{SEGMENT_SUFFIX}")), bytes).unwrap();
    }

    #[test]
    fn a_range_is_read_without_moving_the_consumers() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = open(dir.path());
        for n in 0..6 {
            log.append(&record(n)).unwrap();
        }
        log.complete(0).unwrap();
        log.complete(3).unwrap();
        let range = log.read_range(0, 3).unwrap();
        let sequences: Vec<u64> = range.iter().map(|(sequence, _)| *sequence).collect();
        assert_eq!(sequences, [1, 2, 4], "done records are left out");
        assert_eq!(range[2].1, record(4));
        assert_eq!(log.read_range(5, 10).unwrap(), vec![(5, record(5))]);
        // The consumers read on from where they were.
        assert_eq!(
            log.read_next().unwrap().map(|(sequence, _)| sequence),
            Some(0)
        );
    }

    /// Found by the `segment_log` fuzz target: an empty segment named inside the
    /// range of the one before it made the next append reuse sequence number 1, and
    /// reading 1 gave the old record instead of the appended one.
    #[test]
    fn a_segment_starting_inside_the_one_before_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        write_segment(dir.path(), &format!("{:020}", 0), &[record(0), record(1)]);
        write_segment(dir.path(), &format!("{:020}", 1), &[]);
        fs::write(dir.path().join(OFFSET_FILE), "0").unwrap();
        let (mut log, recovery) = open(dir.path());
        assert_eq!(recovery.pending, 2);
        assert_eq!(recovery.truncated_segments, 1);
        assert_eq!(drain(&mut log), vec![(0, record(0)), (1, record(1))]);
        assert_eq!(log.append(b"after").unwrap(), 2);
        assert_eq!(log.read_next().unwrap(), Some((2, b"after".to_vec())));
    }

    /// Two names of the same number (`0.seg`, `00.seg`) are one segment too many.
    #[test]
    fn a_second_segment_of_the_same_first_number_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        write_segment(dir.path(), "0", &[record(0)]);
        write_segment(dir.path(), "00", &[record(7), record(8)]);
        let (mut log, recovery) = open(dir.path());
        assert_eq!(recovery.truncated_segments, 1);
        let read = drain(&mut log);
        assert_eq!(read.len(), 1);
        assert_eq!(log.append(b"after").unwrap(), 1);
        assert_eq!(log.read_next().unwrap(), Some((1, b"after".to_vec())));
    }

    #[test]
    fn records_come_back_in_order_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, recovery) = open(dir.path());
        assert_eq!(recovery, Recovery::default());
        for n in 0..20 {
            assert_eq!(log.append(&record(n)).unwrap(), n);
        }
        assert!(log.segments.len() > 3, "small segments rotate");
        let read = drain(&mut log);
        assert_eq!(read.len(), 20);
        assert!(read.iter().all(|(n, payload)| *payload == record(*n)));
        assert_eq!(log.pending(), 20, "read is not done");
    }

    #[test]
    fn undone_records_are_replayed_after_a_restart_and_done_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = open(dir.path());
            for n in 0..10 {
                log.append(&record(n)).unwrap();
            }
            drain(&mut log);
            for n in [0, 1, 2, 4] {
                log.complete(n).unwrap();
            }
        }
        let (mut log, recovery) = open(dir.path());
        assert_eq!(recovery.pending, 7, "3 and later are not all done");
        let replayed: Vec<u64> = drain(&mut log).into_iter().map(|(n, _)| n).collect();
        assert_eq!(replayed, [3, 4, 5, 6, 7, 8, 9], "4 again: at least once");
        assert_eq!(log.append(&record(10)).unwrap(), 10);
    }

    #[test]
    fn delivered_segments_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = open(dir.path());
        for n in 0..20 {
            log.append(&record(n)).unwrap();
        }
        let before = log.segments.len();
        for (n, _) in drain(&mut log) {
            log.complete(n).unwrap();
        }
        assert_eq!(log.pending(), 0);
        assert!(log.segments.is_empty(), "{before} segments before");
        assert_eq!(list_segments(dir.path()).unwrap().len(), 0);
        assert_eq!(log.append(&record(20)).unwrap(), 20, "a new segment");
        assert_eq!(drain(&mut log), [(20, record(20))]);
        drop(log);
        let (_, recovery) = open(dir.path());
        assert_eq!(recovery.pending, 1);
    }

    #[test]
    fn the_segment_being_written_stays_while_records_in_it_are_undone() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Never).unwrap();
        for n in 0..3 {
            log.append(&record(n)).unwrap();
        }
        drain(&mut log);
        log.complete(0).unwrap();
        log.complete(1).unwrap();
        assert_eq!(list_segments(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_torn_tail_is_cut_off_and_counted_and_appending_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Always).unwrap();
            for n in 0..5 {
                log.append(&record(n)).unwrap();
            }
        }
        let (_, path) = list_segments(dir.path()).unwrap().remove(0);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[200, 0, 0, 0, 1, 2]).unwrap();
        drop(file);
        let (mut log, recovery) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Always).unwrap();
        assert_eq!(
            (
                recovery.pending,
                recovery.truncated_bytes,
                recovery.truncated_segments
            ),
            (5, 6, 1)
        );
        assert_eq!(log.append(&record(5)).unwrap(), 5);
        assert_eq!(drain(&mut log).len(), 6);
    }

    #[test]
    fn a_flipped_bit_ends_the_segment_at_the_bad_record() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Always).unwrap();
            for n in 0..5 {
                log.append(&record(n)).unwrap();
            }
        }
        let (_, path) = list_segments(dir.path()).unwrap().remove(0);
        let mut bytes = fs::read(&path).unwrap();
        let third = 2 * (HEADER as usize + record(0).len()) + HEADER as usize;
        bytes[third] ^= 0x40;
        fs::write(&path, bytes).unwrap();
        let (mut log, recovery) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Always).unwrap();
        assert_eq!(recovery.pending, 2, "records before the bad one are kept");
        assert_eq!(recovery.truncated_segments, 1);
        let kept: Vec<u64> = drain(&mut log).into_iter().map(|(n, _)| n).collect();
        assert_eq!(kept, [0, 1]);
    }

    #[test]
    fn a_lost_middle_segment_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = open(dir.path());
            for n in 0..20 {
                log.append(&record(n)).unwrap();
            }
        }
        let segments = list_segments(dir.path()).unwrap();
        fs::write(&segments[1].1, b"garbage!").unwrap();
        let lost = segments[2].0 - segments[1].0;
        let (mut log, recovery) = open(dir.path());
        assert_eq!(recovery.pending, 20 - lost);
        let read: Vec<u64> = drain(&mut log).into_iter().map(|(n, _)| n).collect();
        assert_eq!(read.len() as u64, 20 - lost);
        for (n, _) in read.iter().map(|n| (*n, ())) {
            log.complete(n).unwrap();
        }
        assert_eq!(log.pending(), 0);
    }

    #[test]
    fn a_huge_gap_between_segment_names_costs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = open(dir.path());
            log.append(&record(0)).unwrap();
        }
        let far = 1u64 << 40;
        let mut frame = Vec::new();
        frame.extend_from_slice(&(record(1).len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32c::crc32c(&record(1)).to_le_bytes());
        frame.extend_from_slice(&record(1));
        fs::write(dir.path().join(format!("{far:020}{SEGMENT_SUFFIX}")), frame).unwrap();
        let (mut log, recovery) = open(dir.path());
        assert_eq!(recovery.pending, 2);
        let read: Vec<u64> = drain(&mut log).into_iter().map(|(n, _)| n).collect();
        assert_eq!(read, [0, far]);
        log.complete(0).unwrap();
        log.complete(far).unwrap();
        assert_eq!(log.pending(), 0);
    }

    #[test]
    fn an_unreadable_offset_replays_everything() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = open(dir.path());
            for n in 0..3 {
                log.append(&record(n)).unwrap();
            }
            drain(&mut log);
            log.complete(0).unwrap();
        }
        fs::write(dir.path().join(OFFSET_FILE), "not a number").unwrap();
        let (_, recovery) = open(dir.path());
        assert_eq!(recovery.pending, 3);
    }

    /// A damaged offset file holding `u64::MAX` made the next append overflow the
    /// sequence number.
    #[test]
    fn an_absurd_offset_is_read_as_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(OFFSET_FILE), "18446744073709551615\n").unwrap();
        let (mut log, recovery) = open(dir.path());
        assert_eq!(recovery.pending, 0);
        assert_eq!(log.append(&record(0)).unwrap(), 0);
        assert_eq!(drain(&mut log), [(0, record(0))]);
    }
}
