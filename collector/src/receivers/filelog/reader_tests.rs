//! Tests of the record reader: parsing, joining, over-long and unfinished lines, and
//! that every position it reports resumes exactly after what was read.

use std::io::Write;

use super::*;

const TIME: &str = "2024-05-01T12:00:00.5Z";
const TIME_NANOS: u64 = 1_714_564_800_500_000_000;
const UNLIMITED: BatchLimits = BatchLimits {
    max_records: usize::MAX,
    max_bytes: usize::MAX,
};

fn cri(stream: &str, tag: &str, content: &str) -> String {
    format!("{TIME} {stream} {tag} {content}\n")
}

fn file_with(content: &str) -> File {
    let mut file = tempfile::tempfile().expect("a temp file");
    file.write_all(content.as_bytes()).expect("write");
    file
}

fn bodies(records: &[Assembled]) -> Vec<&str> {
    records.iter().map(|r| r.content.as_str()).collect()
}

fn read_once(reader: &mut RecordReader, file: &File, ending: Ending) -> Batch {
    let (batch, end) = reader.read(file, UNLIMITED, ending).expect("reads");
    assert_eq!(end, ReadEnd::EndOfFile);
    batch
}

#[test]
fn full_lines_become_records_with_their_time_stream_and_line() {
    let file = file_with(&(cri("stdout", "F", "one") + &cri("stderr", "F", "two")));
    let mut reader = RecordReader::new(Position::START, 1024, LineFormat::Container);
    let batch = read_once(&mut reader, &file, Ending::Growing);
    assert_eq!(bodies(&batch.records), ["one", "two"]);
    let two = &batch.records[1];
    assert_eq!(
        (two.stream, two.time_unix_nano, two.line, two.split),
        (Stream::Stderr, TIME_NANOS, 2, false)
    );
    let length = file.metadata().expect("stat").len();
    assert_eq!(
        reader.position(),
        Position {
            offset: length,
            line: 3,
            skip: 0
        }
    );
}

#[test]
fn in_lines_format_each_line_is_a_record_as_it_is() {
    let audit = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a1","verb":"update"}"#;
    let file = file_with(&format!("{audit}\nnot json at all\n"));
    let mut reader = RecordReader::new(Position::START, 1024, LineFormat::Lines);
    let batch = read_once(&mut reader, &file, Ending::Growing);
    assert_eq!(bodies(&batch.records), [audit, "not json at all"]);
    assert_eq!(batch.bad_lines, 0, "no line is malformed in this format");
    assert_eq!(batch.records[1].line, 2);
}

#[test]
fn partial_pieces_join_per_stream() {
    let content = cri("stdout", "P", "out-a ")
        + &cri("stderr", "F", "err")
        + &cri("stdout", "P", "out-b ")
        + &cri("stdout", "F", "out-c");
    let mut reader = RecordReader::new(Position::START, 1024, LineFormat::Container);
    let batch = read_once(&mut reader, &file_with(&content), Ending::Growing);
    assert_eq!(bodies(&batch.records), ["err", "out-a out-b out-c"]);
    assert_eq!(
        batch.records[1].line, 1,
        "a joined record is found at its first piece"
    );
}

#[test]
fn malformed_lines_are_counted_once_and_skipped() {
    let content =
        cri("stdout", "F", "good") + "not a container line\n\n" + &cri("stdout", "F", "also good");
    let file = file_with(&content);
    let mut reader = RecordReader::new(Position::START, 1024, LineFormat::Container);
    let batch = read_once(&mut reader, &file, Ending::Growing);
    assert_eq!(bodies(&batch.records), ["good", "also good"]);
    assert_eq!(batch.bad_lines, 2);
    assert_eq!(batch.records[1].line, 4);
    reader.rewind(Position::START);
    let again = read_once(&mut reader, &file, Ending::Growing);
    assert_eq!(again.records.len(), 2);
    assert_eq!(again.bad_lines, 0, "lines read again are not counted again");
}

#[test]
fn a_line_longer_than_the_buffer_is_one_record() {
    let long: String = "é-0123456789".repeat(READ_BUFFER / 4);
    let file = file_with(&(cri("stdout", "F", &long) + &cri("stdout", "F", "next")));
    let mut reader = RecordReader::new(Position::START, 1024 * 1024, LineFormat::Container);
    let batch = read_once(&mut reader, &file, Ending::Growing);
    assert_eq!(bodies(&batch.records), [long.as_str(), "next"]);
    assert!(!batch.records[0].split);
}

#[test]
fn a_record_longer_than_max_log_size_is_split_and_marked() {
    let long: String = "abcdefghij".repeat(READ_BUFFER / 4);
    let file = file_with(&(cri("stdout", "P", &long) + &cri("stdout", "F", &long)));
    let mut reader = RecordReader::new(Position::START, 50_000, LineFormat::Container);
    let batch = read_once(&mut reader, &file, Ending::Growing);
    assert!(
        batch
            .records
            .iter()
            .all(|r| r.split && r.content.len() <= 50_000)
    );
    assert!(
        batch
            .records
            .iter()
            .all(|r| r.line == 1 && r.time_unix_nano == TIME_NANOS)
    );
    assert_eq!(batch.records.len(), long.len() * 2 / 50_000 + 1);
    assert_eq!(bodies(&batch.records).concat(), long.repeat(2));
}

