//! Property tests of the exposition parser: pages of both formats mutated (and their
//! conversion to OTLP), and generated families printed and read back unchanged.

use opscope_testkit::mutate::{mutated_text, token_soup};
use proptest::prelude::*;

use super::exposition::{Family, FamilyType, Format, Sample, parse};
use super::otlp_metrics::to_metrics;
use super::series_starts::SeriesStarts;

const NOW: u64 = 1_714_564_800_000_000_000;

const TEXT_PAGE: &str = "# HELP controller_runtime_reconcile_total Total number of reconciliations\n\
# TYPE controller_runtime_reconcile_total counter\n\
controller_runtime_reconcile_total{controller=\"rayjob\",result=\"error\"} 3\n\
# TYPE workqueue_depth gauge\n\
workqueue_depth{name=\"rayjob\"} 7 1714564800000\n\
# TYPE reconcile_time_seconds histogram\n\
reconcile_time_seconds_bucket{controller=\"rayjob\",le=\"0.005\"} 10\n\
reconcile_time_seconds_bucket{controller=\"rayjob\",le=\"+Inf\"} 1207\n\
reconcile_time_seconds_sum{controller=\"rayjob\"} 42.5\n\
reconcile_time_seconds_count{controller=\"rayjob\"} 1207\n\
# TYPE go_gc_duration_seconds summary\n\
go_gc_duration_seconds{quantile=\"0.5\"} 2.1e-05\n\
go_gc_duration_seconds_sum 0.0123\n\
go_gc_duration_seconds_count 88\n\
untyped_with_escapes{path=\"C:\\\\dir\",quote=\"\\\"\",nl=\"\\n\"} -Inf\n";

const OPENMETRICS_PAGE: &str = "# TYPE controller_runtime_reconcile counter\n\
# HELP controller_runtime_reconcile Total \\\"reconciles\\\"\n\
controller_runtime_reconcile_total{controller=\"rayjob\"} 17 1714564800.5 # {trace_id=\"abc\"} 1.0 1714564800.1\n\
controller_runtime_reconcile_created{controller=\"rayjob\"} 1714564000.25\n\
# TYPE build info\n\
build_info{version=\"1.2\"} 1\n\
# TYPE state stateset\n\
state{state=\"ready\"} 1\n\
# TYPE queue gaugehistogram\n\
queue_bucket{le=\"1\"} 2\n\
queue_bucket{le=\"+Inf\"} 3\n\
queue_gsum 4\n\
queue_gcount 3\n\
# EOF\n";

fn page() -> impl Strategy<Value = (String, Format)> {
    prop_oneof![
        mutated_text(vec![TEXT_PAGE.to_string()]).prop_map(|page| (page, Format::Text)),
        mutated_text(vec![OPENMETRICS_PAGE.to_string()])
            .prop_map(|page| (page, Format::OpenMetrics)),
        // Whole lines moved between the pages: a sample of one type under another.
        proptest::collection::vec(
            proptest::sample::select(
                TEXT_PAGE
                    .lines()
                    .chain(OPENMETRICS_PAGE.lines())
                    .collect::<Vec<_>>()
            ),
            0..20,
        )
        .prop_map(|lines| (lines.join("\n"), Format::OpenMetrics)),
        token_soup().prop_map(|page| (page, Format::Text)),
    ]
}

fn escaped_label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escaped_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Gauges and untyped families with distinct names and labels, as a parser should
/// read them back.
fn families() -> impl Strategy<Value = Vec<Family>> {
    let labels = proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,8}", ".{0,12}", 0..4)
        .prop_map(|labels| labels.into_iter().collect::<Vec<_>>());
    let value = any::<f64>().prop_filter("NaN is not equal to itself", |v| !v.is_nan());
    // Whole seconds below 2^53 / 5^9, so that OpenMetrics' float seconds are exact.
    let sample = (labels, value, proptest::option::of(0..4_000_000_000u64));
    let family = (
        "[a-zA-Z:][a-zA-Z0-9:]{0,12}",
        prop_oneof![Just(FamilyType::Gauge), Just(FamilyType::Unknown)],
        "[a-zA-Z0-9 \\\\\n\"]{0,20}[a-zA-Z0-9]",
        proptest::collection::vec(sample, 1..4),
    );
    proptest::collection::vec(family, 0..5).prop_map(|families| {
        families
            .into_iter()
            .enumerate()
            .map(|(index, (name, kind, help, samples))| {
                // A suffix of its own keeps every name distinct and out of the
                // `_total`/`_bucket`/... endings that belong to other families.
                let name = format!("{name}_f{index}");
                let samples = samples
                    .into_iter()
                    .map(|(labels, value, seconds)| Sample {
                        name: name.clone(),
                        labels,
                        value,
                        timestamp: seconds.map(|s| s * 1_000_000_000),
                    })
                    .collect();
                Family {
                    name,
                    kind,
                    help,
                    samples,
                }
            })
            .collect()
    })
}

fn print(families: &[Family], format: Format) -> String {
    let mut page = String::new();
    for family in families {
        let kind = match (family.kind, format) {
            (FamilyType::Gauge, _) => "gauge",
            (_, Format::Text) => "untyped",
            (_, Format::OpenMetrics) => "unknown",
        };
        page += &format!("# TYPE {} {kind}\n", family.name);
        page += &format!("# HELP {} {}\n", family.name, escaped_help(&family.help));
        for sample in &family.samples {
            let labels: Vec<String> = sample
                .labels
                .iter()
                .map(|(name, value)| format!("{name}=\"{}\"", escaped_label_value(value)))
                .collect();
            let time = match (sample.timestamp, format) {
                (None, _) => String::new(),
                (Some(nanos), Format::Text) => format!(" {}", nanos / 1_000_000),
                (Some(nanos), Format::OpenMetrics) => format!(" {}", nanos / 1_000_000_000),
            };
            let value = match sample.value {
                f64::INFINITY => "+Inf".to_string(),
                f64::NEG_INFINITY => "-Inf".to_string(),
                finite => format!("{finite:?}"),
            };
            page += &format!("{}{{{}}} {value}{time}\n", sample.name, labels.join(","));
        }
    }
    if format == Format::OpenMetrics {
        page += "# EOF\n";
    }
    page
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// A page is read whole or refused, within its bounds, and what is read converts.
    #[test]
    fn mutated_pages_are_read_without_panic((page, format) in page(), max_series in 1..64usize) {
        if let Ok(families) = parse(&page, format, max_series) {
            let samples: usize = families.iter().map(|f| f.samples.len()).sum();
            prop_assert!(samples <= page.lines().count());
            prop_assert!(samples + families.len() <= max_series);
            to_metrics(&families, NOW, &mut SeriesStarts::default());
        }
    }

    #[test]
    fn printed_families_read_back(families in families(), open_metrics in any::<bool>()) {
        let format = if open_metrics { Format::OpenMetrics } else { Format::Text };
        let page = print(&families, format);
        let read = parse(&page, format, usize::MAX);
        prop_assert_eq!(read, Ok(families), "{}", page);
    }
}
