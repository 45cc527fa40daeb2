//! The `loki` exporter: log records and signal changes pushed to Loki's push API as
//! snappy-compressed protobuf, with a small label set and ids as structured metadata.

pub mod config;
mod encode;
mod labels;
mod signals;

use opscope_model::config::{FieldError, Validate};
use opscope_model::timestamp::now_unix_nanos;
use opscope_proto::loki::PushRequest;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use reqwest::header::CONTENT_TYPE;

pub use config::{AuthConfig, BasicAuth, LokiConfig};
/// The wire encoding, reachable for the benchmarks.
pub use encode::{logs_push_request, snappy_body};
pub use labels::StreamLabel;

use crate::batch::SignalBatch;
use crate::exporter::{Delivery, ExportError, Exporter};
use crate::http_answer::{Answer, send_failed};
use opscope_net::http_client::build_client;

const PROTOBUF: &str = "application/x-protobuf";
const TENANT_HEADER: &str = "X-Scope-OrgID";

pub struct LokiExporter {
    name: String,
    client: reqwest::Client,
    push_url: String,
    tenant_id: Option<String>,
    auth: AuthConfig,
    labels: Vec<StreamLabel>,
}

impl LokiExporter {
    /// Checks `config` and builds the HTTP client; errors name the setting at fault.
    pub fn new(name: &str, config: &LokiConfig) -> Result<Self, FieldError> {
        config.validate()?;
        Ok(Self {
            name: name.to_string(),
            client: build_client(&config.tls, &config.headers, config.timeout)?,
            push_url: config.push_url()?.to_string(),
            tenant_id: config.tenant_id.clone(),
            auth: config.auth.clone(),
            labels: config.labels.clone(),
        })
    }

    /// One push; a request without streams is not sent.
    async fn push(&self, request: PushRequest) -> Result<Delivery, ExportError> {
        if request.streams.is_empty() {
            return Ok(Delivery::default());
        }
        let body = encode::snappy_body(&request)
            .map_err(|e| ExportError::permanent(format!("snappy: {e}")))?;
        let response = self
            .request()
            .body(body)
            .send()
            .await
            .map_err(send_failed)?;
        Answer::read(response).await.into_result()?;
        tracing::debug!(exporter = %self.name, streams = request.streams.len(), "pushed to Loki");
        Ok(Delivery::default())
    }

    /// A push request with its headers, tenant and credentials, but no body yet.
    fn request(&self) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(&self.push_url)
            .header(CONTENT_TYPE, PROTOBUF);
        if let Some(tenant) = &self.tenant_id {
            request = request.header(TENANT_HEADER, tenant);
        }
        match (&self.auth.basic, &self.auth.bearer_token) {
            (Some(basic), _) => request.basic_auth(&basic.username, Some(&basic.password)),
            (None, Some(token)) => request.bearer_auth(token),
            (None, None) => request,
        }
    }
}

impl Exporter<ExportLogsServiceRequest> for LokiExporter {
    async fn export(&self, batch: &ExportLogsServiceRequest) -> Result<Delivery, ExportError> {
        let request = encode::logs_push_request(batch, &self.labels, now_unix_nanos());
        self.push(request).await
    }
}

impl Exporter<SignalBatch> for LokiExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        let request = signals::signals_push_request(batch, &self.labels, now_unix_nanos());
        self.push(request).await
    }
}
