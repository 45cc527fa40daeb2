//! opscope's internal markers on what clients send. A resource attribute such as
//! `opscope.handed_over` (and the journal it names) makes a gateway's correlator
//! take records whatever their
//! age; only a peer gateway's hand-over may carry it. Every OTLP receiver removes
//! them from what it takes, but one set `accept_handover: true`: a gateway's, which
//! only the agents (that removed them already) and the other gateways can reach.

use opscope_model::semconv::{HANDED_OVER, HANDED_OVER_JOURNAL, HANDED_OVER_SEQUENCE};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::resource::v1::Resource;

/// The resource attributes only opscope itself may set.
const INTERNAL_MARKERS: [&str; 3] = [HANDED_OVER, HANDED_OVER_JOURNAL, HANDED_OVER_SEQUENCE];

pub trait InternalMarkers {
    /// Removes opscope's internal markers; returns how many resources carried one.
    fn remove_internal_markers(&mut self) -> usize;
}

fn remove_from(resource: Option<&mut Resource>) -> usize {
    let Some(resource) = resource else {
        return 0;
    };
    let before = resource.attributes.len();
    resource
        .attributes
        .retain(|attribute| !INTERNAL_MARKERS.contains(&attribute.key.as_str()));
    usize::from(resource.attributes.len() != before)
}

impl InternalMarkers for ExportTraceServiceRequest {
    fn remove_internal_markers(&mut self) -> usize {
        (self.resource_spans.iter_mut())
            .map(|resource_spans| remove_from(resource_spans.resource.as_mut()))
            .sum()
    }
}

impl InternalMarkers for ExportLogsServiceRequest {
    fn remove_internal_markers(&mut self) -> usize {
        (self.resource_logs.iter_mut())
            .map(|resource_logs| remove_from(resource_logs.resource.as_mut()))
            .sum()
    }
}

impl InternalMarkers for ExportMetricsServiceRequest {
    fn remove_internal_markers(&mut self) -> usize {
        (self.resource_metrics.iter_mut())
            .map(|resource_metrics| remove_from(resource_metrics.resource.as_mut()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use opscope_model::attributes::{get_bool, set};
    use opscope_proto::otlp::common::v1::any_value::Value;
    use opscope_proto::otlp::trace::v1::ResourceSpans;

    use super::*;

    #[test]
    fn the_hand_over_marker_is_removed_and_other_attributes_stay() {
        let mut resource = Resource::default();
        set(
            &mut resource.attributes,
            HANDED_OVER,
            Value::BoolValue(true),
        );
        set(
            &mut resource.attributes,
            "service.name",
            Value::StringValue("operator".into()),
        );
        let mut request = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: Some(resource),
                    ..ResourceSpans::default()
                },
                ResourceSpans::default(),
            ],
        };
        assert_eq!(request.remove_internal_markers(), 1);
        let attributes = &request.resource_spans[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes;
        assert_eq!(get_bool(attributes, HANDED_OVER), None);
        assert_eq!(attributes.len(), 1);
        assert_eq!(request.remove_internal_markers(), 0);
    }
}
