//! Joining the pieces of one record, per stream: CRI `P` lines, docker partial
//! entries and the parts of an over-long line; records beyond `max_log_size` are split.

use super::cri::Stream;
use super::record::Assembled;

/// The record in progress on each stream (containers write both at once).
pub struct Joins {
    max_log_size: usize,
    stdout: Option<Assembled>,
    stderr: Option<Assembled>,
}

impl Joins {
    pub fn new(max_log_size: usize) -> Self {
        Self {
            max_log_size,
            stdout: None,
            stderr: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stdout.is_none() && self.stderr.is_none()
    }

    /// Adds a piece to the record in progress on `stream`, or starts one at `time`
    /// and `line`; full parts of a record longer than `max_log_size` go to `ready`.
    pub fn append(
        &mut self,
        stream: Stream,
        time_unix_nano: u64,
        line: u64,
        text: &str,
        ready: &mut Vec<Assembled>,
    ) {
        let max = self.max_log_size;
        let record = self.slot(stream).get_or_insert_with(|| Assembled {
            stream,
            time_unix_nano,
            line,
            content: String::new(),
            split: false,
        });
        let mut rest = text;
        while record.content.len() + rest.len() > max {
            let (head, tail) = rest.split_at(fitting_prefix(
                rest,
                max - record.content.len(),
                record.content.is_empty(),
            ));
            record.content.push_str(head);
            rest = tail;
            record.split = true;
            ready.push(Assembled {
                stream: record.stream,
                time_unix_nano: record.time_unix_nano,
                line: record.line,
                content: std::mem::take(&mut record.content),
                split: true,
            });
        }
        record.content.push_str(rest);
    }

    /// Ends the record in progress on `stream`.
    pub fn finish(&mut self, stream: Stream, ready: &mut Vec<Assembled>) {
        ready.extend(self.slot(stream).take());
    }

    /// Ends every record in progress, marked split: their end may still come.
    pub fn flush(&mut self, ready: &mut Vec<Assembled>) {
        for slot in [&mut self.stdout, &mut self.stderr] {
            ready.extend(slot.take().map(|record| Assembled {
                split: true,
                ..record
            }));
        }
    }

    fn slot(&mut self, stream: Stream) -> &mut Option<Assembled> {
        match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        }
    }
}

/// The length of the longest prefix of `text` within `room` bytes that ends on a
/// character boundary; at least one character when `must_progress`.
fn fitting_prefix(text: &str, room: usize, must_progress: bool) -> usize {
    let mut end = room.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 && must_progress {
        return text.chars().next().map_or(text.len(), char::len_utf8);
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(records: &[Assembled]) -> Vec<(&str, bool)> {
        records
            .iter()
            .map(|r| (r.content.as_str(), r.split))
            .collect()
    }

    #[test]
    fn partial_pieces_join_into_one_record_with_the_first_time_and_line() {
        let mut joins = Joins::new(100);
        let mut ready = Vec::new();
        joins.append(Stream::Stdout, 1, 10, "first ", &mut ready);
        joins.append(Stream::Stdout, 2, 11, "second ", &mut ready);
        joins.append(Stream::Stdout, 3, 12, "last", &mut ready);
        assert!(ready.is_empty());
        joins.finish(Stream::Stdout, &mut ready);
        assert_eq!(contents(&ready), [("first second last", false)]);
        assert_eq!((ready[0].time_unix_nano, ready[0].line), (1, 10));
        assert!(joins.is_empty());
    }

    #[test]
    fn streams_join_separately() {
        let mut joins = Joins::new(100);
        let mut ready = Vec::new();
        joins.append(Stream::Stdout, 1, 1, "out-1 ", &mut ready);
        joins.append(Stream::Stderr, 2, 2, "err", &mut ready);
        joins.finish(Stream::Stderr, &mut ready);
        joins.append(Stream::Stdout, 3, 3, "out-2", &mut ready);
        joins.finish(Stream::Stdout, &mut ready);
        assert_eq!(contents(&ready), [("err", false), ("out-1 out-2", false)]);
    }

    #[test]
    fn records_longer_than_the_limit_are_split_and_marked() {
        let mut joins = Joins::new(4);
        let mut ready = Vec::new();
        joins.append(Stream::Stdout, 1, 1, "abc", &mut ready);
        joins.append(Stream::Stdout, 1, 2, "defghij", &mut ready);
        joins.finish(Stream::Stdout, &mut ready);
        assert_eq!(
            contents(&ready),
            [("abcd", true), ("efgh", true), ("ij", true)]
        );
    }

    #[test]
    fn splits_fall_on_character_boundaries() {
        let mut joins = Joins::new(4);
        let mut ready = Vec::new();
        joins.append(Stream::Stdout, 1, 1, "aé€", &mut ready);
        joins.finish(Stream::Stdout, &mut ready);
        assert_eq!(contents(&ready), [("aé", true), ("€", true)]);
        assert_eq!(
            fitting_prefix("€", 2, true),
            3,
            "a character wider than the room still moves on"
        );
        assert_eq!(fitting_prefix("€", 2, false), 0);
    }

    #[test]
    fn flush_ends_unfinished_records_as_split() {
        let mut joins = Joins::new(100);
        let mut ready = Vec::new();
        joins.append(Stream::Stderr, 1, 1, "no end yet", &mut ready);
        joins.flush(&mut ready);
        assert_eq!(contents(&ready), [("no end yet", true)]);
        assert!(joins.is_empty());
    }
}
