//! Reading one file's bytes into records: lines cut from the file (an over-long line
//! in parts), parsed as CRI or docker lines, pieces joined; and where to resume.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::checkpoint::Position;
use super::config::LineFormat;
use super::cri::{ContainerLine, Stream, parse_container_line};
use super::join::Joins;
use super::record::Assembled;

/// Bytes read from the file at once; a line longer than this is handled in parts.
const READ_BUFFER: usize = 64 * 1024;
/// Bytes read by one call before it returns, so that one busy file does not hold up
/// the others.
const READ_BUDGET: u64 = 8 * 1024 * 1024;

#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub max_records: usize,
    pub max_bytes: usize,
}

/// Records read by one call, and the malformed lines met for the first time.
#[derive(Debug, Default)]
pub struct Batch {
    pub records: Vec<Assembled>,
    pub bytes: usize,
    pub bad_lines: usize,
}

impl Batch {
    fn push(&mut self, record: Assembled) {
        self.bytes += record.content.len();
        self.records.push(record);
    }

    fn is_full(&self, limits: BatchLimits) -> bool {
        self.records.len() >= limits.max_records || self.bytes >= limits.max_bytes
    }
}

/// Why a read returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEnd {
    BatchFull,
    Budget,
    EndOfFile,
}

/// How the end of the file is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The file may grow: an unfinished last line waits for its end.
    Growing,
    /// Nothing more will be written: the last line and the records in progress end.
    Complete,
}

/// What the start of a line longer than the buffer said, for its later parts.
#[derive(Debug, Clone, Copy)]
enum LineHead {
    Parsed { stream: Stream, partial: bool },
    Malformed,
}

pub struct RecordReader {
    max_log_size: usize,
    format: LineFormat,
    joins: Joins,
    /// The last line start with no record in progress; its `skip` counts the records
    /// after it that were delivered before reading resumed there.
    resume: Position,
    /// Records put together since `resume`.
    emitted: u64,
    offset: u64,
    line: u64,
    head: Option<LineHead>,
    ready: Vec<Assembled>,
    /// Malformed lines before this offset were counted already.
    bad_lines_counted_to: u64,
}

impl RecordReader {
    pub fn new(at: Position, max_log_size: usize, format: LineFormat) -> Self {
        Self {
            max_log_size,
            format,
            joins: Joins::new(max_log_size),
            resume: at,
            emitted: 0,
            offset: at.offset,
            line: at.line,
            head: None,
            ready: Vec::new(),
            bad_lines_counted_to: 0,
        }
    }

    /// Where to resume to get every record after those read so far, and no other.
    pub fn position(&self) -> Position {
        Position {
            skip: self.emitted.max(self.resume.skip),
            ..self.resume
        }
    }

    /// The next byte to read.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether a record was started and not ended.
    pub fn has_pending(&self) -> bool {
        self.head.is_some() || !self.joins.is_empty()
    }

    /// Forgets what was read after `to` (it was not delivered), to read it again.
    pub fn rewind(&mut self, to: Position) {
        let counted = self.bad_lines_counted_to;
        *self = Self::new(to, self.max_log_size, self.format);
        self.bad_lines_counted_to = counted;
    }

    /// Starts over at the start of the file (it was truncated or replaced).
    pub fn restart(&mut self) {
        *self = Self::new(Position::START, self.max_log_size, self.format);
    }

    /// Reads records until the batch is full, the budget is spent or the file ends.
    pub fn read(
        &mut self,
        file: &File,
        limits: BatchLimits,
        ending: Ending,
    ) -> io::Result<(Batch, ReadEnd)> {
        let mut batch = Batch::default();
        let mut buffer = vec![0; READ_BUFFER];
        let start = self.offset;
        loop {
            if batch.is_full(limits) {
                return Ok((batch, ReadEnd::BatchFull));
            }
            if self.offset.saturating_sub(start) >= READ_BUDGET {
                return Ok((batch, ReadEnd::Budget));
            }
            let filled = fill(file, &mut buffer, self.offset)?;
            let data = buffer.get(..filled).unwrap_or_default();
            if self.take_lines(data, filled == READ_BUFFER, &mut batch, limits) > 0 {
                continue;
            }
            if ending == Ending::Complete && filled > 0 {
                self.piece(data, true, &mut batch);
                continue;
            }
            if ending == Ending::Complete && self.has_pending() {
                self.flush(&mut batch);
            }
            return Ok((batch, ReadEnd::EndOfFile));
        }
    }

    /// Ends the records in progress as they are, marked split: their end has not been
    /// written (yet); what follows is read as new lines.
    pub fn flush(&mut self, batch: &mut Batch) {
        self.joins.flush(&mut self.ready);
        self.head = None;
        self.emit_ready(batch);
        self.settle();
    }

