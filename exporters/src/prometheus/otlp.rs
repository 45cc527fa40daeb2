//! OTLP metrics as Prometheus series: gauges, sums (monotonic ones as counters, delta
//! ones accumulated), explicit-bucket histograms and summaries; resource attributes
//! become `job` and `instance` labels and a `target_info` series, data point
//! attributes become labels.

use std::sync::Arc;

use opscope_model::semconv::{K8S_POD_NAME, SERVICE_NAME};
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, DataPointFlags, HistogramDataPoint, Metric, NumberDataPoint,
    SummaryDataPoint, exemplar, metric::Data, number_data_point,
};

use super::model::{
    Change, Exemplar, FamilyDesc, HistogramValue, Kind, Labels, Op, SummaryValue, Value,
};
use super::names::{LabelSet, family_name, label_name};

const SERVICE_NAMESPACE: &str = "service.namespace";
const SERVICE_INSTANCE_ID: &str = "service.instance.id";

/// The series changes of a metrics batch, and the data points that have no
/// Prometheus form (exponential histograms, unknown temporality, malformed points).
#[derive(Debug, Default)]
pub struct MetricChanges {
    pub series: Vec<Change>,
    pub unsupported: u64,
}

/// The changes a batch of OTLP metrics makes; `extra` labels go on every series.
pub fn metric_changes(request: &ExportMetricsServiceRequest, extra: &Labels) -> MetricChanges {
    let mut out = MetricChanges::default();
    for resource_metrics in &request.resource_metrics {
        let resource = resource_metrics
            .resource
            .as_ref()
            .map_or(&[][..], |r| &r.attributes);
        let target = Target::of(resource, extra);
        out.series.extend(target.info(resource));
        for metric in resource_metrics
            .scope_metrics
            .iter()
            .flat_map(|s| &s.metrics)
        {
            convert(metric, &target, &mut out);
        }
    }
    out
}

/// What the resource says about where the metrics come from.
struct Target<'a> {
    /// `service.namespace/service.name`, or `service.name`.
    job: String,
    /// `service.instance.id`, or `k8s.pod.name`.
    instance: String,
    extra: &'a Labels,
}

impl<'a> Target<'a> {
    fn of(resource: &[KeyValue], extra: &'a Labels) -> Self {
        let text = |key| attribute(resource, key).unwrap_or_default();
        let job = match (text(SERVICE_NAMESPACE), text(SERVICE_NAME)) {
            (_, name) if name.is_empty() => String::new(),
            (namespace, name) if namespace.is_empty() => name,
            (namespace, name) => format!("{namespace}/{name}"),
        };
        let instance = attribute(resource, SERVICE_INSTANCE_ID)
            .filter(|id| !id.is_empty())
            .or_else(|| attribute(resource, K8S_POD_NAME))
            .unwrap_or_default();
        Self {
            job,
            instance,
            extra,
        }
    }

    /// The labels of a series: its attributes, then `job` and `instance` when the
    /// resource gives them, then the extra labels where not set. `reserved` (`le`,
    /// `quantile`) is left out.
    fn labels(&self, attributes: &[KeyValue], reserved: Option<&str>) -> Labels {
        let mut sorted: Vec<&KeyValue> = attributes.iter().collect();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        let mut labels = LabelSet::default();
        for kv in sorted {
            labels.add_attribute(&kv.key, &value_text(kv.value.as_ref()));
        }
        if let Some(reserved) = reserved {
            labels.remove(reserved);
        }
        for (name, value) in [("job", &self.job), ("instance", &self.instance)] {
            if !value.is_empty() {
                labels.set(name, value);
            }
        }
        labels.add_defaults(self.extra);
        labels.into_labels()
    }

    /// `target_info{job, instance, <other resource attributes>} 1`, when the
    /// resource is identified and says more than who it is.
    fn info(&self, resource: &[KeyValue]) -> Option<Change> {
        if self.job.is_empty() && self.instance.is_empty() {
            return None;
        }
        let identifying = [SERVICE_NAME, SERVICE_NAMESPACE, SERVICE_INSTANCE_ID];
        let others: Vec<KeyValue> = resource
            .iter()
            .filter(|kv| !identifying.contains(&kv.key.as_str()))
            .cloned()
            .collect();
        if others.is_empty() {
            return None;
        }
        Some(Change {
            family: Arc::new(FamilyDesc {
                name: "target".into(),
                help: "Target metadata".into(),
                unit: String::new(),
                kind: Kind::Info,
                expires: true,
            }),
            labels: self.labels(&others, None),
            op: Op::Set(Value::Number(1.0)),
        })
    }
}

