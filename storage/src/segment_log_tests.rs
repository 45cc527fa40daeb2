//! The segment log's tests: records written, cut, damaged and read back.

use super::*;
use crate::regular_file::make_fifo;

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

/// Writes `count` records in one segment and flips `bit` of byte `at` of it.
fn with_a_flipped_bit(dir: &Path, count: u64, at: usize, bit: u8) {
    {
        let (mut log, _) = SegmentLog::open(dir, 1 << 20, Fsync::Always).unwrap();
        for n in 0..count {
            log.append(&record(n)).unwrap();
        }
    }
    let (_, path) = list_segments(dir).unwrap().remove(0);
    let mut bytes = fs::read(&path).unwrap();
    bytes[at] ^= bit;
    fs::write(&path, bytes).unwrap();
}

/// Issue 34, finding 12: a flipped bit in the first of six records removed all six.
#[test]
fn a_flipped_bit_skips_the_bad_record_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    with_a_flipped_bit(dir.path(), 6, HEADER as usize + 2, 0x40);
    let (mut log, recovery) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Always).unwrap();
    assert_eq!(recovery.skipped_frames, 1);
    assert_eq!(recovery.skipped_bytes, HEADER + record(0).len() as u64);
    assert_eq!(recovery.truncated_segments, 0, "nothing cut off");
    assert_eq!(recovery.pending, 5);
    let kept = drain(&mut log);
    assert_eq!(kept, (1..6).map(|n| (n, record(n))).collect::<Vec<_>>());
    assert_eq!(log.append(&record(6)).unwrap(), 6);
    assert_eq!(drain(&mut log), [(6, record(6))]);
}

/// A length made longer by a flipped bit: followed, it would pass over intact
/// records; resynchronising keeps them.
#[test]
fn a_flipped_bit_in_a_length_skips_only_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let frame = HEADER as usize + record(0).len();
    with_a_flipped_bit(dir.path(), 6, frame, 2 * frame as u8);
    let (mut log, recovery) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Always).unwrap();
    assert_eq!((recovery.skipped_frames, recovery.pending), (1, 5));
    let kept: Vec<u64> = drain(&mut log).into_iter().map(|(n, _)| n).collect();
    assert_eq!(kept, [0, 2, 3, 4, 5]);
}

/// The records after a hole keep their numbers, so the offset still points at the
/// same record: what was done stays done, nothing undone is taken for done.
#[test]
fn a_hole_before_the_offset_leaves_the_records_after_it_where_they_were() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Always).unwrap();
        for n in 0..6 {
            log.append(&record(n)).unwrap();
        }
        for n in 0..3 {
            log.complete(n).unwrap();
        }
    }
    let (_, path) = list_segments(dir.path()).unwrap().remove(0);
    let mut bytes = fs::read(&path).unwrap();
    bytes[HEADER as usize + record(0).len() + 9] ^= 0x01;
    fs::write(&path, bytes).unwrap();
    let (mut log, recovery) = SegmentLog::open(dir.path(), 1 << 20, Fsync::Always).unwrap();
    assert_eq!((recovery.skipped_frames, recovery.pending), (1, 3));
    assert_eq!(
        drain(&mut log),
        (3..6).map(|n| (n, record(n))).collect::<Vec<_>>()
    );
    let range: Vec<u64> = log
        .read_range(0, 10)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(range, [3, 4, 5]);
}

/// A bad block over two frames is one hole; the next segment's name says it
/// stood for two records, so the ones after it keep their numbers.
#[test]
fn a_hole_over_several_frames_is_numbered_by_the_next_segments_name() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Vec<u8>> = (0..6).map(record).collect();
    write_segment(dir.path(), &format!("{:020}", 0), &records);
    write_segment(dir.path(), &format!("{:020}", 6), &[record(6)]);
    let path = dir.path().join(format!("{:020}{SEGMENT_SUFFIX}", 0));
    let mut bytes = fs::read(&path).unwrap();
    let frame = HEADER as usize + record(0).len();
    bytes[frame..3 * frame].fill(0xa5);
    fs::write(&path, bytes).unwrap();
    fs::write(dir.path().join(OFFSET_FILE), "4").unwrap();
    let (mut log, recovery) = open(dir.path());
    assert_eq!((recovery.skipped_frames, recovery.pending), (1, 3));
    assert_eq!(
        drain(&mut log),
        (4..7).map(|n| (n, record(n))).collect::<Vec<_>>()
    );
}

