//! Property tests of OTLP/HTTP request decoding: protobuf and JSON bodies of fixture
//! requests mutated are refused or decoded, and what decodes is tagged without panic.

use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_testkit::mutate::mutated_bytes;
use proptest::prelude::*;

use super::*;
use crate::consumer::OtlpBatch;

const TRACES: &[&str] = &[
    include_str!("../../../../processors/tests/fixtures/otlp/kube_rs_reconcile_trace.json"),
    include_str!("../../../../processors/tests/fixtures/spans/kube_apiserver_handlers.json"),
    include_str!("../../../../processors/tests/fixtures/spans/malformed_attributes.json"),
    include_str!(
        "../../../../processors/tests/fixtures/spans/otelhttp_client_old_conventions.json"
    ),
    include_str!(
        "../../../../processors/tests/fixtures/spans/otelhttp_client_status_patch_409.json"
    ),
];
const LOGS: &[&str] = &[include_str!(
    "../../../../processors/tests/fixtures/otlp/controller_runtime_otel_bridge_logs.json"
)];
const METRICS: &[&str] = &[include_str!(
    "../../../../processors/tests/fixtures/otlp/controller_runtime_metrics.json"
)];

/// The fixture requests as JSON and as protobuf bodies.
fn seeds<T: OtlpBatch>(documents: &[&str]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let requests: Vec<T> = documents
        .iter()
        .map(|document| {
            serde_json::from_str(document)
                .unwrap_or_else(|e| panic!("a fixture request does not decode: {e}"))
        })
        .collect();
    let json = documents.iter().map(|d| d.as_bytes().to_vec()).collect();
    let protobuf = requests.iter().map(Message::encode_to_vec).collect();
    (json, protobuf)
}

/// A body of either format, mutated, with the format it claims to be.
fn body<T: OtlpBatch>(documents: &[&str]) -> impl Strategy<Value = (Format, Vec<u8>)> {
    let (json, protobuf) = seeds::<T>(documents);
    prop_oneof![
        mutated_bytes(json).prop_map(|body| (Format::Json, body)),
        mutated_bytes(protobuf).prop_map(|body| (Format::Protobuf, body)),
        proptest::collection::vec(any::<u8>(), 0..256).prop_map(|body| (Format::Protobuf, body)),
    ]
}

fn tagger() -> OperatorTagger {
    OperatorTagger::new(&TaggerConfig::default())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn trace_bodies_decode_or_are_refused((format, body) in body::<ExportTraceServiceRequest>(TRACES)) {
        if let Ok(mut request) = format.decode::<ExportTraceServiceRequest>(&body) {
            tagger().tag_traces(&mut request);
        }
    }

    #[test]
    fn log_bodies_decode_or_are_refused((format, body) in body::<ExportLogsServiceRequest>(LOGS)) {
        if let Ok(mut request) = format.decode::<ExportLogsServiceRequest>(&body) {
            tagger().tag_logs(&mut request);
        }
    }

    #[test]
    fn metric_bodies_decode_or_are_refused((format, body) in body::<ExportMetricsServiceRequest>(METRICS)) {
        if let Ok(mut request) = format.decode::<ExportMetricsServiceRequest>(&body) {
            tagger().tag_metrics(&mut request);
        }
    }
}
