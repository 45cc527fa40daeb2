//! OTLP export requests as protobuf (the gRPC and OTLP/HTTP body): the first byte
//! picks traces, logs or metrics, the rest is decoded the way the receivers decode
//! it; what decodes goes through the pipeline's processing.

#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope::fuzzing::OtlpHttpFormat;
use opscope::fuzzing::WithinLimits;
use opscope_fuzz::process;
use opscope_processors::Telemetry;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;

fn decode_and_process<T: Telemetry + WithinLimits>(body: &[u8]) {
    if let Ok(request) = OtlpHttpFormat::Protobuf.decode::<T>(body) {
        process(request);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&signal, body)) = data.split_first() else {
        return;
    };
    match signal % 3 {
        0 => decode_and_process::<ExportTraceServiceRequest>(body),
        1 => decode_and_process::<ExportLogsServiceRequest>(body),
        _ => decode_and_process::<ExportMetricsServiceRequest>(body),
    }
});
