//! OTLP over gRPC: one unary `Export` call per batch, on a lazily connected channel.

use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes};
use opscope_model::Telemetry;
use opscope_model::config::FieldError;
use opscope_proto::ExportService;
use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::prost::Message;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};
use tonic_types::StatusExt;

use super::config::{Compression, OtlpExporterConfig, OtlpProtocol};
use super::signals::{signal_logs, signal_spans};
use crate::batch::{Encoded, SignalBatch};
use crate::exporter::{Delivery, ExportError, Exporter};

pub struct GrpcExporter {
    channel: Channel,
    /// The destination has no logs service (Jaeger, a traces-only collector): signals
    /// then go as spans only.
    no_logs_service: AtomicBool,
    compression: Option<CompressionEncoding>,
    metadata: MetadataMap,
    timeout: Duration,
    max_request_size: Option<usize>,
}

impl GrpcExporter {
    /// Builds the channel; the connection is made on the first export, so a
    /// destination that is not up yet does not stop opscope from starting.
    pub fn new(config: &OtlpExporterConfig) -> Result<Self, FieldError> {
        let target = config.target(OtlpProtocol::Grpc)?;
        let endpoint_error =
            |e: tonic::transport::Error| FieldError::new("endpoint", e.to_string());
        let mut endpoint = Endpoint::from_str(&target.url)
            .map_err(endpoint_error)?
            .timeout(config.timeout)
            .connect_timeout(config.timeout);
        if target.tls {
            endpoint = endpoint
                .tls_config(tls_config(config)?)
                .map_err(endpoint_error)?;
        }
        let mut metadata = MetadataMap::new();
        for (name, value) in &config.headers {
            let field = || FieldError::new(format!("headers.{name}"), "is not valid gRPC metadata");
            let key = MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|_| field())?;
            let value = MetadataValue::try_from(value.as_str()).map_err(|_| field())?;
            metadata.insert(key, value);
        }
        let compression = match config.compression {
            Compression::Gzip => Some(CompressionEncoding::Gzip),
            Compression::Zstd => Some(CompressionEncoding::Zstd),
            Compression::None => None,
        };
        Ok(Self {
            channel: endpoint.connect_lazy(),
            no_logs_service: AtomicBool::new(false),
            compression,
            metadata,
            timeout: config.timeout,
            max_request_size: config.request_size_limit(),
        })
    }
}

