//! OTLP over HTTP with protobuf bodies: `POST <endpoint>/v1/<signal>`.

use std::io::Write;

use bytes::Bytes;
use flate2::Compression as GzipLevel;
use flate2::write::GzEncoder;
use opscope_model::Telemetry;
use opscope_model::config::FieldError;
use opscope_proto::ExportService;
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
}

impl HttpExporter {
    pub fn new(config: &OtlpExporterConfig) -> Result<Self, FieldError> {
        let target = config.target(OtlpProtocol::Http)?;
        Ok(Self {
            client: build_client(&config.tls, &config.headers, config.timeout)?,
            base_url: target.url,
            gzip: config.compression == Compression::Gzip,
            max_request_size: config.request_size_limit(),
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
        let mut request = self
            .client
            .post(format!("{}{}", self.base_url, T::HTTP_PATH))
            .header(CONTENT_TYPE, PROTOBUF)
            .body(self.body(batch)?);
        if self.gzip {
            request = request.header(CONTENT_ENCODING, "gzip");
        }
        let response = request.send().await.map_err(send_failed)?;
        let body = Answer::read(response).await.into_result()?;
        // A success whose body says nothing readable is a full success.
        let decoded = T::Response::decode(body.as_slice()).unwrap_or_default();
        let (rejected_items, message) = T::rejected_items(&decoded);
        Ok(Delivery {
            rejected_items,
            message,
            ..Delivery::default()
        })
    }
}

/// Signals go out as signal spans, then as log records.
impl Exporter<SignalBatch> for HttpExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        self.send(&Encoded::new(&signal_spans(batch))).await?;
        self.send(&Encoded::new(&signal_logs(batch))).await
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
