use super::*;

const TEXT_PAGE: &str = r#"# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="rayjob",result="error"} 3
controller_runtime_reconcile_total{controller="rayjob",result="success"} 1204
# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="rayjob"} 7
# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_bucket{controller="rayjob",le="0.005"} 10
controller_runtime_reconcile_time_seconds_bucket{controller="rayjob",le="0.1"} 1100
controller_runtime_reconcile_time_seconds_bucket{controller="rayjob",le="+Inf"} 1207
controller_runtime_reconcile_time_seconds_sum{controller="rayjob"} 42.5
controller_runtime_reconcile_time_seconds_count{controller="rayjob"} 1207
# HELP go_gc_duration_seconds A summary of the pause duration of garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 2.1e-05
go_gc_duration_seconds{quantile="1"} NaN
go_gc_duration_seconds_sum 0.0123
go_gc_duration_seconds_count 88
process_start_time_seconds 1.71456e+09 1714564800000
"#;

fn names(families: &[Family]) -> Vec<(&str, FamilyType, usize)> {
    families
        .iter()
        .map(|f| (f.name.as_str(), f.kind, f.samples.len()))
        .collect()
}

#[test]
fn text_format_families_types_and_samples() {
    let families = parse(TEXT_PAGE, Format::Text, 1000).unwrap();
    assert_eq!(
        names(&families),
        [
            ("controller_runtime_reconcile_total", FamilyType::Counter, 2),
            ("workqueue_depth", FamilyType::Gauge, 1),
            (
                "controller_runtime_reconcile_time_seconds",
                FamilyType::Histogram,
                5
            ),
            ("go_gc_duration_seconds", FamilyType::Summary, 4),
            ("process_start_time_seconds", FamilyType::Unknown, 1),
        ]
    );
    let counter = &families[0];
    assert_eq!(
        counter.help,
        "Total number of reconciliations per controller"
    );
    assert_eq!(
        counter.samples[1].labels,
        [
            ("controller".to_string(), "rayjob".to_string()),
            ("result".to_string(), "success".to_string())
        ]
    );
    assert_eq!(counter.samples[1].value, 1204.0);
    let histogram = &families[2];
    assert_eq!(histogram.samples[2].label("le"), Some("+Inf"));
    assert_eq!(histogram.suffix_of(&histogram.samples[3]), "_sum");
    let summary = &families[3];
    assert!(summary.samples[1].value.is_nan());
    assert_eq!(summary.samples[0].value, 2.1e-05);
    let untyped = &families[4].samples[0];
    assert_eq!(untyped.timestamp, Some(1_714_564_800_000_000_000));
}

#[test]
fn openmetrics_counters_created_exemplars_and_eof() {
    let page = "# TYPE controller_runtime_reconcile counter\n\
        # HELP controller_runtime_reconcile Total number of reconciliations per controller\n\
        controller_runtime_reconcile_total{controller=\"rayjob\",result=\"success\"} 17 1714564800.5 # {trace_id=\"abc\"} 1.0 1714564800.1\n\
        controller_runtime_reconcile_created{controller=\"rayjob\",result=\"success\"} 1714564000.25\n\
        # TYPE build info\n\
        build_info{version=\"1.2\"} 1\n\
        # TYPE state stateset\n\
        state{state=\"ready\"} 1\n\
        # UNIT queue_seconds seconds\n\
        # EOF\n\
        after_eof 1\n";
    let families = parse(page, Format::OpenMetrics, 100).unwrap();
    assert_eq!(
        names(&families),
        [
            ("controller_runtime_reconcile", FamilyType::Counter, 2),
            ("build", FamilyType::Info, 1),
            ("state", FamilyType::StateSet, 1),
        ]
    );
    let total = &families[0].samples[0];
    assert_eq!(total.name, "controller_runtime_reconcile_total");
    assert_eq!(total.timestamp, Some(1_714_564_800_500_000_000));
    assert_eq!(families[0].suffix_of(&families[0].samples[1]), "_created");
}

