//! Property tests of the durable queue's recovery: segment files and the offset file
//! damaged in arbitrary ways (bytes flipped, cut, inserted, appended) must open
//! without panic, and every record read back must be one that was written, intact.
//! Frames carry no sequence number, so a cut of exactly one whole frame shifts the
//! ones after it: what is checked is that no damaged payload comes back.

use std::fs;
use std::path::{Path, PathBuf};

use opscope_exporters::queue::segment_log::{Fsync, SegmentLog};
use opscope_testkit::mutate::{Mutation, apply, mutation};
use proptest::prelude::*;
use proptest::sample::Index;

/// Small segments, so that a run spans several files.
const SEGMENT_BYTES: u64 = 200;

#[derive(Debug, Clone)]
enum Damage {
    /// Mutations applied to one segment file.
    Segment(Index, Vec<Mutation>),
    /// Random bytes appended to one segment file (a torn or garbage tail).
    Append(Index, Vec<u8>),
    /// The offset file rewritten.
    Offset(String),
    /// One segment file deleted.
    Delete(Index),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        4 => (any::<Index>(), proptest::collection::vec(mutation(), 1..4))
            .prop_map(|(file, mutations)| Damage::Segment(file, mutations)),
        2 => (any::<Index>(), proptest::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(file, bytes)| Damage::Append(file, bytes)),
        1 => prop_oneof![
            "[0-9]{1,3}\n?",
            Just("18446744073709551615\n".to_string()),
            Just("18446744073709551614".to_string()),
            Just("-1".to_string()),
            Just(String::new()),
            any::<String>(),
        ]
        .prop_map(Damage::Offset),
        1 => any::<Index>().prop_map(Damage::Delete),
    ]
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn inflict(dir: &Path, damage: &Damage) {
    let files = segment_files(dir);
    let pick = |index: &Index| (!files.is_empty()).then(|| index.get(&files).clone());
    match damage {
        Damage::Segment(file, mutations) => {
            if let Some(path) = pick(file) {
                let bytes = fs::read(&path).unwrap();
                fs::write(&path, apply(&bytes, mutations)).unwrap();
            }
        }
        Damage::Append(file, tail) => {
            if let Some(path) = pick(file) {
                let mut bytes = fs::read(&path).unwrap();
                bytes.extend_from_slice(tail);
                fs::write(&path, bytes).unwrap();
            }
        }
        Damage::Offset(text) => fs::write(dir.join("offset"), text).unwrap(),
        Damage::Delete(file) => {
            if let Some(path) = pick(file) {
                fs::remove_file(path).unwrap();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn damaged_logs_open_and_yield_only_intact_records(
        payloads in proptest::collection::vec("record-[0-9]{1,3}-[a-z]{0,60}", 1..24),
        delivered in 0..8usize,
        damages in proptest::collection::vec(damage(), 1..4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = SegmentLog::open(dir.path(), SEGMENT_BYTES, Fsync::Never).unwrap();
            for payload in &payloads {
                log.append(payload.as_bytes()).unwrap();
            }
            for sequence in 0..delivered.min(payloads.len()) as u64 {
                log.complete(sequence).unwrap();
            }
        }
        for damage in &damages {
            inflict(dir.path(), damage);
        }

        let Ok((mut log, _recovery)) = SegmentLog::open(dir.path(), SEGMENT_BYTES, Fsync::Never) else {
            return Ok(());
        };
        // Repeated stretches can add frames, but never more than a few hundred.
        let mut reads = 0;
        loop {
            reads += 1;
            prop_assert!(reads <= 10_000, "reading does not end");
            match log.read_next() {
                Ok(Some((sequence, payload))) => {
                    // Eight zero bytes are a valid empty frame (CRC32C of nothing is 0).
                    let intact = payload.is_empty()
                        || payloads.iter().any(|written| written.as_bytes() == payload);
                    prop_assert!(intact, "record {} was never written: {:?}", sequence, payload);
                }
                Ok(None) => break,
                Err(_) => {}
            }
        }
        // The log goes on taking records after whatever it recovered from.
        if let Ok(sequence) = log.append(b"after") {
            let read = log.read_next();
            prop_assert!(matches!(read, Ok(Some((s, ref p))) if s == sequence && p == b"after"), "{:?}", read);
        }
    }
}
