use super::*;
use crate::receivers::prometheus_scrape::exposition::{Format, parse};
use opscope_model::attributes::get_str;

const NOW: u64 = 1_714_564_800_000_000_000;

fn convert(page: &str, format: Format, starts: &mut SeriesStarts, now: u64) -> Vec<Metric> {
    let families = parse(page, format, 1000).unwrap();
    to_metrics(&families, now, starts)
}

fn find<'a>(metrics: &'a [Metric], name: &str) -> &'a Metric {
    metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no metric {name} in {metrics:?}"))
}

fn value(point: &NumberDataPoint) -> f64 {
    match point.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        _ => panic!("a double"),
    }
}

#[test]
fn counters_are_cumulative_monotonic_sums_named_alike_in_both_formats() {
    let text = "# TYPE controller_runtime_reconcile_total counter\n\
        controller_runtime_reconcile_total{controller=\"rayjob\",result=\"success\"} 10\n";
    let open = "# TYPE controller_runtime_reconcile counter\n\
        controller_runtime_reconcile_total{result=\"success\",controller=\"rayjob\"} 10\n\
        controller_runtime_reconcile_created{result=\"success\",controller=\"rayjob\"} 1714564000\n\
        # EOF\n";
    for (page, format, start) in [
        (text, Format::Text, NOW),
        (open, Format::OpenMetrics, 1_714_564_000_000_000_000),
    ] {
        let metrics = convert(page, format, &mut SeriesStarts::default(), NOW);
        let metric = find(&metrics, "controller_runtime_reconcile_total");
        let Some(Data::Sum(sum)) = &metric.data else {
            panic!("a sum: {metric:?}")
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        let [point] = sum.data_points.as_slice() else {
            panic!("one point")
        };
        assert_eq!(value(point), 10.0);
        assert_eq!(point.start_time_unix_nano, start);
        assert_eq!(point.time_unix_nano, NOW);
        assert_eq!(get_str(&point.attributes, "controller"), Some("rayjob"));
        assert_eq!(get_str(&point.attributes, "result"), Some("success"));
    }
}

#[test]
fn counter_starts_hold_across_scrapes_and_move_on_reset() {
    let page = |total: u32| {
        format!(
            "# TYPE workqueue_retries_total counter\nworkqueue_retries_total{{name=\"rayjob\"}} {total}\n"
        )
    };
    let mut starts = SeriesStarts::default();
    let start_of = |metrics: &[Metric]| match &find(metrics, "workqueue_retries_total").data {
        Some(Data::Sum(sum)) => sum.data_points[0].start_time_unix_nano,
        _ => panic!("a sum"),
    };
    let first = convert(&page(5), Format::Text, &mut starts, NOW);
    let second = convert(&page(8), Format::Text, &mut starts, NOW + 30);
    let after_restart = convert(&page(1), Format::Text, &mut starts, NOW + 60);
    assert_eq!(start_of(&first), NOW);
    assert_eq!(start_of(&second), NOW);
    assert_eq!(start_of(&after_restart), NOW + 60);
}

#[test]
fn gauges_and_untyped_series_are_gauges() {
    let page = "# TYPE workqueue_depth gauge\n\
        workqueue_depth{name=\"rayjob\"} 7\n\
        workqueue_depth{name=\"raycluster\"} 0\n\
        go_goroutines 112\n\
        process_start_time_seconds 1.7e9 1714564700000\n";
    let metrics = convert(page, Format::Text, &mut SeriesStarts::default(), NOW);
    let Some(Data::Gauge(depth)) = &find(&metrics, "workqueue_depth").data else {
        panic!("a gauge")
    };
    assert_eq!(depth.data_points.len(), 2);
    assert_eq!(value(&depth.data_points[0]), 7.0);
    assert_eq!(
        get_str(&depth.data_points[0].attributes, "name"),
        Some("rayjob")
    );
    let Some(Data::Gauge(goroutines)) = &find(&metrics, "go_goroutines").data else {
        panic!("a gauge")
    };
    assert_eq!(value(&goroutines.data_points[0]), 112.0);
    assert!(goroutines.data_points[0].attributes.is_empty());
    let Some(Data::Gauge(started)) = &find(&metrics, "process_start_time_seconds").data else {
        panic!("a gauge")
    };
    assert_eq!(
        started.data_points[0].time_unix_nano, 1_714_564_700_000_000_000,
        "the page's own timestamp"
    );
}

#[test]
fn histograms_get_per_bucket_counts() {
    let page = "# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation\n\
        # TYPE controller_runtime_reconcile_time_seconds histogram\n\
        controller_runtime_reconcile_time_seconds_bucket{controller=\"rayjob\",le=\"0.1\"} 6\n\
        controller_runtime_reconcile_time_seconds_bucket{controller=\"rayjob\",le=\"0.005\"} 2\n\
        controller_runtime_reconcile_time_seconds_bucket{controller=\"rayjob\",le=\"1\"} 9\n\
        controller_runtime_reconcile_time_seconds_bucket{controller=\"rayjob\",le=\"+Inf\"} 10\n\
        controller_runtime_reconcile_time_seconds_sum{controller=\"rayjob\"} 3.25\n\
        controller_runtime_reconcile_time_seconds_count{controller=\"rayjob\"} 10\n";
    let metrics = convert(page, Format::Text, &mut SeriesStarts::default(), NOW);
    let metric = find(&metrics, "controller_runtime_reconcile_time_seconds");
    assert_eq!(metric.description, "Length of time per reconciliation");
    let Some(Data::Histogram(histogram)) = &metric.data else {
        panic!("a histogram")
    };
    let [point] = histogram.data_points.as_slice() else {
        panic!("one series: {histogram:?}")
    };
    assert_eq!(point.explicit_bounds, [0.005, 0.1, 1.0]);
    assert_eq!(point.bucket_counts, [2, 4, 3, 1]);
    assert_eq!(point.count, 10);
    assert_eq!(point.sum, Some(3.25));
    assert_eq!(point.start_time_unix_nano, NOW);
    assert_eq!(get_str(&point.attributes, "controller"), Some("rayjob"));
    assert_eq!(point.attributes.len(), 1, "le is not an attribute");
}

#[test]
fn a_histogram_without_inf_bucket_or_with_falling_counts_stays_sane() {
    let page = "# TYPE h histogram\n\
        h_bucket{le=\"1\"} 5\n\
        h_bucket{le=\"2\"} 3\n\
        h_count 9\n";
    let metrics = convert(page, Format::Text, &mut SeriesStarts::default(), NOW);
    let Some(Data::Histogram(histogram)) = &find(&metrics, "h").data else {
        panic!("a histogram")
    };
    let point = &histogram.data_points[0];
    assert_eq!(point.bucket_counts, [5, 0, 4]);
    assert_eq!(point.count, 9);
    assert_eq!(point.sum, None);
}

#[test]
fn summaries_keep_quantiles_sum_and_count() {
    let page = "# TYPE go_gc_duration_seconds summary\n\
        go_gc_duration_seconds{quantile=\"0.5\"} 0.0001\n\
        go_gc_duration_seconds{quantile=\"1\"} NaN\n\
        go_gc_duration_seconds_sum 0.5\n\
        go_gc_duration_seconds_count 88\n";
    let metrics = convert(page, Format::Text, &mut SeriesStarts::default(), NOW);
    let Some(Data::Summary(summary)) = &find(&metrics, "go_gc_duration_seconds").data else {
        panic!("a summary")
    };
    let point = &summary.data_points[0];
    assert_eq!(point.count, 88);
    assert_eq!(point.sum, 0.5);
    assert_eq!(point.quantile_values.len(), 2);
    assert_eq!(point.quantile_values[0].quantile, 0.5);
    assert!(point.quantile_values[1].value.is_nan());
}

#[test]
fn openmetrics_info_and_stateset_become_gauges() {
    let page = "# TYPE build info\nbuild_info{version=\"1.2\"} 1\n\
        # TYPE phase stateset\nphase{phase=\"ready\"} 1\nphase{phase=\"failed\"} 0\n# EOF\n";
    let metrics = convert(page, Format::OpenMetrics, &mut SeriesStarts::default(), NOW);
    assert!(matches!(
        find(&metrics, "build_info").data,
        Some(Data::Gauge(_))
    ));
    let Some(Data::Gauge(phase)) = &find(&metrics, "phase").data else {
        panic!("a gauge")
    };
    assert_eq!(phase.data_points.len(), 2);
    assert_eq!(gauge("up", 1.0, NOW).name, "up");
}
