//! The audit webhook: `POST` of an `EventList` on any path, gzip accepted, answered
//! 200 once the events are in the pipelines, 503 when they are full so the API
//! server's batching retries, 400 or 413 for what it must not send again.

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::RETRY_AFTER;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opscope_processors::{Telemetry, TelemetryKind};
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use tokio::net::TcpListener;
use tower_http::decompression::RequestDecompressionLayer;

use super::config::K8sAuditConfig;
use super::event_list::EventList;
use super::filter::EventFilter;
use super::records::audit_logs;
use crate::pipeline::{Consumer, Refusal};
use crate::receivers::ReceiverContext;
use crate::receivers::auth::HttpGuard;
use crate::receivers::body_memory::BodyMemory;
use crate::receivers::http_body::{Rejection, read_body};
use crate::receivers::server::{ServerSecurity, server};
use crate::self_telemetry::ReceiverMetrics;

#[derive(Clone)]
struct Webhook {
    consumer: Consumer<ExportLogsServiceRequest>,
    metrics: ReceiverMetrics,
    filter: Arc<EventFilter>,
    max_body: usize,
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
    let read = read_body(body, webhook.max_body, webhook.memory.as_ref()).await;
    let request = match read.and_then(|body| admitted_records(&body, &webhook.filter)) {
        Ok(request) => request,
        Err(rejection) => return webhook.reject(rejection),
    };
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

/// The records of the batch's events that the filter admits, all in one request.
pub fn admitted_records(
    body: &[u8],
    filter: &EventFilter,
) -> Result<ExportLogsServiceRequest, Rejection> {
    let bad_request = |message| Rejection {
        status: StatusCode::BAD_REQUEST,
        reason: "bad_request",
        message,
    };
    let list = EventList::parse(body).map_err(bad_request)?;
    let mut events = list.events().map_err(bad_request)?;
    events.retain(|event| filter.admits(event));
    Ok(audit_logs(&events, now_unix_nano()))
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

fn now_unix_nano() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}
