//! What a segment file holds, as recovery reads it when a log is opened: its intact
//! frames, the damaged stretches between them (holes), and a torn tail.
//!
//! A frame is intact when its header is whole, its length at most
//! [`MAX_RECORD_BYTES`] and within the file, and its payload matches its checksum.
//! A frame that is not is not trusted at all, its length included: a flipped bit in
//! the length would send the reader into the middle of a frame, and every frame
//! after would fail too. So after a bad frame the reader resynchronises: it scans
//! forward byte by byte, from the byte after the bad frame's start, for the first
//! position holding an intact frame with a payload (an empty one is not taken: eight
//! zero bytes are an intact empty frame, and payloads hold runs of zeros). Scanning
//! checksums at most [`RESYNC_BUDGET`] bytes of candidates, so a resync takes a
//! bounded time whatever the damage (a false match needs a 32-bit checksum to agree
//! by chance).
//!
//! * Found: the stretch from the bad frame to it is a hole. A hole stands for one
//!   record, numbered as the others are, so that the records after it keep their
//!   sequence numbers (a flipped bit damages one frame) and the committed offset
//!   still points at the same record. Its number is marked done; its bytes stay on
//!   disk and are read past.
//! * Not found (a crash mid-write, or nothing intact after the damage): the bad frame
//!   and what follows are a torn tail, cut off by the log.
//!
//! A stretch over several frames (a bad disk block) is seen as such only through the
//! next segment's name, which says how many records the file held: the first hole
//! then stands for those the scan could not count, so that no record is numbered
//! below its own number (one may be numbered above it and delivered twice; none is
//! taken for done). In the segment being written, which has no segment after it, such
//! a stretch still counts one: the records after it are numbered lower, and those
//! that fall below the committed offset are taken for done.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::frame::{HEADER, MAX_RECORD_BYTES, parse_header};

/// Bytes of candidate frames checksummed at most by one resynchronisation: beyond,
/// the rest of the segment is taken for a torn tail.
pub const RESYNC_BUDGET: u64 = 256 << 20;
/// Bytes read at a time, for headers and for checksums.
const CHUNK: usize = 64 << 10;

/// A damaged stretch of a segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    /// Its first number, counted from the segment's first record.
    pub index: u64,
    /// Records it stands for, at least one.
    pub records: u64,
    /// The byte where the intact frame after it starts.
    pub resume: u64,
}

impl Hole {
    /// The index of the record after it.
    pub fn end(&self) -> u64 {
        self.index + self.records
    }
}

/// A segment file as recovery found it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Records numbered in the file: the intact frames and what the holes stand for.
    pub records: u64,
    pub holes: Vec<Hole>,
    /// Bytes of the holes.
    pub hole_bytes: u64,
    /// The end of the last intact frame: what follows is a torn tail.
    pub kept_bytes: u64,
    pub file_bytes: u64,
}

impl Layout {
    /// The file held `records` records, as the name of the segment after it says: the
    /// first hole stands for those the scan could not count. Without a hole there is
    /// nothing to renumber (records lost to a torn tail are a gap between segments).
    pub fn number_up_to(&mut self, records: u64) {
        let more = records.saturating_sub(self.records);
        let Some((first, later)) = self.holes.split_first_mut() else {
            return;
        };
        first.records += more;
        for hole in later {
            hole.index += more;
        }
        self.records += more;
    }
}

/// Reads the frames of a segment file.
pub fn scan(file: &File) -> io::Result<Layout> {
    let mut reader = Reader::new(file)?;
    let mut layout = Layout {
        file_bytes: reader.file_bytes,
        ..Layout::default()
    };
    let mut at = 0;
    while at < reader.file_bytes {
        if let Some(length) = reader.intact_at(at)? {
            at += HEADER + length;
            layout.records += 1;
            layout.kept_bytes = at;
            continue;
        }
        let Some(resume) = reader.next_intact_after(at)? else {
            break;
        };
        layout.holes.push(Hole {
            index: layout.records,
            records: 1,
            resume,
        });
        layout.records += 1;
        layout.hole_bytes += resume - at;
        at = resume;
    }
    Ok(layout)
}

/// Positioned reads of a file, through a window for headers.
struct Reader<'a> {
    file: &'a File,
    file_bytes: u64,
    window: Vec<u8>,
    window_start: u64,
    chunk: Vec<u8>,
}

impl<'a> Reader<'a> {
    fn new(file: &'a File) -> io::Result<Self> {
        Ok(Self {
            file,
            file_bytes: file.metadata()?.len(),
            window: Vec::new(),
            window_start: 0,
            chunk: Vec::new(),
        })
    }

