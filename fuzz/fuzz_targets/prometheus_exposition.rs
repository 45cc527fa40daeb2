//! Prometheus scrape pages: the input read as the text format and as OpenMetrics,
//! within a series limit, and what is read converted to OTLP metrics.

#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope::fuzzing::{ExpositionFormat, SeriesStarts, parse, to_metrics};

const NOW: u64 = 1_714_564_800_000_000_000;
const MAX_SERIES: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(page) = std::str::from_utf8(data) else {
        return;
    };
    for format in [ExpositionFormat::Text, ExpositionFormat::OpenMetrics] {
        if let Ok(families) = parse(page, format, MAX_SERIES) {
            let samples: usize = families.iter().map(|f| f.samples.len()).sum();
            assert!(samples <= page.lines().count());
            assert!(samples + families.len() <= MAX_SERIES);
            let mut starts = SeriesStarts::default();
            to_metrics(&families, NOW, &mut starts);
            to_metrics(&families, NOW + 1, &mut starts);
        }
    }
});