#[test]
fn escapes_spaces_and_odd_values() {
    let page = "# HELP m A \\\"quoted\\\" help\\nwith a newline and a \\\\ backslash\n\
        m{path=\"C:\\\\dir\",msg=\"say \\\"hi\\\"\\n\" , empty=\"\",} +Inf\n\
        m{path=\"x\"} -Inf\n\
        m\t{path=\"y\"}\t.5\n\
        \n\
        # just a comment\n\
        m{path=\"z\"} 1e3\r\n";
    let families = parse(page, Format::Text, 100).unwrap();
    let family = &families[0];
    assert_eq!(
        family.help,
        "A \"quoted\" help\nwith a newline and a \\ backslash"
    );
    let first = &family.samples[0];
    assert_eq!(first.label("path"), Some("C:\\dir"));
    assert_eq!(first.label("msg"), Some("say \"hi\"\n"));
    assert_eq!(first.label("empty"), Some(""));
    assert_eq!(first.value, f64::INFINITY);
    assert_eq!(family.samples[1].value, f64::NEG_INFINITY);
    assert_eq!(family.samples[2].value, 0.5);
    assert_eq!(family.samples[3].value, 1000.0);
    assert_eq!(
        Format::of_content_type("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        Format::OpenMetrics
    );
    assert_eq!(
        Format::of_content_type("text/plain; version=0.0.4"),
        Format::Text
    );
}

#[test]
fn malformed_lines_fail_the_page_at_their_line() {
    for (page, line, message) in [
        ("m{a=\"1\"} 1\nm{a=\"1} 2\n", 2, "closing quote"),
        ("m{a=1} 1\n", 1, "=\"value\""),
        ("m{a=\"1\" b=\"2\"} 1\n", 1, "expected , or }"),
        ("m{a=\"\\x\"} 1\n", 1, "invalid escape"),
        ("m{a=\"1\",a=\"2\"} 1\n", 1, "given twice"),
        ("m{1a=\"1\"} 1\n", 1, "label name"),
        ("m{a=\"1\"}1\n", 1, "expected a value"),
        ("m\n", 1, "expected a value"),
        ("m one\n", 1, "invalid value"),
        ("m 1 2 3\n", 1, "unexpected"),
        ("m 1 soon\n", 1, "invalid timestamp"),
        ("m 1 -5\n", 1, "invalid timestamp"),
        ("9m 1\n", 1, "metric name"),
        ("{a=\"1\"} 1\n", 1, "metric name"),
        ("# TYPE m sometimes\n", 1, "unknown metric type"),
        ("# TYPE 9m gauge\n", 1, "invalid metric name"),
        ("# TYPE m gauge\n# TYPE m counter\n", 2, "second TYPE"),
        ("m 1\n# TYPE m gauge\n", 2, "second TYPE"),
        ("# TYPE h histogram\nh 1\n", 2, "does not fit"),
        (
            "# TYPE h histogram\nh_bucket{le=\"x\"} 1\n",
            2,
            "numeric le",
        ),
        ("# TYPE h histogram\nh_bucket 1\n", 2, "numeric le"),
        ("# TYPE s summary\ns 1\n", 2, "numeric quantile"),
    ] {
        let error = parse(page, Format::Text, 100).unwrap_err();
        assert_eq!(error.line, line, "{page:?}: {error}");
        assert!(error.message.contains(message), "{page:?}: {error}");
    }
}

#[test]
fn the_series_cap_fails_a_page_that_exceeds_it() {
    let page: String = (0..20).map(|i| format!("m{{i=\"{i}\"}} 1\n")).collect();
    assert!(
        parse(&page, Format::Text, 21).is_ok(),
        "20 samples and 1 family"
    );
    let error = parse(&page, Format::Text, 10).unwrap_err();
    assert!(error.message.contains("max_series"), "{error}");
    let types: String = (0..20).map(|i| format!("# TYPE m{i} gauge\n")).collect();
    assert!(
        parse(&types, Format::Text, 10).is_err(),
        "families count too"
    );
}

#[test]
fn arbitrary_input_never_panics() {
    let pieces = [
        "m",
        "{",
        "}",
        "=",
        "\"",
        "\\",
        ",",
        " ",
        "\t",
        "\n",
        "#",
        " HELP ",
        " TYPE ",
        "1",
        "+Inf",
        "NaN",
        "_bucket",
        "le",
        "é",
        "\u{0}",
        "histogram",
        " # ",
        "EOF",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..3000 {
        let mut page = String::new();
        for _ in 0..(state % 40) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            page.push_str(pieces[(state % pieces.len() as u64) as usize]);
        }
        for format in [Format::Text, Format::OpenMetrics] {
            let _ = parse(&page, format, 50);
        }
    }
}