    /// The first position after the bad frame at `bad` where an intact frame with a
    /// payload starts, found within the resync budget.
    fn next_intact_after(&mut self, bad: u64) -> io::Result<Option<u64>> {
        let mut budget = RESYNC_BUDGET;
        for at in bad + 1..self.file_bytes.saturating_sub(HEADER) {
            let Some(length) = self.plausible_length_at(at)?.filter(|length| *length > 0) else {
                continue;
            };
            let Some(left) = budget.checked_sub(length) else {
                return Ok(None);
            };
            budget = left;
            if self.verifies(at, length)? {
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    /// The payload length of the intact frame at `at`, if there is one.
    fn intact_at(&mut self, at: u64) -> io::Result<Option<u64>> {
        let Some(length) = self.plausible_length_at(at)? else {
            return Ok(None);
        };
        Ok(self.verifies(at, length)?.then_some(length))
    }

    /// The length in the header at `at`, if the file holds the whole header and a
    /// payload of that length, and the length is one a record may have.
    fn plausible_length_at(&mut self, at: u64) -> io::Result<Option<u64>> {
        let Some((length, _)) = self.header_at(at)? else {
            return Ok(None);
        };
        let fits = at + HEADER + length <= self.file_bytes;
        Ok((length <= MAX_RECORD_BYTES as u64 && fits).then_some(length))
    }

    /// Whether the payload of the frame at `at` matches the header's checksum.
    fn verifies(&mut self, at: u64, length: u64) -> io::Result<bool> {
        let Some((_, checksum)) = self.header_at(at)? else {
            return Ok(false);
        };
        Ok(self.checksum(at + HEADER, length)? == checksum)
    }

    /// Length and checksum of the header at `at`, if the file holds a whole one.
    fn header_at(&mut self, at: u64) -> io::Result<Option<(u64, u32)>> {
        if at + HEADER > self.file_bytes {
            return Ok(None);
        }
        if let Some(header) = self.windowed_header(at) {
            return Ok(Some(parse_header(header)));
        }
        let size = (self.file_bytes - at).min(CHUNK as u64) as usize;
        self.window.resize(size, 0);
        self.file.read_exact_at(&mut self.window, at)?;
        self.window_start = at;
        Ok(self.windowed_header(at).map(parse_header))
    }

    /// The `length` bytes from `at`, if the window holds them.
    fn windowed(&self, at: u64, length: u64) -> Option<&[u8]> {
        let offset = usize::try_from(at.checked_sub(self.window_start)?).ok()?;
        let end = offset.checked_add(usize::try_from(length).ok()?)?;
        self.window.get(offset..end)
    }

    fn windowed_header(&self, at: u64) -> Option<[u8; HEADER as usize]> {
        self.windowed(at, HEADER)?.try_into().ok()
    }

    /// The CRC32C of `length` bytes from `at`: from the window when it holds them
    /// (small frames), else read a chunk at a time.
    fn checksum(&mut self, mut at: u64, length: u64) -> io::Result<u32> {
        if let Some(bytes) = self.windowed(at, length) {
            return Ok(crc32c::crc32c(bytes));
        }
        let end = at + length;
        let mut crc = 0;
        self.chunk.resize(CHUNK, 0);
        while at < end {
            let size = (end - at).min(CHUNK as u64) as usize;
            let Some(chunk) = self.chunk.get_mut(..size) else {
                break;
            };
            self.file.read_exact_at(chunk, at)?;
            crc = crc32c::crc32c_append(crc, chunk);
            at += size as u64;
        }
        Ok(crc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::header;

    fn frames(payloads: &[&[u8]]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for payload in payloads {
            bytes.extend_from_slice(&header(payload));
            bytes.extend_from_slice(payload);
        }
        bytes
    }

    fn scan_bytes(bytes: &[u8]) -> Layout {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        std::fs::write(&path, bytes).unwrap();
        scan(&File::open(&path).unwrap()).unwrap()
    }

    const PAYLOADS: [&[u8]; 4] = [b"first record", b"second record", b"third", b"fourth"];

    #[test]
    fn intact_frames_are_all_kept() {
        let bytes = frames(&PAYLOADS);
        let layout = scan_bytes(&bytes);
        assert_eq!(
            layout,
            Layout {
                records: 4,
                holes: Vec::new(),
                hole_bytes: 0,
                kept_bytes: bytes.len() as u64,
                file_bytes: bytes.len() as u64,
            }
        );
    }

    #[test]
    fn a_bad_payload_is_a_hole_of_one_record_and_the_frames_after_it_are_kept() {
        let mut bytes = frames(&PAYLOADS);
        let second = HEADER as usize + PAYLOADS[0].len();
        bytes[second + HEADER as usize + 3] ^= 0x01;
        let layout = scan_bytes(&bytes);
        let frame = HEADER + PAYLOADS[1].len() as u64;
        assert_eq!(layout.records, 4);
        assert_eq!(
            layout.holes,
            [Hole {
                index: 1,
                records: 1,
                resume: second as u64 + frame,
            }]
        );
        assert_eq!(layout.hole_bytes, frame);
        assert_eq!(layout.kept_bytes, bytes.len() as u64);
    }

    /// A length made longer by a flipped bit that still fits in the file: followed, it
    /// would land inside the third frame; resynchronising finds the third's start.
    #[test]
    fn a_flipped_bit_in_a_length_resynchronises_on_the_next_frame() {
        let payloads: Vec<Vec<u8>> = (0..6).map(|n| vec![b'a' + n; 56]).collect();
        let borrowed: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let mut bytes = frames(&borrowed);
        // 56 becomes 120: followed, the frame would end at the start of the fourth,
        // passing over the intact third.
        bytes[64] ^= 0x40;
        let layout = scan_bytes(&bytes);
        assert_eq!(
            layout.holes,
            [Hole {
                index: 1,
                records: 1,
                resume: 128,
            }]
        );
        assert_eq!(layout.records, 6, "the third to sixth kept their numbers");
        assert_eq!(layout.kept_bytes, bytes.len() as u64);
    }

    #[test]
    fn a_length_past_the_end_of_the_file_in_the_middle_is_a_hole_not_a_tail() {
        let mut bytes = frames(&PAYLOADS);
        bytes[3] = 0x01;
        let layout = scan_bytes(&bytes);
        assert_eq!(layout.holes.len(), 1);
        assert_eq!(layout.records, 4);
        assert_eq!(layout.kept_bytes, bytes.len() as u64);
    }

    #[test]
    fn a_torn_last_frame_is_a_tail_to_cut() {
        let mut bytes = frames(&PAYLOADS);
        let whole = bytes.len() as u64;
        bytes.extend_from_slice(&frames(&[b"torn away"])[..12]);
        let layout = scan_bytes(&bytes);
        assert_eq!(layout.records, 4);
        assert!(layout.holes.is_empty());
        assert_eq!(layout.kept_bytes, whole);
        assert_eq!(layout.file_bytes, whole + 12);
    }

    #[test]
    fn a_bad_last_frame_with_nothing_intact_after_it_is_a_tail() {
        let mut bytes = frames(&PAYLOADS);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x80;
        let layout = scan_bytes(&bytes);
        assert_eq!(layout.records, 3);
        assert!(layout.holes.is_empty());
        assert_eq!(
            layout.kept_bytes,
            (bytes.len() - PAYLOADS[3].len()) as u64 - HEADER
        );
    }

    /// Zeros are intact empty frames; they are no place to resynchronise at.
    #[test]
    fn a_run_of_zeros_inside_a_bad_frame_is_not_taken_for_a_frame() {
        let zeros = [0u8; 32];
        let mut bytes = frames(&[b"before", &zeros, b"after"]);
        bytes[HEADER as usize + 6 + HEADER as usize] ^= 0x01;
        let layout = scan_bytes(&bytes);
        assert_eq!(layout.records, 3);
        assert_eq!(layout.holes.len(), 1);
        assert_eq!(layout.holes[0].resume, HEADER + 6 + HEADER + 32);
    }

    #[test]
    fn the_first_hole_stands_for_the_records_the_next_segment_name_counts() {
        let mut bytes = frames(&PAYLOADS);
        bytes[HEADER as usize] ^= 0x01;
        let last = bytes.len() - 1;
        bytes[last - PAYLOADS[3].len() - HEADER as usize - 1] ^= 0x01;
        let mut layout = scan_bytes(&bytes);
        assert_eq!(
            layout.holes.iter().map(|h| h.index).collect::<Vec<_>>(),
            [0, 2]
        );
        layout.number_up_to(7);
        assert_eq!(layout.records, 7);
        assert_eq!(
            layout
                .holes
                .iter()
                .map(|h| (h.index, h.records))
                .collect::<Vec<_>>(),
            [(0, 4), (5, 1)]
        );
        layout.number_up_to(2);
        assert_eq!(layout.records, 7, "never renumbered down");
    }
}
