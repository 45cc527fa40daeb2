//! The `otlp` receiver: OTLP over gRPC and over HTTP (protobuf and JSON), for
//! traces, logs and metrics.

pub mod config;
mod grpc;
mod grpc_service;
pub(crate) mod http;
mod internal_markers;

use tokio::task::JoinSet;

pub use config::OtlpReceiverConfig;

use super::common::server::bind;
use super::{ReceiverContext, ReceiverError};
use crate::consumer::Refusal;
use opscope_net::server_tls::Alpn;

pub async fn start(
    config: &OtlpReceiverConfig,
    context: ReceiverContext,
    tasks: &mut JoinSet<()>,
) -> Result<(), ReceiverError> {
    if let Some(grpc) = &config.protocols.grpc {
        let security = grpc.security().build(Alpn::Http2, "grpc", &context)?;
        let listener = bind(&context, "protocols.grpc", &grpc.endpoint).await?;
        tasks.spawn(grpc::serve(
            listener,
            grpc.max_message_bytes(),
            config.limits.clone(),
            config.accept_handover,
            security,
            grpc.connections(),
            &context,
        ));
    }
    if let Some(http) = &config.protocols.http {
        let security = http
            .security()
            .build(Alpn::Http2AndHttp1, "http", &context)?;
        let listener = bind(&context, "protocols.http", &http.endpoint).await?;
        tasks.spawn(http::serve(
            listener,
            http.max_request_body_size,
            config.limits.clone(),
            config.accept_handover,
            security,
            http.connections().settings(),
            &context,
        ));
    }
    Ok(())
}

/// What a client is told when its request is refused.
fn refusal_message(refusal: Refusal) -> &'static str {
    match refusal {
        Refusal::Full => "opscope is at capacity; retry later",
        Refusal::Closed => "opscope is shutting down; retry elsewhere or later",
        Refusal::NoPipeline => "no pipeline of this signal type listens to this receiver",
        Refusal::NotQueued => "opscope could not queue the data durably; retry later",
        Refusal::MemoryLimit => "opscope is over its memory limit; retry later",
    }
}