fn convert(metric: &Metric, target: &Target<'_>, out: &mut MetricChanges) {
    match &metric.data {
        Some(Data::Gauge(gauge)) => numbers(
            metric,
            Kind::Gauge,
            Some(Op::Set),
            &gauge.data_points,
            target,
            out,
        ),
        Some(Data::Sum(sum)) => {
            let kind = if sum.is_monotonic {
                Kind::Counter
            } else {
                Kind::Gauge
            };
            let op = accumulation(sum.aggregation_temporality);
            numbers(metric, kind, op, &sum.data_points, target, out);
        }
        Some(Data::Histogram(histogram)) => {
            let op = accumulation(histogram.aggregation_temporality);
            histograms(metric, op, &histogram.data_points, target, out);
        }
        Some(Data::Summary(summary)) => summaries(metric, &summary.data_points, target, out),
        Some(Data::ExponentialHistogram(histogram)) => {
            out.unsupported += histogram.data_points.len() as u64;
        }
        None => {}
    }
}

/// Cumulative points set the series, delta points add to it; other temporalities
/// cannot be read.
fn accumulation(temporality: i32) -> Option<fn(Value) -> Op> {
    match AggregationTemporality::try_from(temporality) {
        Ok(AggregationTemporality::Cumulative) => Some(Op::Set),
        Ok(AggregationTemporality::Delta) => Some(Op::Add),
        _ => None,
    }
}

fn family(metric: &Metric, kind: Kind) -> Option<Arc<FamilyDesc>> {
    let (name, unit) = family_name(&metric.name, &metric.unit, kind == Kind::Counter);
    (!name.is_empty()).then(|| {
        Arc::new(FamilyDesc {
            name,
            help: metric.description.clone(),
            unit,
            kind,
            expires: true,
        })
    })
}

/// Whether the point says it has no value (the producer's staleness marker).
fn no_value(flags: u32) -> bool {
    flags & DataPointFlags::NoRecordedValueMask as u32 != 0
}

fn numbers(
    metric: &Metric,
    kind: Kind,
    op: Option<fn(Value) -> Op>,
    points: &[NumberDataPoint],
    target: &Target<'_>,
    out: &mut MetricChanges,
) {
    let (Some(family), Some(op)) = (family(metric, kind), op) else {
        out.unsupported += points.len() as u64;
        return;
    };
    for point in points.iter().filter(|p| !no_value(p.flags)) {
        let value = match point.value {
            Some(number_data_point::Value::AsDouble(value)) => value,
            Some(number_data_point::Value::AsInt(value)) => value as f64,
            None => {
                out.unsupported += 1;
                continue;
            }
        };
        out.series.push(Change {
            family: Arc::clone(&family),
            labels: target.labels(&point.attributes, None),
            op: op(Value::Number(value)),
        });
    }
}

fn histograms(
    metric: &Metric,
    op: Option<fn(Value) -> Op>,
    points: &[HistogramDataPoint],
    target: &Target<'_>,
    out: &mut MetricChanges,
) {
    let (Some(family), Some(op)) = (family(metric, Kind::Histogram), op) else {
        out.unsupported += points.len() as u64;
        return;
    };
    for point in points.iter().filter(|p| !no_value(p.flags)) {
        let Some(value) = histogram_value(point) else {
            out.unsupported += 1;
            continue;
        };
        out.series.push(Change {
            family: Arc::clone(&family),
            labels: target.labels(&point.attributes, Some("le")),
            op: op(Value::Histogram(value)),
        });
    }
}

