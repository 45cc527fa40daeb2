//! Property tests of container log reading: CRI and docker lines mutated, read line by
//! line and through the record reader with partial lines joined and long ones split.

use std::io::Write;
use std::path::Path;

use opscope_testkit::mutate::{mutated_bytes, mutated_text, token_soup};
use proptest::prelude::*;

use super::checkpoint::Position;
use super::config::LineFormat;
use super::cri::{Stream, parse_container_line};
use super::join::Joins;
use super::pod::PodIdentity;
use super::reader::{BatchLimits, Ending, ReadEnd, RecordReader};
use super::record::Assembled;

const UNLIMITED: BatchLimits = BatchLimits {
    max_records: usize::MAX,
    max_bytes: usize::MAX,
};

fn seed_lines() -> Vec<String> {
    [
        "2024-05-01T12:00:00.5Z stdout F {\"level\":\"info\",\"msg\":\"Reconciling\"}",
        "2024-05-01T12:00:00.500000000+02:00 stderr P first half of a line ",
        "2024-05-01T12:00:00.5Z stderr F second half",
        "2024-05-01T12:00:00Z stdout F",
        "{\"log\":\"I0501 12:00:00.000000 1 c.go:1] msg\\n\",\"stream\":\"stderr\",\"time\":\"2024-05-01T12:00:00.1Z\"}",
        "{\"log\":\"a docker piece without a newline\",\"stream\":\"stdout\",\"time\":\"2024-05-01T12:00:00Z\"}",
    ]
    .map(str::to_string)
    .to_vec()
}

/// A file of mutated container lines, each ended by a newline (or not, when a
/// mutation removed it).
fn container_file() -> impl Strategy<Value = Vec<u8>> {
    let seeds = seed_lines()
        .into_iter()
        .map(|line| (line + "\n").into_bytes())
        .collect();
    proptest::collection::vec(mutated_bytes(seeds), 0..16).prop_map(|lines| lines.concat())
}

fn file_with(bytes: &[u8]) -> std::fs::File {
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(bytes).unwrap();
    file
}

fn read_all(bytes: &[u8], max_log_size: usize, limits: BatchLimits) -> Vec<Assembled> {
    let file = file_with(bytes);
    let mut reader = RecordReader::new(Position::START, max_log_size, LineFormat::Container);
    let mut records = Vec::new();
    for _ in 0..4 * bytes.len() + 8 {
        let (batch, end) = reader.read(&file, limits, Ending::Complete).unwrap();
        records.extend(batch.records);
        if end == ReadEnd::EndOfFile {
            return records;
        }
    }
    panic!("the reader did not reach the end of {} bytes", bytes.len());
}

fn contents(records: &[Assembled]) -> Vec<(&str, u64, bool)> {
    records
        .iter()
        .map(|r| (r.content.as_str(), r.line, r.split))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn mutated_container_lines_are_read_without_panic(line in prop_oneof![
        3 => mutated_text(seed_lines()),
        1 => any::<String>(),
        1 => token_soup(),
    ]) {
        if let Some(parsed) = parse_container_line(&line) {
            prop_assert!(parsed.content.len() <= line.len());
        }
    }

    #[test]
    fn pod_paths_are_read_without_panic(path in prop_oneof![
        mutated_text(vec![
            "/var/log/pods/ml_train-7d9f8c6b5-abcde_0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e/manager/0.log".to_string(),
            "/var/log/pods/ns_pod_uid/c/3.log.20240501-120000.gz".to_string(),
        ]),
        token_soup(),
    ]) {
        PodIdentity::from_path(Path::new(&path));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No record is longer than `max_log_size` (but for one character wider than
    /// it), and without splitting there are no more records than lines.
    #[test]
    fn files_of_mutated_lines_are_read_into_bounded_records(
        bytes in container_file(),
        max_log_size in 1..200usize,
    ) {
        let records = read_all(&bytes, max_log_size, UNLIMITED);
        for record in &records {
            let widest_char = record.content.chars().map(char::len_utf8).max().unwrap_or(0);
            prop_assert!(record.content.len() <= max_log_size.max(widest_char));
        }
        let lines = bytes.split(|&b| b == b'\n').filter(|line| !line.is_empty()).count();
        let whole = records.iter().filter(|r| !r.split).count();
        prop_assert!(whole <= lines, "{whole} whole records from {lines} lines");
    }

    /// Reading one record at a time gives what reading everything at once gives.
    #[test]
    fn batch_limits_do_not_change_the_records(bytes in container_file(), max_log_size in 1..200usize) {
        let at_once = read_all(&bytes, max_log_size, UNLIMITED);
        let one_by_one = read_all(&bytes, max_log_size, BatchLimits { max_records: 1, max_bytes: usize::MAX });
        prop_assert_eq!(contents(&one_by_one), contents(&at_once));
    }

    /// Joining pieces and splitting at `max` loses and adds nothing: the parts put
    /// back together are the pieces in order, and each fits.
    #[test]
    fn joined_pieces_round_trip(
        pieces in proptest::collection::vec(prop_oneof!["[a-z]{0,20}", token_soup()], 0..12),
        max in 1..64usize,
    ) {
        let mut joins = Joins::new(max);
        let mut ready = Vec::new();
        for (line, piece) in pieces.iter().enumerate() {
            joins.append(Stream::Stdout, 1, line as u64, piece, &mut ready);
        }
        joins.finish(Stream::Stdout, &mut ready);
        let joined: String = ready.iter().map(|r| r.content.as_str()).collect();
        prop_assert_eq!(joined, pieces.concat());
        for record in &ready {
            let widest_char = record.content.chars().map(char::len_utf8).max().unwrap_or(0);
            prop_assert!(record.content.len() <= max.max(widest_char));
        }
    }
}
