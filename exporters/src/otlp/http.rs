//! OTLP over HTTP with protobuf bodies: `POST <endpoint>/v1/<signal>`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use flate2::Compression as GzipLevel;
use flate2::write::GzEncoder;
use opscope_model::Telemetry;
use opscope_model::config::FieldError;
use opscope_proto::ExportService;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::prost::Message;
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE};

use super::config::{Compression, OtlpExporterConfig, OtlpProtocol};
use super::signals::{signal_logs, signal_spans};
use crate::batch::{Encoded, SignalBatch};
use crate::exporter::{Delivery, ExportError, Exporter};
use crate::http_answer::{Answer, send_failed};
use opscope_net::http_client::build_client;

const PROTOBUF: &str = "application/x-protobuf";

pub struct HttpExporter {
    client: reqwest::Client,
    base_url: String,
    gzip: bool,
    max_request_size: Option<usize>,
    /// The destination answered 404 for logs (Jaeger, a traces-only collector):
    /// signals then go as spans only.
    no_logs_endpoint: AtomicBool,
}

impl HttpExporter {
    pub fn new(config: &OtlpExporterConfig) -> Result<Self, FieldError> {
        let target = config.target(OtlpProtocol::Http)?;
        Ok(Self {
            client: build_client(&config.tls, &config.headers, config.timeout)?,
            base_url: target.url,
            gzip: config.compression == Compression::Gzip,
            max_request_size: config.request_size_limit(),
            no_logs_endpoint: AtomicBool::new(false),
        })
    }

    fn body<T: Telemetry + ExportService>(&self, batch: &Encoded<T>) -> Result<Bytes, ExportError> {
        let encoded = batch.bytes();
        if !self.gzip {
            return Ok(encoded);
        }
        let mut encoder = GzEncoder::new(Vec::with_capacity(encoded.len() / 4), GzipLevel::fast());
        encoder
            .write_all(&encoded)
            .and_then(|()| encoder.finish())
            .map(Bytes::from)
            .map_err(|e| ExportError::permanent(format!("gzip: {e}")))
    }

    async fn send<T: Telemetry + ExportService>(
        &self,
        batch: &Encoded<T>,
    ) -> Result<Delivery, ExportError> {
        delivery::<T>(self.post(batch).await?)
    }

    /// One request and its answer, whatever its status.
    async fn post<T: Telemetry + ExportService>(
        &self,
        batch: &Encoded<T>,
    ) -> Result<Answer, ExportError> {
        let mut request = self
            .client
            .post(format!("{}{}", self.base_url, T::HTTP_PATH))
            .header(CONTENT_TYPE, PROTOBUF)
            .body(self.body(batch)?);
        if self.gzip {
            request = request.header(CONTENT_ENCODING, "gzip");
        }
        let response = request.send().await.map_err(send_failed)?;
        Ok(Answer::read(response).await)
    }
}

fn delivery<T: Telemetry + ExportService>(answer: Answer) -> Result<Delivery, ExportError> {
    let body = answer.into_result()?;
    // A success whose body says nothing readable is a full success.
    let decoded = T::Response::decode(body.as_slice()).unwrap_or_default();
    let (rejected_items, message) = T::rejected_items(&decoded);
    Ok(Delivery {
        rejected_items,
        message,
        ..Delivery::default()
    })
}

/// Signals go out as signal spans, then as log records, unless the destination
/// answered 404 for logs: the spans are what a trace store wants, and sending them
/// again for the logs' sake would only repeat them.
impl Exporter<SignalBatch> for HttpExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        let delivered = self.send(&Encoded::new(&signal_spans(batch))).await?;
        if self.no_logs_endpoint.load(Ordering::Relaxed) {
            return Ok(delivered);
        }
        let logs = Encoded::new(&signal_logs(batch));
        let answer = self.post(&logs).await?;
        if answer.status == reqwest::StatusCode::NOT_FOUND {
            self.no_logs_endpoint.store(true, Ordering::Relaxed);
            tracing::warn!(
                url = format!("{}{}", self.base_url, ExportLogsServiceRequest::HTTP_PATH),
                "the destination has no OTLP logs endpoint (404): signals go to it as spans only"
            );
            return Ok(delivered);
        }
        delivery::<ExportLogsServiceRequest>(answer)
    }

    fn max_request_size(&self) -> Option<usize> {
        self.max_request_size
    }
}

impl<T: Telemetry + ExportService> Exporter<Encoded<T>> for HttpExporter {
    async fn export(&self, batch: &Encoded<T>) -> Result<Delivery, ExportError> {
        self.send(batch).await
    }

    fn max_request_size(&self) -> Option<usize> {
        self.max_request_size
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use opscope_testkit::recording::RecordingServer;
    use opscope_testkit::signals::loop_signal;

    use super::*;

    #[tokio::test]
    async fn a_destination_without_logs_gets_signals_as_spans_only() {
        // Spans taken, logs not found; everything after is taken (204).
        let server = RecordingServer::start(&[StatusCode::OK, StatusCode::NOT_FOUND]).await;
        let json = serde_json::json!({ "endpoint": server.base_url() });
        let config: OtlpExporterConfig = serde_json::from_value(json).expect("a config");
        let exporter = HttpExporter::new(&config).expect("an exporter");
        let batch = SignalBatch(vec![loop_signal()]);
        for _ in 0..2 {
            let delivered = Exporter::<SignalBatch>::export(&exporter, &batch).await;
            assert!(delivered.is_ok(), "{delivered:?}");
        }
        let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
        assert_eq!(paths, ["/v1/traces", "/v1/logs", "/v1/traces"]);
    }
}
