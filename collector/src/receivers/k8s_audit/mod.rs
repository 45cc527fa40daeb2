//! The `k8s_audit` receiver: the kube-apiserver's audit webhook, each event a log
//! record for the operator_tagger and correlator (API calls, object state, deletions).

pub mod config;
pub(crate) mod filter;
#[cfg(test)]
mod fuzz_tests;
mod records;
pub(crate) mod webhook;

use tokio::task::JoinSet;

pub use config::K8sAuditConfig;

use super::common::server::bind;
use super::{ReceiverContext, ReceiverError, filelog};
use opscope_net::server_tls::Alpn;

/// Binds the webhook's listener (a port in use fails the start) and spawns its
/// server, which stops after `shutdown` fires and in-flight batches are answered.
pub async fn start(
    config: &K8sAuditConfig,
    context: ReceiverContext,
    tasks: &mut JoinSet<()>,
) -> Result<(), ReceiverError> {
    let security = config
        .security()
        .build(Alpn::Http2AndHttp1, "http", &context)?;
    let listener = bind(&context, "", &config.endpoint).await?;
    tasks.spawn(webhook::serve(listener, config, security, &context));
    if let Some(tail) = config.file_tail() {
        filelog::start(&tail, context, tasks).await?;
    }
    Ok(())
}
