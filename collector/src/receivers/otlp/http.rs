//! OTLP/HTTP: `POST /v1/traces`, `/v1/logs`, `/v1/metrics` with protobuf or JSON
//! bodies, gzip or zstd content encoding, answered in the request's content type.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use opscope_model::Telemetry;
use opscope_proto::ExportService;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::prost::Message;
use tokio::net::TcpListener;
use tower_http::decompression::RequestDecompressionLayer;

use super::internal_markers::InternalMarkers;
use super::refusal_message;
use crate::consumer::{Consumer, OtlpBatch, Refusal};
use crate::receivers::ReceiverContext;
use crate::receivers::common::auth::{Authenticator, HttpGuard};
use crate::receivers::common::body_memory::BodyMemory;
use crate::receivers::common::decode_budget::{Refused, WireFormat, admit};
use crate::receivers::common::http_body::read_body;
use crate::receivers::common::input_limits::{InputLimits, WithinLimits};
use crate::receivers::common::server::{ServerSecurity, server};
use crate::self_telemetry::ReceiverMetrics;
use opscope_net::server_tls::ConnectionSettings;

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Protobuf,
    Json,
}

impl Format {
    fn of(headers: &HeaderMap) -> Option<Self> {
        let content_type = headers.get(CONTENT_TYPE)?.to_str().ok()?;
        let essence = content_type.split(';').next()?.trim();
        if essence.eq_ignore_ascii_case(PROTOBUF) {
            Some(Self::Protobuf)
        } else if essence.eq_ignore_ascii_case(JSON) {
            Some(Self::Json)
        } else {
            None
        }
    }

    fn wire(self) -> WireFormat {
        match self {
            Self::Protobuf => WireFormat::Protobuf,
            Self::Json => WireFormat::Json,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Protobuf => "protobuf",
            Self::Json => "JSON",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => PROTOBUF,
            Self::Json => JSON,
        }
    }

    pub fn decode<T: Telemetry>(self, body: &[u8]) -> Result<T, String> {
        match self {
            Self::Protobuf => {
                T::decode(body).map_err(|e| format!("undecodable OTLP/protobuf body: {e}"))
            }
            Self::Json => {
                serde_json::from_slice(body).map_err(|e| format!("undecodable OTLP/JSON body: {e}"))
            }
        }
    }

    /// The answer to an accepted request: an empty export response.
    fn success_body<T: ExportService>(self) -> Vec<u8> {
        match self {
            Self::Protobuf => T::Response::default().encode_to_vec(),
            Self::Json => b"{}".to_vec(),
        }
    }
}

#[derive(Clone)]
struct Endpoint<T> {
    consumer: Consumer<T>,
    metrics: ReceiverMetrics,
    max_body: usize,
    limits: InputLimits,
    accept_handover: bool,
    memory: Option<BodyMemory>,
}

/// What every route of the server shares.
struct RouteSettings<'a> {
    max_body: usize,
    limits: &'a InputLimits,
    accept_handover: bool,
    authenticator: Option<&'a Arc<Authenticator>>,
    memory: Option<BodyMemory>,
}

pub fn serve(
    listener: TcpListener,
    max_body: usize,
    limits: InputLimits,
    accept_handover: bool,
    security: ServerSecurity,
    connections: ConnectionSettings,
    context: &ReceiverContext,
) -> impl Future<Output = ()> + Send + 'static {
    let consumers = &context.consumers;
    let settings = RouteSettings {
        max_body,
        limits: &limits,
        accept_handover,
        authenticator: security.authenticator.as_ref(),
        memory: BodyMemory::of(consumers),
    };
    let router = Router::new()
        .merge(route::<ExportTraceServiceRequest>(
            consumers.traces.clone(),
            &settings,
            context,
        ))
        .merge(route::<ExportLogsServiceRequest>(
            consumers.logs.clone(),
            &settings,
            context,
        ))
        .merge(route::<ExportMetricsServiceRequest>(
            consumers.metrics.clone(),
            &settings,
            context,
        ))
        .layer(RequestDecompressionLayer::new());
    let server = server(context, "http", security.tls, connections);
    server.serve(listener, router, context.shutdown.clone().cancelled_owned())
}