/// The point's buckets, when its bounds are finite and ascending and there is one
/// count more than bounds (or no counts at all: only the `+Inf` bucket).
fn histogram_value(point: &HistogramDataPoint) -> Option<HistogramValue> {
    let bounds = &point.explicit_bounds;
    let ascending = bounds.windows(2).all(|pair| match pair {
        [lower, upper] => lower < upper,
        _ => true,
    });
    if !ascending || bounds.iter().any(|bound| !bound.is_finite()) {
        return None;
    }
    let (bounds, counts) = if point.bucket_counts.is_empty() {
        (Vec::new(), vec![point.count])
    } else if point.bucket_counts.len() == bounds.len() + 1 {
        (bounds.clone(), point.bucket_counts.clone())
    } else {
        return None;
    };
    let exemplars = exemplars(point, &bounds);
    Some(HistogramValue {
        bounds,
        counts,
        sum: point.sum.unwrap_or(0.0),
        exemplars,
    })
}

/// Characters (names and values) an OpenMetrics exemplar's labels may have.
const MAX_EXEMPLAR_LABEL_CHARS: usize = 128;

/// A point's exemplars as Prometheus keeps them: the latest of each bucket (none at
/// all when the point has none), labelled with the trace and span ids, then the
/// filtered attributes, as many as fit in what OpenMetrics allows.
fn exemplars(point: &HistogramDataPoint, bounds: &[f64]) -> Vec<Option<Exemplar>> {
    if point.exemplars.is_empty() {
        return Vec::new();
    }
    let mut by_bucket = vec![None; bounds.len() + 1];
    for exemplar in &point.exemplars {
        let value = match exemplar.value {
            Some(exemplar::Value::AsDouble(value)) => value,
            Some(exemplar::Value::AsInt(value)) => value as f64,
            None => continue,
        };
        let ids = [
            ("trace_id", &exemplar.trace_id),
            ("span_id", &exemplar.span_id),
        ]
        .into_iter()
        .filter(|(_, id)| !id.is_empty())
        .map(|(name, id)| (name.to_string(), hex::encode(id)));
        let attributes = exemplar
            .filtered_attributes
            .iter()
            .map(|kv| (label_name(&kv.key), value_text(kv.value.as_ref())));
        let mut labels = Labels::new();
        let mut room = MAX_EXEMPLAR_LABEL_CHARS;
        for (name, text) in ids.chain(attributes) {
            let length = name.chars().count() + text.chars().count();
            let taken = labels.iter().any(|(known, _)| *known == name);
            if !text.is_empty() && !name.is_empty() && !taken && length <= room {
                room -= length;
                labels.push((name, text));
            }
        }
        labels.sort();
        let bucket = bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(bounds.len());
        if let Some(slot) = by_bucket.get_mut(bucket) {
            *slot = Some(Exemplar { labels, value });
        }
    }
    by_bucket
}

fn summaries(
    metric: &Metric,
    points: &[SummaryDataPoint],
    target: &Target<'_>,
    out: &mut MetricChanges,
) {
    let Some(family) = family(metric, Kind::Summary) else {
        out.unsupported += points.len() as u64;
        return;
    };
    for point in points.iter().filter(|p| !no_value(p.flags)) {
        let value = SummaryValue {
            quantiles: point
                .quantile_values
                .iter()
                .map(|q| (q.quantile, q.value))
                .collect(),
            sum: point.sum,
            count: point.count,
        };
        out.series.push(Change {
            family: Arc::clone(&family),
            labels: target.labels(&point.attributes, Some("quantile")),
            op: Op::Set(Value::Summary(value)),
        });
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let kv = attributes.iter().find(|kv| kv.key == key)?;
    Some(value_text(kv.value.as_ref()))
}

/// An attribute value as label text: strings as they are, other scalars as written
/// in OTLP/JSON, arrays and maps as JSON.
fn value_text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(text)) => text.clone(),
        None => String::new(),
        Some(_) => match json(value) {
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        },
    }
}