/// Opens `dir` on a thread of its own: a FIFO opened for reading blocks until a
/// writer comes, and the test fails instead of hanging.
fn open_within_seconds(dir: &Path) -> Result<(SegmentLog, Recovery), LogError> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = sender.send(SegmentLog::open(&dir, 64, Fsync::Always));
    });
    receiver
        .recv_timeout(Duration::from_secs(10))
        .expect("opening does not block")
}

/// Issue 34, finding 11: a FIFO in place of a segment hung the start.
#[test]
fn a_fifo_in_place_of_a_segment_is_skipped_counted_and_numbered_past() {
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), &format!("{:020}", 0), &[record(0), record(1)]);
    make_fifo(&dir.path().join(format!("{:020}{SEGMENT_SUFFIX}", 2))).unwrap();
    let (mut log, recovery) = open_within_seconds(dir.path()).unwrap();
    assert_eq!((recovery.skipped_files, recovery.pending), (1, 2));
    assert_eq!(drain(&mut log), [(0, record(0)), (1, record(1))]);
    // Appending goes on in a segment of a new name, not into the FIFO.
    assert_eq!(log.append(&record(3)).unwrap(), 3);
    assert_eq!(drain(&mut log), [(3, record(3))]);
    drop(log);
    let (mut log, recovery) = open_within_seconds(dir.path()).unwrap();
    assert_eq!((recovery.skipped_files, recovery.pending), (1, 3));
    let read: Vec<u64> = drain(&mut log).into_iter().map(|(n, _)| n).collect();
    assert_eq!(read, [0, 1, 3]);
    for n in read {
        log.complete(n).unwrap();
    }
    assert_eq!(log.pending(), 0);
}

#[test]
fn a_fifo_in_place_of_the_offset_is_unreadable_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    write_segment(dir.path(), &format!("{:020}", 0), &[record(0), record(1)]);
    make_fifo(&dir.path().join(OFFSET_FILE)).unwrap();
    make_fifo(&dir.path().join(OFFSET_TEMPORARY)).unwrap();
    let (mut log, recovery) = open_within_seconds(dir.path()).unwrap();
    assert_eq!((recovery.skipped_files, recovery.pending), (1, 2));
    log.complete(0).unwrap();
    drop(log);
    assert_eq!(
        fs::read_to_string(dir.path().join(OFFSET_FILE)).unwrap(),
        "1\n"
    );
    let (_, recovery) = open_within_seconds(dir.path()).unwrap();
    assert_eq!((recovery.skipped_files, recovery.pending), (0, 1));
}

/// Issue 34, finding 7: two releases on one node shared a segment file and lost
/// acknowledged records.
#[test]
fn a_second_log_of_one_directory_is_refused_naming_the_holder_until_the_first_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, _) = open(dir.path());
    first.append(&record(0)).unwrap();
    let error = SegmentLog::open(dir.path(), 64, Fsync::Always).unwrap_err();
    let LogError::Locked { dir: named, holder } = &error else {
        panic!("refused as locked, not {error:?}");
    };
    assert_eq!(named, dir.path());
    let pid = format!("pid {} (", std::process::id());
    assert!(holder.starts_with(&pid), "{holder}");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("{}: ", dir.path().display())) && message.contains(&pid),
        "{message}"
    );
    drop(first);
    let (mut second, recovery) = open(dir.path());
    assert_eq!(recovery.pending, 1);
    assert_eq!(drain(&mut second), [(0, record(0))]);
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