#[test]
fn an_unfinished_last_line_waits_for_its_end() {
    let mut file = file_with(&(cri("stdout", "F", "one") + TIME + " stdout F tw"));
    let mut reader = RecordReader::new(Position::START, 1024, LineFormat::Container);
    assert_eq!(
        bodies(&read_once(&mut reader, &file, Ending::Growing).records),
        ["one"]
    );
    assert_eq!(
        read_once(&mut reader, &file, Ending::Growing).records.len(),
        0
    );
    file.write_all(b"o\n").expect("write");
    assert_eq!(
        bodies(&read_once(&mut reader, &file, Ending::Growing).records),
        ["two"]
    );
}

#[test]
fn a_complete_file_ends_its_last_line_and_records_in_progress() {
    let file = file_with(&(cri("stdout", "P", "cut ") + TIME + " stderr F no newline"));
    let mut reader = RecordReader::new(Position::START, 1024, LineFormat::Container);
    let batch = read_once(&mut reader, &file, Ending::Complete);
    assert_eq!(bodies(&batch.records), ["no newline", "cut "]);
    assert!(batch.records[1].split, "its end was never written");
    assert!(!reader.has_pending());
    assert_eq!(
        reader.position().offset,
        file.metadata().expect("stat").len()
    );
}

#[test]
fn flush_sends_a_record_whose_end_is_late_and_reading_goes_on_after_it() {
    let mut file = file_with(&cri("stdout", "P", "first half"));
    let mut reader = RecordReader::new(Position::START, 1024, LineFormat::Container);
    assert!(
        read_once(&mut reader, &file, Ending::Growing)
            .records
            .is_empty()
    );
    assert!(reader.has_pending());
    let mut batch = Batch::default();
    reader.flush(&mut batch);
    assert_eq!(bodies(&batch.records), ["first half"]);
    assert!(batch.records[0].split);
    let after_flush = reader.position();
    file.write_all(cri("stdout", "F", "second half").as_bytes())
        .expect("write");
    assert_eq!(
        bodies(&read_once(&mut reader, &file, Ending::Growing).records),
        ["second half"]
    );
    let mut resumed = RecordReader::new(after_flush, 1024, LineFormat::Container);
    assert_eq!(
        bodies(&read_once(&mut resumed, &file, Ending::Growing).records),
        ["second half"]
    );
}

/// Lines of every kind: whole, joined, interleaved streams, malformed, over-long.
fn mixed_content() -> String {
    let long = "0123456789".repeat(READ_BUFFER / 8);
    let mut content = String::new();
    for round in 0..5 {
        content += &cri("stdout", "F", &format!("whole {round}"));
        content += &cri("stdout", "P", &format!("joined {round} a "));
        content += &cri("stderr", "F", &format!("between {round}"));
        content += &cri("stderr", "P", &format!("err {round} a "));
        content += &cri("stdout", "F", &format!("joined {round} b"));
        content += "garbage\n";
        content += &cri("stderr", "F", &format!("err {round} b"));
        content += &cri("stdout", "P", &long);
        content += &cri("stdout", "F", &format!("long {round}"));
    }
    content
}

#[test]
fn every_position_resumes_exactly_after_what_was_read() {
    let file = file_with(&mixed_content());
    let max_log_size = READ_BUFFER / 3;
    let mut whole = RecordReader::new(Position::START, max_log_size, LineFormat::Container);
    let expected = read_once(&mut whole, &file, Ending::Growing).records;
    assert_eq!(
        expected.len(),
        5 * 8,
        "each round: four lines, two joined, one split in four"
    );
    for max_records in [1, 2, 3, 7] {
        let limits = BatchLimits {
            max_records,
            max_bytes: usize::MAX,
        };
        let mut position = Position::START;
        let mut records = Vec::new();
        loop {
            let mut restarted = RecordReader::new(position, max_log_size, LineFormat::Container);
            let (batch, end) = restarted
                .read(&file, limits, Ending::Growing)
                .expect("reads");
            records.extend(batch.records);
            position = restarted.position();
            if end == ReadEnd::EndOfFile {
                break;
            }
        }
        assert_eq!(records, expected, "batches of {max_records}");
    }
}

#[test]
fn rewind_reads_the_records_after_the_position_again() {
    let file = file_with(&mixed_content());
    let limits = BatchLimits {
        max_records: 4,
        max_bytes: usize::MAX,
    };
    let mut reader = RecordReader::new(Position::START, 1024 * 1024, LineFormat::Container);
    let (first, _) = reader.read(&file, limits, Ending::Growing).expect("reads");
    let accepted = reader.position();
    let (refused, _) = reader.read(&file, limits, Ending::Growing).expect("reads");
    reader.rewind(accepted);
    let (again, _) = reader.read(&file, limits, Ending::Growing).expect("reads");
    assert_eq!(again.records, refused.records);
    assert_ne!(again.records, first.records);
}

#[test]
fn end_position_is_after_the_last_complete_line() {
    let file = file_with(&(cri("stdout", "F", "one") + &cri("stdout", "F", "two") + "unfinished"));
    let position = end_position(&file).expect("reads");
    let complete = (cri("stdout", "F", "one") + &cri("stdout", "F", "two")).len() as u64;
    assert_eq!(
        position,
        Position {
            offset: complete,
            line: 3,
            skip: 0
        }
    );
    assert_eq!(
        end_position(&file_with("")).expect("reads"),
        Position::START
    );
}

#[test]
fn parts_of_an_over_long_line_end_on_character_boundaries() {
    assert_eq!(utf8_boundary(b"abcd"), 4);
    assert_eq!(utf8_boundary("abé".as_bytes()), 4);
    assert_eq!(
        utf8_boundary(&"ab€".as_bytes()[..4]),
        2,
        "the euro sign's first two bytes wait"
    );
    assert_eq!(
        utf8_boundary(&[0xE2, 0x82]),
        2,
        "a buffer that is one broken character is taken whole"
    );
}
