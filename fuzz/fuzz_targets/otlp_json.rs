//! OTLP/JSON export request bodies: read as traces, logs and metrics each (a JSON
//! body names no signal; the path does), and what decodes goes through the
//! pipeline's processing.

#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope::fuzzing::OtlpHttpFormat;
use opscope::fuzzing::WithinLimits;
use opscope_fuzz::process;
use opscope_model::Telemetry;
use opscope_processors::{CorrelatorEvents, Taggable};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;

fn decode_and_process<T: Telemetry + Taggable + CorrelatorEvents + WithinLimits>(body: &[u8]) {
    if let Ok(request) = OtlpHttpFormat::Json.decode::<T>(body) {
        process(request);
    }
}

fuzz_target!(|data: &[u8]| {
    decode_and_process::<ExportTraceServiceRequest>(data);
    decode_and_process::<ExportLogsServiceRequest>(data);
    decode_and_process::<ExportMetricsServiceRequest>(data);
});
