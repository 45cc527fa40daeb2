//! The `loadbalancing` exporter's cut of an encoded request, on any bytes: the first
//! byte picks spans or log records, the rest is the request. It must never panic;
//! when it cuts, every part decodes and the parts hold as many records as the
//! request decodes into.

#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_exporters::loadbalancing::Ring;
use opscope_exporters::loadbalancing::wire::{self, LOG_RECORDS, RecordLayout, SPANS};
use opscope_model::Telemetry;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;

fn cut<T: Telemetry>(request: &[u8], layout: RecordLayout) {
    let ring = Ring::new(&["10.0.0.5:4317", "10.0.0.6:4317", "10.0.0.7:4317"]);
    let Ok(parts) = wire::split(request, layout, &ring, &|_| true) else {
        return;
    };
    let mut records = 0;
    for (bytes, count) in &parts {
        let part = T::decode(&bytes[..]).expect("a part of a cut request decodes");
        assert_eq!(part.item_count(), *count);
        records += count;
    }
    if let Ok(whole) = T::decode(request) {
        assert_eq!(records, whole.item_count(), "every record goes to one part");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&signal, request)) = data.split_first() else {
        return;
    };
    if signal % 2 == 0 {
        cut::<ExportTraceServiceRequest>(request, SPANS);
    } else {
        cut::<ExportLogsServiceRequest>(request, LOG_RECORDS);
    }
});
