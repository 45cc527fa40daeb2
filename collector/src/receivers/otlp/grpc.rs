//! OTLP/gRPC: the three `Export` services, gzip and zstd accepted, requests above
//! the size limit answered RESOURCE_EXHAUSTED, new requests answered UNAVAILABLE
//! while a memory limiter is above its soft limit.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::State;
use axum::middleware::{Next, from_fn_with_state};
use opscope_model::TelemetryKind;
use opscope_proto::ExportService as _;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding;
use tonic::service::Routes;
use tonic::service::interceptor::InterceptedService;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::grpc_service::{Admitted, Export, ExportServer};
use super::internal_markers::InternalMarkers;
use super::refusal_message;
use crate::consumer::{Consumer, OtlpBatch, Refusal};
use crate::receivers::ReceiverContext;
use crate::receivers::common::auth::GrpcGuard;
use crate::receivers::common::body_memory::{BodyMemory, Framing};
use crate::receivers::common::decode_budget::{self, Admission, Refused, WireFormat};
use crate::receivers::common::input_limits::{InputLimits, WithinLimits};
use crate::receivers::common::server::{ServerSecurity, server};
use crate::self_telemetry::ReceiverMetrics;
use opscope_net::server_tls::ConnectionSettings;

/// The part of the memory budget (the soft limit) one connection's arriving
/// messages may hold.
const CONNECTION_SHARE: u64 = 4;

/// How long a refused client is asked to wait before retrying.
const RETRY_DELAY: Duration = Duration::from_secs(1);

struct ExportService<T> {
    consumer: Consumer<T>,
    metrics: ReceiverMetrics,
    limits: InputLimits,
    accept_handover: bool,
}

impl<T: OtlpBatch + WithinLimits + InternalMarkers> ExportService<T> {
    fn new(
        consumer: Consumer<T>,
        limits: InputLimits,
        accept_handover: bool,
        context: &ReceiverContext,
    ) -> Self {
        let metrics = context.telemetry.receiver(T::KIND, &context.id, "grpc");
        Self {
            consumer,
            metrics,
            limits,
            accept_handover,
        }
    }

    /// Refuses a request before it is decoded when it is undecodable, over the
    /// budget of what it may decode into, or would take the memory limiter over.
    fn admit_bytes(&self, message: &[u8]) -> Result<Admission, Status> {
        decode_budget::admit(WireFormat::Protobuf, message, &self.limits, &self.consumer).map_err(
            |refused| {
                match refused {
                    // Counted as a bad request by the status correction, as prost's are.
                    Refused::Undecodable(err) => {
                        Status::invalid_argument(format!("{UNDECODABLE}: {err}"))
                    }
                    Refused::OverBudget { reason, items } => {
                        self.metrics.refused("too_large", items);
                        Status::resource_exhausted(reason)
                    }
                    Refused::Memory { refusal, items } => {
                        self.metrics.refused(refusal.reason(), items);
                        refusal_status(refusal)
                    }
                }
            },
        )
    }

    async fn accept(
        &self,
        request: Request<Admitted<T, Admission>>,
    ) -> Result<Response<T::Response>, Status> {
        let Admitted {
            mut data,
            admission,
        } = request.into_inner();
        if !self.accept_handover {
            data.remove_internal_markers();
        }
        let items = data.item_count();
        if let Err(violation) = data.check_limits(&self.limits) {
            self.metrics.refused(violation.reason, items);
            return Err(Status::invalid_argument(violation.to_string()));
        }
        // The pipelines count the request from here on.
        drop(admission.hold);
        match self.consumer.deliver(data).await {
            Ok(()) => {
                self.metrics.accepted(items);
                Ok(Response::new(T::Response::default()))
            }
            Err(refusal) => {
                self.metrics.refused(refusal.reason(), items);
                Err(refusal_status(refusal))
            }
        }
    }
}

/// UNAVAILABLE with a retry delay is what OTLP clients retry; the other refusals
/// are not worth retrying against this receiver.
fn refusal_status(refusal: Refusal) -> Status {
    let message = refusal_message(refusal);
    if refusal.is_retryable() {
        Status::with_error_details(
            Code::Unavailable,
            message,
            ErrorDetails::with_retry_info(Some(RETRY_DELAY)),
        )
    } else {
        Status::unimplemented(message)
    }
}

impl<T: OtlpBatch + WithinLimits + InternalMarkers> Export<T> for ExportService<T> {
    type Admission = Admission;

    fn admit(&self, message: &[u8]) -> Result<Admission, Status> {
        self.admit_bytes(message)
    }

    async fn export(
        &self,
        request: Request<Admitted<T, Admission>>,
    ) -> Result<Response<T::Response>, Status> {
        self.accept(request).await
    }
}

/// The `Export` service of `T`, gzip and zstd accepted.
fn export_server<T: OtlpBatch + WithinLimits + InternalMarkers>(
    consumer: Consumer<T>,
    limits: InputLimits,
    accept_handover: bool,
    max_message_bytes: usize,
    context: &ReceiverContext,
) -> ExportServer<T, ExportService<T>> {
    let service = ExportService::new(consumer, limits, accept_handover, context);
    ExportServer::new(service, max_message_bytes)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
}

