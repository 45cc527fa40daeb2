//! The three OTLP/gRPC export services (traces, logs, metrics) over one handler, for
//! the test and benchmark servers that stand in for a downstream: each says only
//! what it does with a request, not how the services are wired.

use std::future::Future;
use std::sync::Arc;

use opscope_proto::otlp::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opscope_proto::otlp::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opscope_proto::otlp::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opscope_proto::otlp::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opscope_proto::otlp::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opscope_proto::otlp::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::codec::CompressionEncoding;
use tonic::transport::Server;
use tonic::transport::server::Router;
use tonic::{Request, Response, Status};

/// What a server does with each export request; an error is the gRPC answer.
pub trait ExportHandler: Send + Sync + 'static {
    fn traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> impl Future<Output = Result<(), Status>> + Send;
    fn logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> impl Future<Output = Result<(), Status>> + Send;
    fn metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> impl Future<Output = Result<(), Status>> + Send;
}

/// The three services over `handler`, gzip and zstd accepted, requests of up to
/// `max_message_size` bytes: serve the router with `serve_with_incoming`.
pub fn export_services<H: ExportHandler>(handler: Arc<H>, max_message_size: usize) -> Router {
    let services = Arc::new(Services(handler));
    Server::builder()
        .add_service(
            TraceServiceServer::from_arc(Arc::clone(&services))
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(max_message_size),
        )
        .add_service(
            LogsServiceServer::from_arc(Arc::clone(&services))
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(max_message_size),
        )
        .add_service(
            MetricsServiceServer::from_arc(services)
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(max_message_size),
        )
}

struct Services<H>(Arc<H>);

#[tonic::async_trait]
impl<H: ExportHandler> TraceService for Services<H> {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        self.0.traces(request.into_inner()).await?;
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl<H: ExportHandler> LogsService for Services<H> {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        self.0.logs(request.into_inner()).await?;
        Ok(Response::new(ExportLogsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl<H: ExportHandler> MetricsService for Services<H> {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        self.0.metrics(request.into_inner()).await?;
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}
