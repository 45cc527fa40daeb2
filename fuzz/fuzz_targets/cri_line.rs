//! Container log files (CRI and docker json-file lines): each line parsed alone,
//! then the whole input read as a file by the filelog receiver's record reader, with
//! partial lines joined and over-long records split.

#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use opscope::fuzzing::{
    BatchLimits, Ending, LineFormat, Position, ReadEnd, RecordReader, parse_container_line,
};

/// Small enough that joined records get split.
const MAX_LOG_SIZE: usize = 64;

fn read_file(data: &[u8], format: LineFormat, limits: BatchLimits) {
    let Ok(mut file) = tempfile::tempfile() else {
        return;
    };
    if file.write_all(data).is_err() {
        return;
    }
    let mut reader = RecordReader::new(Position::START, MAX_LOG_SIZE, format);
    let mut records = 0;
    for _ in 0..4 * data.len() + 8 {
        let Ok((batch, end)) = reader.read(&file, limits, Ending::Complete) else {
            return;
        };
        for record in &batch.records {
            let widest = record
                .content
                .chars()
                .map(char::len_utf8)
                .max()
                .unwrap_or(0);
            assert!(record.content.len() <= MAX_LOG_SIZE.max(widest));
        }
        records += batch.records.len();
        if end == ReadEnd::EndOfFile {
            return;
        }
    }
    panic!(
        "{records} records and no end of a file of {} bytes",
        data.len()
    );
}

fuzz_target!(|data: &[u8]| {
    for line in String::from_utf8_lossy(data).lines() {
        if let Some(parsed) = parse_container_line(line) {
            assert!(parsed.content.len() <= line.len());
        }
    }
    let unlimited = BatchLimits {
        max_records: usize::MAX,
        max_bytes: usize::MAX,
    };
    read_file(data, LineFormat::Container, unlimited);
    read_file(
        data,
        LineFormat::Container,
        BatchLimits {
            max_records: 1,
            max_bytes: 16,
        },
    );
    read_file(data, LineFormat::Lines, unlimited);
});
