//! The audit webhook: `POST` of an `EventList` on any path, gzip accepted, answered
//! 200 once the events are in the pipelines, 503 when they are full so the API
//! server's batching retries, 400 or 413 for what it must not send again.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::RETRY_AFTER;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opscope_model::timestamp::now_unix_nanos;
use opscope_model::{Telemetry, TelemetryKind};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use tokio::net::TcpListener;
use tower_http::decompression::RequestDecompressionLayer;

use super::config::K8sAuditConfig;
use super::filter::EventFilter;
use super::records::audit_logs;
use crate::consumer::{Consumer, Refusal};
use crate::receivers::ReceiverContext;
use crate::receivers::common::auth::HttpGuard;
use crate::receivers::common::body_memory::BodyMemory;
use crate::receivers::common::http_body::{Rejection, read_body};
use crate::receivers::common::server::{ServerSecurity, server};
use crate::self_telemetry::ReceiverMetrics;
use opscope_model::kubernetes::audit::{AuditEvent, EventList, ListError};

#[derive(Clone)]
struct Webhook {
    consumer: Consumer<ExportLogsServiceRequest>,
    metrics: ReceiverMetrics,
    filter: Arc<EventFilter>,
    max_body: usize,
    max_events: usize,
    memory: Option<BodyMemory>,
}

pub fn serve(
    listener: TcpListener,
    config: &K8sAuditConfig,
    security: ServerSecurity,
    context: &ReceiverContext,
) -> impl Future<Output = ()> + Send + 'static {
    let metrics = context
        .telemetry
        .receiver(TelemetryKind::Logs, &context.id, "http");
    let webhook = Webhook {
        consumer: context.consumers.logs.clone(),
        metrics: metrics.clone(),
        filter: Arc::new(EventFilter::new(config)),
        max_body: config.max_request_body_size,
        max_events: config.max_events_per_request,
        memory: BodyMemory::of(&context.consumers),
    };
    // The API server posts to whatever path its webhook kubeconfig names.
    let router = Router::new()
        .route("/", post(receive))
        .route("/{*path}", post(receive))
        .with_state(webhook);
    let router = HttpGuard::protect(router, security.authenticator.as_ref(), metrics)
        .layer(RequestDecompressionLayer::new());
    let server = server(
        context,
        "http",
        security.tls,
        config.connections().settings(),
    );
    server.serve(listener, router, context.shutdown.clone().cancelled_owned())
}

async fn receive(State(webhook): State<Webhook>, body: Body) -> Response {
    let body = match read_body(body, webhook.max_body, webhook.memory.as_ref()).await {
        Ok(body) => body,
        Err(rejection) => return webhook.reject(rejection),
    };
    let list = match EventList::parse(&body, webhook.max_events) {
        Ok(list) => list,
        Err(error) => return webhook.reject(list_rejection(error)),
    };
    // What reading the events and building their records takes, reserved before
    // either is done.
    let reserved = match webhook.consumer.reserve(decoded_size(&body, &list)) {
        Ok(reserved) => reserved,
        Err(refusal) => {
            webhook.metrics.refused(refusal.reason(), list.len());
            return refusal_response(refusal);
        }
    };
    let request = match records_of(&list, &webhook.filter) {
        Ok(request) => request,
        Err(rejection) => return webhook.reject(rejection),
    };
    drop(reserved);
    let items = request.item_count();
    if items == 0 {
        return StatusCode::OK.into_response();
    }
    match webhook.consumer.deliver(request).await {
        Ok(()) => {
            webhook.metrics.accepted(items);
            StatusCode::OK.into_response()
        }
        Err(refusal) => {
            webhook.metrics.refused(refusal.reason(), items);
            refusal_response(refusal)
        }
    }
}

impl Webhook {
    fn reject(&self, rejection: Rejection) -> Response {
        self.metrics.refused(rejection.reason, 0);
        tracing::debug!(reason = %rejection.message, "audit batch refused");
        rejection.answer((rejection.status, rejection.message.clone()).into_response())
    }
}

/// The records of the batch's events that the filter admits, all in one request;
/// a batch of more than `max_events` events is refused before they are read. The
/// webhook's steps, in one call for the fuzz targets.
#[cfg(any(test, feature = "fuzzing"))]
pub fn admitted_records(
    body: &[u8],
    filter: &EventFilter,
    max_events: usize,
) -> Result<ExportLogsServiceRequest, Rejection> {
    let list = EventList::parse(body, max_events).map_err(list_rejection)?;
    records_of(&list, filter)
}

/// An upper bound of the memory the batch's events and records take once read: the
/// events' headers, and the records' copies of the events' text.
fn decoded_size(body: &[u8], list: &EventList<'_>) -> u64 {
    let headers = list.len().saturating_mul(size_of::<AuditEvent<'_>>());
    u64::try_from(headers.saturating_add(body.len().saturating_mul(2))).unwrap_or(u64::MAX)
}

fn records_of(
    list: &EventList<'_>,
    filter: &EventFilter,
) -> Result<ExportLogsServiceRequest, Rejection> {
    let mut events = list.events().map_err(|message| Rejection {
        status: StatusCode::BAD_REQUEST,
        reason: "bad_request",
        message,
    })?;
    events.retain(|event| filter.admits(&event.header));
    Ok(audit_logs(&events, now_unix_nanos()))
}

fn list_rejection(error: ListError) -> Rejection {
    let message = error.to_string();
    match error {
        ListError::Invalid(_) => Rejection {
            status: StatusCode::BAD_REQUEST,
            reason: "bad_request",
            message,
        },
        ListError::TooManyEvents { .. } => Rejection {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            reason: "too_large",
            message,
        },
    }
}

fn refusal_response(refusal: Refusal) -> Response {
    match refusal {
        Refusal::Full => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(RETRY_AFTER, "1")],
            "opscope is at capacity; retry later",
        )
            .into_response(),
        Refusal::Closed => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(RETRY_AFTER, "1")],
            "opscope is shutting down; retry later",
        )
            .into_response(),
        Refusal::NotQueued => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(RETRY_AFTER, "1")],
            "opscope could not queue the events durably; retry later",
        )
            .into_response(),
        Refusal::MemoryLimit => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(RETRY_AFTER, "1")],
            "opscope is over its memory limit; retry later",
        )
            .into_response(),
        Refusal::NoPipeline => (
            StatusCode::NOT_FOUND,
            "no logs pipeline lists this receiver",
        )
            .into_response(),
    }
}