fn route<T: OtlpBatch + WithinLimits + InternalMarkers>(
    consumer: Consumer<T>,
    settings: &RouteSettings<'_>,
    context: &ReceiverContext,
) -> Router {
    let metrics = context.telemetry.receiver(T::KIND, &context.id, "http");
    let endpoint = Endpoint {
        consumer,
        metrics: metrics.clone(),
        max_body: settings.max_body,
        limits: settings.limits.clone(),
        accept_handover: settings.accept_handover,
        memory: settings.memory.clone(),
    };
    let router = Router::new().route(T::HTTP_PATH, post(export::<T>).with_state(endpoint));
    HttpGuard::protect(router, settings.authenticator, metrics)
}

async fn export<T: OtlpBatch + WithinLimits + InternalMarkers>(
    State(endpoint): State<Endpoint<T>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(format) = Format::of(&headers) else {
        endpoint.metrics.refused("unsupported_media_type", 0);
        let message = format!("Content-Type must be {PROTOBUF} or {JSON}");
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, message).into_response();
    };
    let body = match read_body(body, endpoint.max_body, endpoint.memory.as_ref()).await {
        Ok(body) => body,
        Err(rejection) => {
            endpoint.metrics.refused(rejection.reason, 0);
            return rejection.answer(error(format, rejection.status, rejection.message.clone()));
        }
    };
    let admission = match admit(format.wire(), &body, &endpoint.limits, &endpoint.consumer) {
        Ok(admission) => admission,
        Err(Refused::Undecodable(err)) => {
            endpoint.metrics.refused("bad_request", 0);
            let message = format!("undecodable OTLP/{} body: {err}", format.name());
            return error(format, StatusCode::BAD_REQUEST, message);
        }
        Err(Refused::OverBudget { reason, items }) => {
            endpoint.metrics.refused("too_large", items);
            return error(format, StatusCode::PAYLOAD_TOO_LARGE, reason);
        }
        Err(Refused::Memory { refusal, items }) => {
            endpoint.metrics.refused(refusal.reason(), items);
            return refused(format, refusal);
        }
    };
    let mut data: T = match format.decode(&body) {
        Ok(data) => data,
        Err(message) => {
            endpoint.metrics.refused("bad_request", 0);
            return error(format, StatusCode::BAD_REQUEST, message);
        }
    };
    drop(body);
    if !endpoint.accept_handover {
        data.remove_internal_markers();
    }
    let items = data.item_count();
    if let Err(violation) = data.check_limits(&endpoint.limits) {
        endpoint.metrics.refused(violation.reason, items);
        return error(format, StatusCode::BAD_REQUEST, violation.to_string());
    }
    // The pipelines count the request from here on.
    drop(admission.hold);
    match endpoint.consumer.deliver(data).await {
        Ok(()) => {
            endpoint.metrics.accepted(items);
            (
                [(CONTENT_TYPE, format.content_type())],
                format.success_body::<T>(),
            )
                .into_response()
        }
        Err(refusal) => {
            endpoint.metrics.refused(refusal.reason(), items);
            refused(format, refusal)
        }
    }
}

/// The answer to a request the pipelines refused: 503 with `Retry-After` when it
/// may be sent again later.
fn refused(format: Format, refusal: Refusal) -> Response {
    let status = if refusal.is_retryable() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::NOT_FOUND
    };
    let mut response = error(format, status, refusal_message(refusal).to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(RETRY_AFTER, 1.into());
    }
    response
}

/// An OTLP error answer: a `google.rpc.Status` in the request's format.
fn error(format: Format, status: StatusCode, message: String) -> Response {
    let code = match status {
        StatusCode::SERVICE_UNAVAILABLE => tonic::Code::Unavailable,
        StatusCode::PAYLOAD_TOO_LARGE => tonic::Code::ResourceExhausted,
        StatusCode::NOT_FOUND => tonic::Code::Unimplemented,
        _ => tonic::Code::InvalidArgument,
    };
    let body = match format {
        Format::Protobuf => tonic_types::pb::Status {
            code: code as i32,
            message,
            details: Vec::new(),
        }
        .encode_to_vec(),
        Format::Json => serde_json::json!({ "code": code as i32, "message": message })
            .to_string()
            .into_bytes(),
    };
    (status, [(CONTENT_TYPE, format.content_type())], body).into_response()
}

#[cfg(test)]
#[path = "http_fuzz.rs"]
mod fuzz_tests;
