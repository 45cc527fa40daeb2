//! One round of the probe's counts as OTLP metrics: a resource per pod container (or
//! host cgroup), cumulative monotonic sums from when the receiver first saw it.

use opscope_model::semconv::{K8S_CONTAINER_NAME, K8S_NAMESPACE_NAME, K8S_POD_NAME};
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::common::v1::{InstrumentationScope, KeyValue};
use opscope_proto::otlp::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point,
};
use opscope_proto::otlp::resource::v1::Resource;

use super::counts::Counts;
use super::owners::Owner;
use crate::receivers::filelog::pod::{K8S_POD_UID, string_attribute};

pub const SCOPE: &str = "opscope.ebpf";
pub const CONNECTIONS: &str = "opscope.ebpf.api_server.connections";
pub const SENT_BYTES: &str = "opscope.ebpf.api_server.sent_bytes";
pub const SEND_CALLS: &str = "opscope.ebpf.api_server.send_calls";
pub const FORKS: &str = "opscope.ebpf.process.forks";
pub const ENOSPC: &str = "opscope.ebpf.write.enospc";

const CONTAINER_ID: &str = "container.id";
const SERVICE_INSTANCE_ID: &str = "service.instance.id";
const PROCESS_EXECUTABLE_NAME: &str = "process.executable.name";
/// A host cgroup's path: no semantic convention names it.
const CGROUP_PATH: &str = "opscope.cgroup.path";

/// One cgroup's totals and whose they are.
pub struct CgroupReport<'a> {
    pub owner: &'a Owner,
    pub counts: &'a Counts,
    /// When the receiver first saw the cgroup, in nanoseconds since the epoch.
    pub start: u64,
}

/// The round's request, taken at `now`; `None` when nothing is reported.
pub fn to_request(reports: &[CgroupReport], now: u64) -> Option<ExportMetricsServiceRequest> {
    let resource_metrics: Vec<ResourceMetrics> = reports
        .iter()
        .map(|report| ResourceMetrics {
            resource: Some(resource(report)),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: SCOPE.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics: metrics(report.counts, report.start, now),
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    (!resource_metrics.is_empty()).then_some(ExportMetricsServiceRequest { resource_metrics })
}

/// Data points in a request: what a receiver counts as accepted.
pub fn point_count(request: &ExportMetricsServiceRequest) -> usize {
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Sum(sum)) => sum.data_points.len(),
            _ => 0,
        })
        .sum()
}

fn resource(report: &CgroupReport) -> Resource {
    let mut attributes = Vec::new();
    match report.owner {
        Owner::Pod {
            namespace,
            pod,
            uid,
            container_id,
            container,
        } => {
            attributes.push(string_attribute(K8S_NAMESPACE_NAME, namespace));
            attributes.push(string_attribute(K8S_POD_NAME, pod));
            attributes.push(string_attribute(K8S_POD_UID, uid));
            if let Some(id) = container_id {
                attributes.push(string_attribute(CONTAINER_ID, id));
            }
            if let Some(name) = container {
                attributes.push(string_attribute(K8S_CONTAINER_NAME, name));
            }
            // One instance per container, as the semantic conventions suggest for
            // Kubernetes: the Prometheus exporters' `instance`, so that two containers
            // of a pod (an operator and its kube-rbac-proxy) are two series.
            let container = container
                .as_deref()
                .or(container_id.as_deref())
                .unwrap_or("");
            attributes.push(string_attribute(
                SERVICE_INSTANCE_ID,
                &format!("{namespace}.{pod}.{container}"),
            ));
        }
        Owner::Host { cgroup } => {
            attributes.push(string_attribute(CGROUP_PATH, cgroup));
            if !report.counts.command.is_empty() {
                attributes.push(string_attribute(
                    PROCESS_EXECUTABLE_NAME,
                    &report.counts.command,
                ));
            }
        }
    }
    Resource {
        attributes,
        ..Default::default()
    }
}

fn metrics(counts: &Counts, start: u64, now: u64) -> Vec<Metric> {
    let point = |attributes: Vec<KeyValue>, value: u64| NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(number_data_point::Value::AsInt(
            i64::try_from(value).unwrap_or(i64::MAX),
        )),
        ..Default::default()
    };
    let outcomes = counts
        .outcomes()
        .into_iter()
        .map(|(outcome, value)| point(vec![string_attribute("outcome", outcome)], value))
        .collect();
    vec![
        sum(
            CONNECTIONS,
            "TCP connections to the API server, by how they ended their handshake or were reset",
            "{connection}",
            outcomes,
        ),
        sum(
            SENT_BYTES,
            "Bytes sent to the API server",
            "By",
            vec![point(Vec::new(), counts.sent_bytes)],
        ),
        sum(
            SEND_CALLS,
            "Send calls on connections to the API server",
            "{call}",
            vec![point(Vec::new(), counts.send_calls)],
        ),
        sum(
            FORKS,
            "Processes and threads created",
            "{process}",
            vec![point(Vec::new(), counts.forks)],
        ),
        sum(
            ENOSPC,
            "Writes that failed with ENOSPC (no space left on device)",
            "{call}",
            vec![point(Vec::new(), counts.enospc)],
        ),
    ]
}

fn sum(name: &str, description: &str, unit: &str, data_points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        description: description.into(),
        unit: unit.into(),
        data: Some(Data::Sum(Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use opscope_model::attributes::get_str;

    use super::*;

    #[test]
    fn a_pod_containers_counts_become_cumulative_sums() {
        let owner = Owner::Pod {
            namespace: "widget-system".into(),
            pod: "widget-operator-5f7d".into(),
            uid: "7d4424e6-bb13-42f4-a47a-45a4828bf54d".into(),
            container_id: Some("d0b3".into()),
            container: Some("manager".into()),
        };
        let counts = Counts {
            established: 250,
            refused: 250,
            sent_bytes: 4096,
            send_calls: 64,
            forks: 200,
            enospc: 3,
            ..Default::default()
        };
        let request = to_request(
            &[CgroupReport {
                owner: &owner,
                counts: &counts,
                start: 1,
            }],
            2,
        )
        .unwrap();
        assert_eq!(point_count(&request), 9);
        let resource = request.resource_metrics[0].resource.as_ref().unwrap();
        assert_eq!(
            get_str(&resource.attributes, K8S_POD_NAME),
            Some("widget-operator-5f7d")
        );
        assert_eq!(
            get_str(&resource.attributes, K8S_CONTAINER_NAME),
            Some("manager")
        );
        let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
        let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, [CONNECTIONS, SENT_BYTES, SEND_CALLS, FORKS, ENOSPC]);
        let Some(Data::Sum(connections)) = &metrics[0].data else {
            panic!("a sum")
        };
        assert!(connections.is_monotonic);
        let refused = &connections.data_points[1];
        assert_eq!(get_str(&refused.attributes, "outcome"), Some("refused"));
        assert_eq!(refused.value, Some(number_data_point::Value::AsInt(250)));
        assert_eq!(
            (refused.start_time_unix_nano, refused.time_unix_nano),
            (1, 2)
        );
        assert_eq!(to_request(&[], 2), None);
    }
}