    /// Handles the complete lines at the start of `data`, or its first part when it
    /// fills the buffer without a newline; returns the bytes used.
    fn take_lines(
        &mut self,
        data: &[u8],
        buffer_full: bool,
        batch: &mut Batch,
        limits: BatchLimits,
    ) -> usize {
        let mut consumed = 0;
        while !batch.is_full(limits) {
            let rest = data.get(consumed..).unwrap_or_default();
            match rest.iter().position(|&byte| byte == b'\n') {
                Some(end) => {
                    self.piece(rest.get(..=end).unwrap_or_default(), true, batch);
                    consumed += end + 1;
                }
                None if buffer_full && consumed == 0 => {
                    let end = utf8_boundary(rest);
                    self.piece(rest.get(..end).unwrap_or_default(), false, batch);
                    return end;
                }
                None => break,
            }
        }
        consumed
    }

    /// One line (`complete`, with its newline if it has one) or one part of a line
    /// longer than the buffer.
    fn piece(&mut self, bytes: &[u8], complete: bool, batch: &mut Batch) {
        let line_start = self.offset;
        self.offset += bytes.len() as u64;
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let text = String::from_utf8_lossy(bytes);
        match self.head.take() {
            None => self.line_start(&text, complete, line_start, batch),
            Some(head) => self.line_rest(head, &text, complete),
        }
        self.emit_ready(batch);
        if complete {
            self.line += 1;
            if self.joins.is_empty() {
                self.settle();
            }
        }
    }

    fn line_start(&mut self, text: &str, complete: bool, line_start: u64, batch: &mut Batch) {
        let parsed = match self.format {
            LineFormat::Container => parse_container_line(text),
            LineFormat::Lines => Some(ContainerLine {
                time_unix_nano: 0,
                stream: Stream::Stdout,
                partial: false,
                content: text.into(),
            }),
        };
        let Some(line) = parsed else {
            self.count_bad_line(line_start, batch);
            self.head = (!complete).then_some(LineHead::Malformed);
            return;
        };
        let (stream, partial) = (line.stream, line.partial);
        self.joins.append(
            stream,
            line.time_unix_nano,
            self.line,
            &line.content,
            &mut self.ready,
        );
        self.after_piece(LineHead::Parsed { stream, partial }, complete);
    }

    fn line_rest(&mut self, head: LineHead, text: &str, complete: bool) {
        if let LineHead::Parsed { stream, .. } = head {
            self.joins
                .append(stream, 0, self.line, text, &mut self.ready);
        }
        self.after_piece(head, complete);
    }

    fn after_piece(&mut self, head: LineHead, complete: bool) {
        if !complete {
            self.head = Some(head);
        } else if let LineHead::Parsed {
            stream,
            partial: false,
        } = head
        {
            self.joins.finish(stream, &mut self.ready);
        }
    }

    fn emit_ready(&mut self, batch: &mut Batch) {
        for record in self.ready.drain(..) {
            self.emitted += 1;
            if self.emitted > self.resume.skip {
                batch.push(record);
            }
        }
    }

    /// Nothing is in progress: reading can resume here.
    fn settle(&mut self) {
        self.resume = Position {
            offset: self.offset,
            line: self.line,
            skip: 0,
        };
        self.emitted = 0;
    }

    fn count_bad_line(&mut self, line_start: u64, batch: &mut Batch) {
        if line_start >= self.bad_lines_counted_to {
            batch.bad_lines += 1;
            self.bad_lines_counted_to = line_start + 1;
        }
    }
}

/// Where reading starts to skip what a file holds now: after its last complete line.
pub fn end_position(file: &File) -> io::Result<Position> {
    let size = file.metadata()?.len();
    let mut buffer = vec![0; READ_BUFFER];
    let mut position = Position::START;
    let mut offset = 0;
    while offset < size {
        let filled = fill(file, &mut buffer, offset)?;
        if filled == 0 {
            break;
        }
        let data = buffer.get(..filled).unwrap_or_default();
        for (index, _) in data.iter().enumerate().filter(|(_, b)| **b == b'\n') {
            position.line += 1;
            position.offset = offset + index as u64 + 1;
        }
        offset += filled as u64;
    }
    Ok(position)
}

/// Reads from `offset` until `buffer` is full or the file ends; returns the bytes read.
pub fn fill(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while let Some(free) = buffer.get_mut(filled..).filter(|free| !free.is_empty()) {
        match file.read_at(free, offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// Where to cut `bytes` (a full buffer with no newline) so that no UTF-8 character is
/// split between two parts.
fn utf8_boundary(bytes: &[u8]) -> usize {
    let len = bytes.len();
    let lead = (len.saturating_sub(4)..len)
        .rev()
        .find(|&index| bytes.get(index).is_some_and(|b| b & 0xC0 != 0x80));
    let Some(start) = lead else {
        return len;
    };
    let width = bytes
        .get(start)
        .map_or(1, |b| (b.leading_ones() as usize).max(1));
    if start == 0 || start + width <= len {
        len
    } else {
        start
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
