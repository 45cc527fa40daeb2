//! What the OTLP protocol says about each export request: the service answering it,
//! the paths it is sent to over gRPC and HTTP, and how its answer reports items the
//! receiver refused.

use prost::Message;
use serde::Serialize;

use crate::otlp::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use crate::otlp::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use crate::otlp::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};

/// An OTLP export request, as the export service of its signal type sees it.
pub trait ExportService: Message + Default {
    /// The OTLP response message answered for this request.
    type Response: Message + Default + Serialize + Send + 'static;

    /// gRPC method path of the OTLP export call.
    const GRPC_PATH: &'static str;
    /// OTLP/HTTP path of the export call.
    const HTTP_PATH: &'static str;

    /// Items a destination refused although it answered success (OTLP partial
    /// success), with its message.
    fn rejected_items(response: &Self::Response) -> (u64, String);
}

/// Implements [`ExportService`] for one request type.
macro_rules! export_service {
    ($request:ty, $response:ty, $rejected:ident, $grpc:expr, $http:expr) => {
        impl ExportService for $request {
            type Response = $response;

            const GRPC_PATH: &'static str = $grpc;
            const HTTP_PATH: &'static str = $http;

            fn rejected_items(response: &$response) -> (u64, String) {
                response
                    .partial_success
                    .as_ref()
                    .map_or((0, String::new()), |partial| {
                        (
                            u64::try_from(partial.$rejected).unwrap_or(0),
                            partial.error_message.clone(),
                        )
                    })
            }
        }
    };
}

export_service!(
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
    rejected_spans,
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "/v1/traces"
);
export_service!(
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
    rejected_log_records,
    "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "/v1/logs"
);
export_service!(
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
    rejected_data_points,
    "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    "/v1/metrics"
);