pub fn serve(
    listener: TcpListener,
    max_message_bytes: usize,
    limits: InputLimits,
    accept_handover: bool,
    security: ServerSecurity,
    mut connections: ConnectionSettings,
    context: &ReceiverContext,
) -> impl Future<Output = ()> + Send + 'static {
    let consumers = &context.consumers;
    // One connection's messages still arriving may hold a share of the memory
    // budget, not all of it: one client cannot starve the others (one message of the
    // largest size always fits).
    if let Some(memory) = BodyMemory::of(consumers) {
        let share = memory.soft_limit() / CONNECTION_SHARE;
        connections.max_arriving_bytes = Some(share.max(max_message_bytes as u64));
    }
    let guard = |kind| {
        let metrics = context.telemetry.receiver(kind, &context.id, "grpc");
        GrpcGuard::new(security.authenticator.as_ref(), metrics)
    };
    let traces = export_server(
        consumers.traces.clone(),
        limits.clone(),
        accept_handover,
        max_message_bytes,
        context,
    );
    let logs = export_server(
        consumers.logs.clone(),
        limits.clone(),
        accept_handover,
        max_message_bytes,
        context,
    );
    let metrics = export_server(
        consumers.metrics.clone(),
        limits,
        accept_handover,
        max_message_bytes,
        context,
    );
    let receiver_metrics =
        TelemetryKind::ALL.map(|kind| context.telemetry.receiver(kind, &context.id, "grpc"));
    let corrections = StatusCorrectionLayer {
        metrics: receiver_metrics.clone(),
    };
    // The guards run on the request's headers, before its message is read.
    let mut routes = Routes::builder();
    routes
        .add_service(InterceptedService::new(
            traces,
            guard(TelemetryKind::Traces),
        ))
        .add_service(InterceptedService::new(logs, guard(TelemetryKind::Logs)))
        .add_service(InterceptedService::new(
            metrics,
            guard(TelemetryKind::Metrics),
        ));
    let mut router = routes.routes().into_axum_router().layer(corrections);
    if let Some(memory) = BodyMemory::of(consumers) {
        let gate = MemoryGate {
            memory,
            metrics: receiver_metrics,
        };
        router = router.layer(from_fn_with_state(gate, admit));
    }
    let server = server(context, "grpc", security.tls, connections);
    server.serve(listener, router, context.shutdown.clone().cancelled_owned())
}

/// What admits a request's message into memory.
#[derive(Clone)]
struct MemoryGate {
    memory: BodyMemory,
    metrics: [ReceiverMetrics; 3],
}

/// Refuses a new request while a memory limiter is above its soft limit, and
/// counts the message of an admitted one as it arrives: refused, and the bytes
/// let go, when it would take the process over the soft limit.
async fn admit(
    State(gate): State<MemoryGate>,
    request: axum::extract::Request,
    next: Next,
) -> axum::response::Response {
    let metrics = kind_of_path(request.uri().path()).map(|kind| kind.of(&gate.metrics).clone());
    let refused = move || {
        if let Some(metrics) = &metrics {
            metrics.refused(Refusal::MemoryLimit.reason(), 0);
        }
        refusal_status(Refusal::MemoryLimit)
    };
    if !gate.memory.admits(0) {
        return refused().into_http::<axum::body::Body>();
    }
    let request = request.map(|body| {
        let counted = gate
            .memory
            .count(body, Framing::Grpc, move || Box::new(refused()));
        axum::body::Body::new(counted)
    });
    next.run(request).await
}

/// Answers over-size requests RESOURCE_EXHAUSTED and undecodable ones
/// INVALID_ARGUMENT, as OTLP asks, and counts them: tonic refuses both (with
/// OUT_OF_RANGE and INTERNAL) before any service code runs, so the status is
/// corrected on the way out.
#[derive(Clone)]
struct StatusCorrectionLayer {
    metrics: [ReceiverMetrics; 3],
}

impl<S> tower_layer::Layer<S> for StatusCorrectionLayer {
    type Service = StatusCorrection<S>;

    fn layer(&self, inner: S) -> StatusCorrection<S> {
        StatusCorrection {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
struct StatusCorrection<S> {
    inner: S,
    metrics: [ReceiverMetrics; 3],
}

const GRPC_STATUS: &str = "grpc-status";
const TOO_LARGE_FRAME: &str = "Error, decoded message length too large";
const TOO_LARGE_DECOMPRESSED: &str = "Error decompressing: size limit";
const UNDECODABLE: &str = "failed to decode Protobuf message";

/// The status OTLP asks for, and the refusal reason, for a request tonic refused
/// before any service code ran.
fn corrected_status(message: &str) -> Option<(Code, &'static str)> {
    if message.starts_with(TOO_LARGE_FRAME) || message.starts_with(TOO_LARGE_DECOMPRESSED) {
        Some((Code::ResourceExhausted, "too_large"))
    } else if message.starts_with(UNDECODABLE) {
        Some((Code::InvalidArgument, "bad_request"))
    } else {
        None
    }
}

impl<S, B, R> tower_service::Service<http::Request<B>> for StatusCorrection<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let metrics = kind_of_path(request.uri().path()).map(|kind| kind.of(&self.metrics).clone());
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut response = response.await?;
            let headers = response.headers_mut();
            let message = headers
                .get("grpc-message")
                .and_then(|m| m.to_str().ok())
                .unwrap_or_default();
            let decoded = percent_encoding::percent_decode_str(message).decode_utf8_lossy();
            if let Some((code, reason)) = corrected_status(&decoded) {
                headers.insert(GRPC_STATUS, http::HeaderValue::from(code as i32));
                if let Some(metrics) = metrics {
                    metrics.refused(reason, 0);
                }
            }
            Ok(response)
        })
    }
}

fn kind_of_path(path: &str) -> Option<TelemetryKind> {
    TelemetryKind::ALL.into_iter().find(|kind| match kind {
        TelemetryKind::Traces => path == ExportTraceServiceRequest::GRPC_PATH,
        TelemetryKind::Logs => path == ExportLogsServiceRequest::GRPC_PATH,
        TelemetryKind::Metrics => path == ExportMetricsServiceRequest::GRPC_PATH,
    })
}