fn tls_config(config: &OtlpExporterConfig) -> Result<ClientTlsConfig, FieldError> {
    let material = config.tls.load()?;
    let mut tls = ClientTlsConfig::new().with_webpki_roots();
    if let Some(ca) = material.ca {
        tls = tls.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some((cert, key)) = material.identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(tls)
}

/// Signals go out as signal spans, then as log records, unless the destination
/// answered that it has no logs service: the spans are what a trace store wants,
/// and sending them again for the logs' sake would only repeat them.
impl Exporter<SignalBatch> for GrpcExporter {
    async fn export(&self, batch: &SignalBatch) -> Result<Delivery, ExportError> {
        let delivered = self.send(&Encoded::new(&signal_spans(batch))).await?;
        if self.no_logs_service.load(Ordering::Relaxed) {
            return Ok(delivered);
        }
        match self.call(&Encoded::new(&signal_logs(batch))).await {
            Ok(Err(status)) if status.code() == Code::Unimplemented => {
                self.no_logs_service.store(true, Ordering::Relaxed);
                tracing::warn!(
                    detail = status.message(),
                    "the destination has no OTLP logs service: signals go to it as spans only"
                );
                Ok(delivered)
            }
            answer => delivery::<ExportLogsServiceRequest>(answer),
        }
    }

    fn max_request_size(&self) -> Option<usize> {
        self.max_request_size
    }
}

impl<T: Telemetry + ExportService> Exporter<Encoded<T>> for GrpcExporter {
    async fn export(&self, batch: &Encoded<T>) -> Result<Delivery, ExportError> {
        self.send(batch).await
    }

    fn max_request_size(&self) -> Option<usize> {
        self.max_request_size
    }
}

impl GrpcExporter {
    async fn send<T: Telemetry + ExportService>(
        &self,
        batch: &Encoded<T>,
    ) -> Result<Delivery, ExportError> {
        delivery::<T>(self.call(batch).await)
    }

    /// One request: the response or the server's status; `Err` when it could not be sent.
    async fn call<T: Telemetry + ExportService>(
        &self,
        batch: &Encoded<T>,
    ) -> Result<Result<T::Response, Status>, ExportError> {
        let mut client = tonic::client::Grpc::new(self.channel.clone());
        if let Some(encoding) = self.compression {
            client = client.send_compressed(encoding).accept_compressed(encoding);
        }
        client
            .ready()
            .await
            .map_err(|e| ExportError::retryable(format!("connecting: {e}")))?;
        let mut request = tonic::Request::new(batch.bytes());
        *request.metadata_mut() = self.metadata.clone();
        request.set_timeout(self.timeout);
        let path = http::uri::PathAndQuery::from_static(T::GRPC_PATH);
        let codec = PreEncoded::<T::Response>(PhantomData);
        Ok(client
            .unary(request, path, codec)
            .await
            .map(tonic::Response::into_inner))
    }
}

fn delivery<T: Telemetry + ExportService>(
    answer: Result<Result<T::Response, Status>, ExportError>,
) -> Result<Delivery, ExportError> {
    match answer? {
        Ok(response) => {
            let (rejected_items, message) = T::rejected_items(&response);
            Ok(Delivery {
                rejected_items,
                message,
                ..Delivery::default()
            })
        }
        Err(status) => Err(classify(&status)),
    }
}

/// What a tonic server answers, with OUT_OF_RANGE, to a message over its limit.
const TONIC_TOO_LARGE: &str = "Error, decoded message length too large";

/// Sorts a gRPC failure as the OTLP specification says: these codes are worth
/// retrying, and RESOURCE_EXHAUSTED only when the server says when to come back;
/// without a delay, it is how servers refuse a message over their size limit.
fn classify(status: &Status) -> ExportError {
    let retry_after = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay);
    let reason = format!("gRPC {:?}: {}", status.code(), status.message());
    match status.code() {
        Code::OutOfRange if status.message().starts_with(TONIC_TOO_LARGE) => {
            ExportError::TooLarge { reason }
        }
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => ExportError::Retryable {
            reason,
            retry_after,
        },
        Code::ResourceExhausted if retry_after.is_some() => ExportError::Retryable {
            reason,
            retry_after,
        },
        Code::ResourceExhausted => ExportError::TooLarge { reason },
        _ => ExportError::permanent(reason),
    }
}

/// A codec that sends an already encoded request and decodes the OTLP response;
/// tonic's prost codec would need the request by value, which would mean cloning
/// every batch to keep it for a retry.
struct PreEncoded<R>(PhantomData<R>);

impl<R: Message + Default + Send + 'static> Codec for PreEncoded<R> {
    type Encode = Bytes;
    type Decode = R;
    type Encoder = BytesEncoder;
    type Decoder = ResponseDecoder<R>;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> ResponseDecoder<R> {
        ResponseDecoder(PhantomData)
    }
}

struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

struct ResponseDecoder<R>(PhantomData<R>);

impl<R: Message + Default> Decoder for ResponseDecoder<R> {
    type Item = R;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<R>, Status> {
        R::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("undecodable OTLP response: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_retry_rules() {
        assert!(matches!(
            classify(&Status::unavailable("x")),
            ExportError::Retryable { .. }
        ));
        assert!(matches!(
            classify(&Status::invalid_argument("x")),
            ExportError::Permanent { .. }
        ));
        assert!(matches!(
            classify(&Status::resource_exhausted("x")),
            ExportError::TooLarge { .. }
        ));
        let tonic_limit = Status::out_of_range(
            "Error, decoded message length too large: found 5000000 bytes, the limit is: 4194304 bytes",
        );
        assert!(matches!(
            classify(&tonic_limit),
            ExportError::TooLarge { .. }
        ));
        assert!(matches!(
            classify(&Status::out_of_range("x")),
            ExportError::Retryable { .. }
        ));
        let throttled = Status::with_error_details(
            Code::ResourceExhausted,
            "slow down",
            tonic_types::ErrorDetails::with_retry_info(Some(Duration::from_secs(2))),
        );
        assert_eq!(
            classify(&throttled),
            ExportError::Retryable {
                reason: "gRPC ResourceExhausted: slow down".into(),
                retry_after: Some(Duration::from_secs(2)),
            }
        );
    }
}