fn json(value: Option<&AnyValue>) -> serde_json::Value {
    use serde_json::Value as Json;
    match value.and_then(|v| v.value.as_ref()) {
        // A string-table index means nothing without the profile's table.
        None | Some(any_value::Value::StringValueStrindex(_)) => Json::Null,
        Some(any_value::Value::StringValue(text)) => Json::String(text.clone()),
        Some(any_value::Value::BoolValue(b)) => Json::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Json::from(*i),
        Some(any_value::Value::DoubleValue(d)) => Json::from(*d),
        Some(any_value::Value::BytesValue(bytes)) => Json::String(hex::encode(bytes)),
        Some(any_value::Value::ArrayValue(array)) => {
            Json::Array(array.values.iter().map(|v| json(Some(v))).collect())
        }
        Some(any_value::Value::KvlistValue(list)) => Json::Object(
            list.values
                .iter()
                .map(|kv| (kv.key.clone(), json(kv.value.as_ref())))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use opscope_proto::otlp::metrics::v1::{
        ExponentialHistogram, Gauge, Histogram, ResourceMetrics, ScopeMetrics, Sum, Summary,
        summary_data_point::ValueAtQuantile,
    };
    use opscope_proto::otlp::resource::v1::Resource;

    use super::*;
    use crate::prometheus::state::SeriesState;
    use crate::prometheus::store::SeriesLimits;
    use crate::prometheus::text;

    fn text_attribute(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.into())),
            }),
            ..KeyValue::default()
        }
    }

    fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![
                        text_attribute("service.name", "widget-operator"),
                        text_attribute("service.namespace", "operators"),
                        text_attribute("k8s.pod.name", "widget-operator-0"),
                        text_attribute("operator.name", "widget-operator"),
                    ],
                    ..Resource::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        }
    }

    fn metric(name: &str, unit: &str, data: Data) -> Metric {
        Metric {
            name: name.into(),
            description: format!("{name} help"),
            unit: unit.into(),
            data: Some(data),
            ..Metric::default()
        }
    }

    fn number(value: f64, attributes: Vec<KeyValue>) -> NumberDataPoint {
        NumberDataPoint {
            attributes,
            time_unix_nano: 1,
            value: Some(number_data_point::Value::AsDouble(value)),
            ..NumberDataPoint::default()
        }
    }

    fn sum(monotonic: bool, temporality: AggregationTemporality, value: f64) -> Data {
        Data::Sum(Sum {
            data_points: vec![number(value, Vec::new())],
            aggregation_temporality: temporality as i32,
            is_monotonic: monotonic,
        })
    }

    fn histogram(temporality: AggregationTemporality, counts: Vec<u64>) -> Data {
        Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                count: counts.iter().sum(),
                sum: Some(1.5),
                bucket_counts: counts,
                explicit_bounds: vec![0.1, 1.0],
                attributes: vec![text_attribute("le", "spoofed")],
                ..HistogramDataPoint::default()
            }],
            aggregation_temporality: temporality as i32,
        })
    }

    fn state() -> SeriesState {
        let limits = SeriesLimits {
            max_series: 1000,
            expiration: Duration::from_secs(300),
        };
        SeriesState::new("test", limits, &BTreeMap::new())
    }

    /// The sample lines of the text exposition after feeding the batches.
    fn exposed(state: &mut SeriesState, batches: &[ExportMetricsServiceRequest]) -> Vec<String> {
        for batch in batches {
            let changes = state.metric_changes(batch);
            state.apply(changes, Instant::now());
        }
        text::encode(state.store())
            .lines()
            .filter(|line| !line.starts_with('#'))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn gauges_and_sums_by_monotonicity_and_temporality() {
        use AggregationTemporality::{Cumulative, Delta};
        let attributes = vec![
            text_attribute("queue.name", "widgets"),
            text_attribute("0.odd-key", "x"),
        ];
        let batch = |depth, total, delta, updown| {
            request(vec![
                metric(
                    "workqueue.depth",
                    "{item}",
                    Data::Gauge(Gauge {
                        data_points: vec![number(depth, attributes.clone())],
                    }),
                ),
                metric("http.requests", "{request}", sum(true, Cumulative, total)),
                metric("reconcile.errors", "", sum(true, Delta, delta)),
                metric("inflight", "", sum(false, Delta, updown)),
                metric("cache.size", "By", sum(false, Cumulative, 10.0)),
            ])
        };
        let mut state = state();
        let lines = exposed(
            &mut state,
            &[batch(3.0, 10.0, 2.0, 1.0), batch(4.0, 12.0, 5.0, -1.0)],
        );
        let expected = [
            r#"cache_size_bytes{instance="widget-operator-0",job="operators/widget-operator"} 10"#,
            r#"http_requests_total{instance="widget-operator-0",job="operators/widget-operator"} 12"#,
            r#"inflight{instance="widget-operator-0",job="operators/widget-operator"} 0"#,
            r#"reconcile_errors_total{instance="widget-operator-0",job="operators/widget-operator"} 7"#,
            r#"target_info{instance="widget-operator-0",job="operators/widget-operator",k8s_pod_name="widget-operator-0",operator_name="widget-operator"} 1"#,
            r#"workqueue_depth{instance="widget-operator-0",job="operators/widget-operator",key_0_odd_key="x",queue_name="widgets"} 4"#,
        ];
        assert_eq!(lines, expected);
    }

    /// The kernel probe's sums of an operator pod, named as the dashboard's connection
    /// failure and send rate panels read them: by `instance` (the pod), joined to
    /// `target_info` for the operator.
    #[test]
    fn the_kernel_probes_sums_have_the_names_the_dashboard_reads() {
        use AggregationTemporality::Cumulative;
        let outcome =
            |outcome: &str, value| number(value, vec![text_attribute("outcome", outcome)]);
        let mut batch = request(vec![
            metric(
                "opscope.ebpf.api_server.connections",
                "{connection}",
                Data::Sum(Sum {
                    data_points: vec![outcome("established", 2.0), outcome("refused", 7.0)],
                    aggregation_temporality: Cumulative as i32,
                    is_monotonic: true,
                }),
            ),
            metric(
                "opscope.ebpf.api_server.send_calls",
                "{call}",
                sum(true, Cumulative, 1000.0),
            ),
            metric(
                "opscope.ebpf.api_server.sent_bytes",
                "By",
                sum(true, Cumulative, 412_000.0),
            ),
        ]);
        if let Some(resource) = batch.resource_metrics[0].resource.as_mut() {
            resource.attributes = vec![
                text_attribute("k8s.namespace.name", "operators"),
                text_attribute("k8s.pod.name", "widget-operator-0"),
                text_attribute("k8s.container.name", "manager"),
                text_attribute("operator.name", "widget-operator"),
            ];
        }
        let lines = exposed(&mut state(), &[batch]);
        let expected = [
            r#"opscope_ebpf_api_server_connections_total{instance="widget-operator-0",outcome="established"} 2"#,
            r#"opscope_ebpf_api_server_connections_total{instance="widget-operator-0",outcome="refused"} 7"#,
            r#"opscope_ebpf_api_server_send_calls_total{instance="widget-operator-0"} 1000"#,
            r#"opscope_ebpf_api_server_sent_bytes_total{instance="widget-operator-0"} 412000"#,
            r#"target_info{instance="widget-operator-0",k8s_container_name="manager",k8s_namespace_name="operators",k8s_pod_name="widget-operator-0",operator_name="widget-operator"} 1"#,
        ];
        assert_eq!(lines, expected);
    }

    #[test]
    fn histograms_cumulative_and_delta() {
        let mut state = state();
        let lines = exposed(
            &mut state,
            &[
                request(vec![metric(
                    "rpc.duration",
                    "s",
                    histogram(AggregationTemporality::Delta, vec![1, 2, 0]),
                )]),
                request(vec![metric(
                    "rpc.duration",
                    "s",
                    histogram(AggregationTemporality::Delta, vec![0, 1, 1]),
                )]),
                request(vec![metric(
                    "db.duration",
                    "ms",
                    histogram(AggregationTemporality::Cumulative, vec![4, 0, 1]),
                )]),
            ],
        );
        let series = r#"instance="widget-operator-0",job="operators/widget-operator""#;
        let expected: Vec<String> = [
            format!(r#"db_duration_milliseconds_bucket{{{series},le="0.1"}} 4"#),
            format!(r#"db_duration_milliseconds_bucket{{{series},le="1"}} 4"#),
            format!(r#"db_duration_milliseconds_bucket{{{series},le="+Inf"}} 5"#),
            format!(r#"db_duration_milliseconds_sum{{{series}}} 1.5"#),
            format!(r#"db_duration_milliseconds_count{{{series}}} 5"#),
            format!(r#"rpc_duration_seconds_bucket{{{series},le="0.1"}} 1"#),
            format!(r#"rpc_duration_seconds_bucket{{{series},le="1"}} 4"#),
            format!(r#"rpc_duration_seconds_bucket{{{series},le="+Inf"}} 5"#),
            format!(r#"rpc_duration_seconds_sum{{{series}}} 3"#),
            format!(r#"rpc_duration_seconds_count{{{series}}} 5"#),
        ]
        .into_iter()
        .collect();
        let histograms: Vec<_> = lines
            .into_iter()
            .filter(|l| !l.starts_with("target_info"))
            .collect();
        assert_eq!(histograms, expected);
    }

    #[test]
    fn summaries_keep_their_quantiles() {
        let summary = Data::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                count: 30,
                sum: 1.5,
                quantile_values: vec![
                    ValueAtQuantile {
                        quantile: 0.5,
                        value: 0.01,
                    },
                    ValueAtQuantile {
                        quantile: 0.99,
                        value: 0.2,
                    },
                ],
                ..SummaryDataPoint::default()
            }],
        });
        let mut state = state();
        let lines = exposed(
            &mut state,
            &[request(vec![metric("gc.pause", "s", summary)])],
        );
        let series = r#"instance="widget-operator-0",job="operators/widget-operator""#;
        assert_eq!(
            lines
                .into_iter()
                .filter(|l| l.starts_with("gc_"))
                .collect::<Vec<_>>(),
            vec![
                format!(r#"gc_pause_seconds{{{series},quantile="0.5"}} 0.01"#),
                format!(r#"gc_pause_seconds{{{series},quantile="0.99"}} 0.2"#),
                format!(r#"gc_pause_seconds_sum{{{series}}} 1.5"#),
                format!(r#"gc_pause_seconds_count{{{series}}} 30"#),
            ]
        );
    }

    #[test]
    fn points_without_a_prometheus_form_are_counted() {
        let unspecified = sum(true, AggregationTemporality::Unspecified, 1.0);
        let exponential = Data::ExponentialHistogram(ExponentialHistogram {
            data_points: vec![Default::default(), Default::default()],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        });
        let mut malformed = histogram(AggregationTemporality::Cumulative, vec![1, 2]);
        if let Data::Histogram(h) = &mut malformed {
            h.data_points.push(HistogramDataPoint {
                explicit_bounds: vec![2.0, 1.0],
                bucket_counts: vec![0, 0, 0],
                ..HistogramDataPoint::default()
            });
        }
        let no_value = Data::Gauge(Gauge {
            data_points: vec![NumberDataPoint {
                flags: DataPointFlags::NoRecordedValueMask as u32,
                ..number(1.0, Vec::new())
            }],
        });
        let batch = request(vec![
            metric("a", "", unspecified),
            metric("b", "", exponential),
            metric("c", "", malformed),
            metric("d", "", no_value),
            metric(
                "...",
                "",
                sum(true, AggregationTemporality::Cumulative, 1.0),
            ),
        ]);
        let converted = metric_changes(&batch, &Labels::new());
        assert_eq!(converted.unsupported, 6);
        let names: Vec<_> = converted
            .series
            .iter()
            .map(|c| c.family.name.as_str())
            .collect();
        assert_eq!(names, vec!["target"]);
    }

    #[test]
    fn attribute_values_become_label_text() {
        let values = [
            (any_value::Value::BoolValue(true), "true"),
            (any_value::Value::IntValue(42), "42"),
            (any_value::Value::DoubleValue(0.5), "0.5"),
            (any_value::Value::BytesValue(vec![0xab, 0x01]), "ab01"),
        ];
        for (value, text) in values {
            let any = AnyValue { value: Some(value) };
            assert_eq!(value_text(Some(&any)), text);
        }
        let array = AnyValue {
            value: Some(any_value::Value::ArrayValue(
                opscope_proto::otlp::common::v1::ArrayValue {
                    values: vec![AnyValue {
                        value: Some(any_value::Value::StringValue("a".into())),
                    }],
                },
            )),
        };
        assert_eq!(value_text(Some(&array)), r#"["a"]"#);
    }
}
