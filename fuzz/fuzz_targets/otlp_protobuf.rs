//! OTLP export requests as protobuf (the gRPC and OTLP/HTTP body): the first byte
//! picks traces, logs or metrics, the rest is decoded the way the receivers decode
//! it; what decodes goes through the pipeline's processing, and the census read off
//! its bytes before decoding covers what it decoded into.

#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope::fuzzing::WithinLimits;
use opscope::fuzzing::{Census, OtlpHttpFormat, WireFormat};
use opscope_fuzz::process;
use opscope_model::Telemetry;
use opscope_processors::{CorrelatorEvents, Taggable};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;

fn decode_and_process<T: Telemetry + Taggable + CorrelatorEvents + WithinLimits>(body: &[u8]) {
    let census = Census::of(T::KIND, WireFormat::Protobuf, body);
    if let Ok(request) = OtlpHttpFormat::Protobuf.decode::<T>(body) {
        let census = census.expect("what prost decodes has a census");
        assert!(census.items >= request.item_count() as u64);
        assert!(census.decoded_bytes >= request.memory_size());
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
