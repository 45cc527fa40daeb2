//! Property tests of `opscope analyze` on damaged captures: lines of the example
//! captures mutated and mixed go through line sorting, tagging and the correlator
//! without panic, each line counted once.

use std::fs;
use std::path::PathBuf;

use opscope_processors::correlator::CorrelatorConfig;
use opscope_processors::tagger::TaggerConfig;
use opscope_testkit::mutate::{lines_of, mutated_text};
use proptest::prelude::*;

use super::input::classify;
use super::{Options, analyze};

const POD_DIR: &str =
    "ray-system_kuberay-operator-6bc4f7d9c8-x2k4p_f08efb63-d03f-55cd-9758-a36e2a424c06/manager";
const CAPTURES: &[&str] = &[
    include_str!(
        "../../tests/fixtures/analyze/status-write-loop/ray-system_kuberay-operator-6bc4f7d9c8-x2k4p_f08efb63-d03f-55cd-9758-a36e2a424c06/manager/0.log"
    ),
    include_str!("../../tests/fixtures/analyze/status-write-loop/kube-apiserver-audit.log"),
    include_str!("../../tests/fixtures/analyze/stuck-finalizer/kube-apiserver-audit.log"),
    include_str!("../../tests/fixtures/analyze/goroutine-leak/otel-file-exporter-metrics.jsonl"),
];

fn capture_line() -> impl Strategy<Value = String> {
    mutated_text(lines_of(CAPTURES))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn mutated_capture_lines_are_sorted_without_panic(line in capture_line()) {
        let _ = classify(&line);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn damaged_captures_are_analyzed_without_panic(
        lines in proptest::collection::vec(capture_line(), 0..120),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let pod = dir.path().join(POD_DIR);
        fs::create_dir_all(&pod).unwrap();
        fs::write(pod.join("0.log"), lines.join("\n")).unwrap();
        let analysis = analyze(Options {
            paths: vec![PathBuf::from(dir.path())],
            at: None,
            tagger: TaggerConfig::default(),
            correlator: CorrelatorConfig::default(),
            explain: false,
        });
        prop_assert!(analysis.is_ok());
        if let Ok(analysis) = analysis {
            prop_assert_eq!(analysis.totals.files, 1);
            prop_assert!(analysis.totals.malformed <= lines.len() as u64);
        }
    }
}
