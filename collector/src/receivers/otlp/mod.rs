//! The `otlp` receiver: OTLP over gRPC and over HTTP (protobuf and JSON), for
//! traces, logs and metrics.

pub mod config;
mod grpc;
mod http;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use config::OtlpReceiverConfig;

use super::{ReceiverContext, ReceiverError};
use crate::pipeline::Refusal;

pub async fn start(
    config: &OtlpReceiverConfig,
    context: ReceiverContext,
    tasks: &mut JoinSet<()>,
) -> Result<(), ReceiverError> {
    if let Some(grpc) = &config.protocols.grpc {
        let listener = bind(&context.id, &grpc.endpoint).await?;
        tasks.spawn(grpc::serve(listener, grpc.max_message_bytes(), &context));
    }
    if let Some(http) = &config.protocols.http {
        let listener = bind(&context.id, &http.endpoint).await?;
        tasks.spawn(http::serve(listener, http.max_request_body_size, &context));
    }
    Ok(())
}

async fn bind(receiver: &str, address: &str) -> Result<TcpListener, ReceiverError> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| ReceiverError::Bind {
            receiver: receiver.to_string(),
            address: address.to_string(),
            source,
        })?;
    if let Ok(local) = listener.local_addr() {
        tracing::info!(receiver = receiver, address = %local, "listening");
    }
    Ok(listener)
}

/// What a client is told when its request is refused.
fn refusal_message(refusal: Refusal) -> &'static str {
    match refusal {
        Refusal::Full => "opscope is at capacity; retry later",
        Refusal::Closed => "opscope is shutting down; retry elsewhere or later",
        Refusal::NoPipeline => "no pipeline of this signal type listens to this receiver",
    }
}
