//! The frame of a record in a segment file: `u32` LE payload length, `u32` LE CRC32C
//! of the payload, the payload; written and read one after another.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

/// Bytes of a frame header: length and checksum.
pub const HEADER: u64 = 8;
/// The largest record accepted; a longer length in a header means corruption.
pub const MAX_RECORD_BYTES: usize = 256 * 1024 * 1024;

/// The header of a frame of `payload` (at most [`MAX_RECORD_BYTES`]).
pub fn header(payload: &[u8]) -> [u8; HEADER as usize] {
    let mut header = [0u8; HEADER as usize];
    let (length, checksum) = header.split_at_mut(4);
    length.copy_from_slice(&(payload.len() as u32).to_le_bytes());
    checksum.copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    header
}

/// Payload length and checksum of a header.
pub fn parse_header(header: [u8; HEADER as usize]) -> (u64, u32) {
    let [l0, l1, l2, l3, c0, c1, c2, c3] = header;
    (
        u64::from(u32::from_le_bytes([l0, l1, l2, l3])),
        u32::from_le_bytes([c0, c1, c2, c3]),
    )
}

pub enum Frame {
    Record(Vec<u8>),
    /// Clean end of the data.
    End,
    /// A torn or corrupt frame.
    Corrupt,
}

pub fn read_frame(file: &mut File) -> io::Result<Frame> {
    let mut header = [0u8; HEADER as usize];
    let got = read_full(file, &mut header)?;
    if got == 0 {
        return Ok(Frame::End);
    }
    if got < header.len() {
        return Ok(Frame::Corrupt);
    }
    let (length, checksum) = parse_header(header);
    let Some(length) = usize::try_from(length)
        .ok()
        .filter(|length| *length <= MAX_RECORD_BYTES)
    else {
        return Ok(Frame::Corrupt);
    };
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

/// Skips `count` frames from `position`, the start of a frame, by their lengths.
pub fn skip_frames(file: &mut File, mut position: u64, count: u64) -> io::Result<()> {
    file.seek(SeekFrom::Start(position))?;
    for _ in 0..count {
        let mut header = [0u8; HEADER as usize];
        if read_full(file, &mut header)? < header.len() {
            break;
        }
        let (length, _) = parse_header(header);
        position += HEADER + length;
        file.seek(SeekFrom::Start(position))?;
    }
    Ok(())
}
