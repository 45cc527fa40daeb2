//! The `prometheusremotewrite` exporter: the series the pull endpoint would show,
//! pushed with remote write 1.0. Each batch sends the series it touched (stale
//! markers for the ones it removed), stamped with the send time; its changes are
//! kept only once the receiver took them, so a retried batch counts once.

use std::time::Instant;

use opscope_model::config::{FieldError, Validate};
use opscope_model::timestamp::now_unix_nanos;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::prost::Message;
use opscope_proto::remote_write::WriteRequest;
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, USER_AGENT};
use tokio::sync::Mutex;

use super::config::RemoteWriteConfig;
use super::state::{Changes, SeriesState, delivery};
use super::write_request::write_request;
use crate::batch::SignalBatch;
use crate::exporter::{Delivery, ExportError, Exporter};
use crate::http_answer::{Answer, send_failed};
use opscope_net::http_client::build_client;

const PROTOBUF: &str = "application/x-protobuf";
const VERSION_HEADER: &str = "X-Prometheus-Remote-Write-Version";
const AGENT: &str = concat!("opscope/", env!("CARGO_PKG_VERSION"));

/// One per configured exporter, shared by every pipeline that lists it. Requests go
/// out one at a time, in order, so that each series' samples arrive in time order.
pub struct RemoteWriteExporter {
    client: reqwest::Client,
    url: String,
    writer: Mutex<Writer>,
}

struct Writer {
    series: SeriesState,
    /// The timestamp of the last request, in ms; the next one is later.
    last_timestamp: i64,
}

impl Writer {
    fn next_timestamp(&mut self) -> i64 {
        let now = i64::try_from(now_unix_nanos() / 1_000_000).unwrap_or(i64::MAX);
        self.last_timestamp = now.max(self.last_timestamp.saturating_add(1));
        self.last_timestamp
    }
}

impl RemoteWriteExporter {
    pub fn new(name: &str, config: &RemoteWriteConfig) -> Result<Self, FieldError> {
        config.validate()?;
        Ok(Self {
            client: build_client(&config.tls, &config.headers, config.timeout)?,
            url: config.url()?.to_string(),
            writer: Mutex::new(Writer {
                series: SeriesState::new(name, config.limits(), &config.external_labels),
                last_timestamp: 0,
            }),
        })
    }

    /// Resolves the batch against the state, sends the result, and keeps it once
    /// the receiver has taken it.
    async fn push(
        &self,
        changes_of: impl FnOnce(&SeriesState) -> Changes,
    ) -> Result<Delivery, ExportError> {
        let mut writer = self.writer.lock().await;
        let now = Instant::now();
        writer.series.expire(now);
        let changes = changes_of(&writer.series);
        let resolution = writer.series.resolve(&changes);
        if !resolution.updates.is_empty() {
            let timestamp = writer.next_timestamp();
            self.send(&write_request(&resolution.updates, timestamp))
                .await?;
        }
        Ok(delivery(&writer.series.commit(changes, resolution, now)))
    }

    async fn send(&self, request: &WriteRequest) -> Result<(), ExportError> {
        let body = snap::raw::Encoder::new()
            .compress_vec(&request.encode_to_vec())
            .map_err(|e| ExportError::permanent(format!("snappy: {e}")))?;
        let response = self
            .client
            .post(&self.url)
            .header(CONTENT_ENCODING, "snappy")
            .header(CONTENT_TYPE, PROTOBUF)
            .header(VERSION_HEADER, "0.1.0")
            .header(USER_AGENT, AGENT)
            .body(body)
            .send()
            .await
            .map_err(send_failed)?;
        Answer::read(response).await.into_result().map(drop)
    }
}

impl Exporter<ExportMetricsServiceRequest> for RemoteWriteExporter {
    async fn export(&self, batch: &ExportMetricsServiceRequest) -> Result<Delivery, ExportError> {
        self.push(|state| state.metric_changes(batch)).await
    }
}

impl Exporter<SignalBatch> for RemoteWriteExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        self.push(|state| state.signal_changes(batch)).await
    }
}
