//! The durable sending queue's log as a previous run may have left it on disk: the
//! input split at `PART_SEPARATOR`, the first part the offset file (none when
//! empty), each further part a segment file, `name\ncontent`. The log is opened,
//! read to its end with every record completed, and must go on taking records.

#![no_main]

use std::fs;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use opscope_exporters::queue::segment_log::{Fsync, SegmentLog};
use opscope_fuzz::parts;

/// Small segments, so that appends roll over into new files.
const SEGMENT_BYTES: u64 = 200;
/// Longer segment names are cut: only what a file system takes is of interest.
const MAX_NAME_CHARS: usize = 40;

/// A file name of the part's first line, without path separators.
fn segment_name(line: &[u8], index: usize) -> String {
    let name: String = String::from_utf8_lossy(line)
        .chars()
        .filter(|&c| c != '/' && c != '\0')
        .take(MAX_NAME_CHARS)
        .collect();
    if name.is_empty() || name == "." || name == ".." {
        format!("{index:020}")
    } else {
        name
    }
}

/// Writes the files; the total bytes of the segments.
fn write_files(dir: &Path, data: &[u8]) -> Option<usize> {
    let parts = parts(data);
    let (offset, segments) = parts.split_first()?;
    if !offset.is_empty() {
        fs::write(dir.join("offset"), offset).ok()?;
    }
    let mut total = 0;
    for (index, segment) in segments.iter().enumerate() {
        let (name, content) = match segment.iter().position(|&b| b == b'\n') {
            Some(at) => (
                segment.get(..at).unwrap_or_default(),
                segment.get(at + 1..).unwrap_or_default(),
            ),
            None => (&b""[..], *segment),
        };
        fs::write(
            dir.join(format!("{}.seg", segment_name(name, index))),
            content,
        )
        .ok()?;
        total += content.len();
    }
    Some(total)
}

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let Some(total) = write_files(dir.path(), data) else {
        return;
    };
    let Ok((mut log, _recovery)) = SegmentLog::open(dir.path(), SEGMENT_BYTES, Fsync::Never) else {
        return;
    };
    // A frame takes at least its 8-byte header.
    let most = total / 8 + 1;
    let mut reads = 0;
    while let Ok(Some((sequence, _payload))) = log.read_next() {
        reads += 1;
        assert!(reads <= most, "more than {most} records from {total} bytes");
        let _ = log.complete(sequence);
    }
    if let Ok(sequence) = log.append(b"after") {
        let read = log.read_next();
        assert!(
            matches!(read, Ok(Some((s, ref p))) if s == sequence && p == b"after"),
            "appended {sequence}, read {read:?}"
        );
    }
});
