//! The three OTLP `Export` gRPC services as one generic tower service, decoding each
//! request from one contiguous slice.
//!
//! The generated servers decode through tonic's `DecodeBuf`, which keeps a `BytesMut`
//! and a length up to date for every field read: on operator spans that bookkeeping
//! measured a fifth of the decode time. tonic has already gathered the whole message
//! in one buffer when it calls the decoder, so the codec here takes it as `Bytes`
//! (no copy) and decodes from the slice. The generated code cannot be given another
//! codec, hence this service in its place.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use opscope_proto::otlp::collector::logs::v1::logs_service_server;
use opscope_proto::otlp::collector::metrics::v1::ExportMetricsServiceRequest;
use opscope_proto::otlp::collector::metrics::v1::metrics_service_server;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::collector::trace::v1::trace_service_server;
use opscope_proto::prost::Message;
use opscope_proto::prost::bytes::Buf;
use tonic::codec::{
    Codec, CompressionEncoding, DecodeBuf, Decoder, EnabledCompressionEncodings, EncodeBuf, Encoder,
};
use tonic::codegen::{Body, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Code, Request, Response, Status};

use crate::consumer::OtlpBatch;

/// The gRPC service a request type is exported to.
pub trait ExportRpc: OtlpBatch {
    const SERVICE: &'static str;
}

impl ExportRpc for ExportTraceServiceRequest {
    const SERVICE: &'static str = trace_service_server::SERVICE_NAME;
}

impl ExportRpc for ExportLogsServiceRequest {
    const SERVICE: &'static str = logs_service_server::SERVICE_NAME;
}

impl ExportRpc for ExportMetricsServiceRequest {
    const SERVICE: &'static str = metrics_service_server::SERVICE_NAME;
}

/// What answers an accepted or refused export request.
pub trait Export<T: OtlpBatch>: Send + Sync + 'static {
    /// What a request's admission holds until it is answered.
    type Admission: Send + 'static;

    /// Looks at a request's bytes before they are decoded: a refusal answers it
    /// without building anything.
    fn admit(&self, message: &[u8]) -> Result<Self::Admission, Status>;

    fn export(
        &self,
        request: Request<Admitted<T, Self::Admission>>,
    ) -> impl Future<Output = Result<Response<T::Response>, Status>> + Send;
}

/// A decoded request and what its admission holds.
pub struct Admitted<T, A> {
    pub data: T,
    pub admission: A,
}

/// The `Export` service of `T`: requests decoded from a slice, then answered by
/// `handler`.
pub struct ExportServer<T, H> {
    handler: Arc<H>,
    accept_compressed: EnabledCompressionEncodings,
    max_decoding_message_size: usize,
    _request: PhantomData<fn() -> T>,
}

impl<T, H> ExportServer<T, H> {
    pub fn new(handler: H, max_decoding_message_size: usize) -> Self {
        Self {
            handler: Arc::new(handler),
            accept_compressed: EnabledCompressionEncodings::default(),
            max_decoding_message_size,
            _request: PhantomData,
        }
    }

    #[must_use]
    pub fn accept_compressed(mut self, encoding: CompressionEncoding) -> Self {
        self.accept_compressed.enable(encoding);
        self
    }
}

impl<T, H> Clone for ExportServer<T, H> {
    fn clone(&self) -> Self {
        Self {
            handler: Arc::clone(&self.handler),
            accept_compressed: self.accept_compressed,
            max_decoding_message_size: self.max_decoding_message_size,
            _request: PhantomData,
        }
    }
}

impl<T: ExportRpc, H> NamedService for ExportServer<T, H> {
    const NAME: &'static str = T::SERVICE;
}

impl<T, H, B> Service<http::Request<B>> for ExportServer<T, H>
where
    T: ExportRpc,
    H: Export<T>,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != T::GRPC_PATH {
            // Another method of this service: none but `Export` exists.
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let codec = SliceCodec::<T, H>(Arc::clone(&self.handler), PhantomData);
        let mut grpc = Grpc::new(codec)
            .apply_compression_config(
                self.accept_compressed,
                EnabledCompressionEncodings::default(),
            )
            .apply_max_message_size_config(Some(self.max_decoding_message_size), None);
        let method = ExportMethod(Arc::clone(&self.handler), PhantomData);
        Box::pin(async move { Ok(grpc.unary(method, request).await) })
    }
}

/// The unary `Export` method, as tonic calls it once the request is decoded.
struct ExportMethod<T, H>(Arc<H>, PhantomData<fn() -> T>);

impl<T: OtlpBatch, H: Export<T>> UnaryService<Admitted<T, H::Admission>> for ExportMethod<T, H> {
    type Response = T::Response;
    type Future = BoxFuture<Response<T::Response>, Status>;

    fn call(&mut self, request: Request<Admitted<T, H::Admission>>) -> Self::Future {
        let handler = Arc::clone(&self.0);
        Box::pin(async move { handler.export(request).await })
    }
}

/// Admits and decodes `T` from the contiguous message, encodes the response with
/// prost.
struct SliceCodec<T, H>(Arc<H>, PhantomData<fn() -> T>);

impl<T: OtlpBatch, H: Export<T>> Codec for SliceCodec<T, H> {
    type Encode = T::Response;
    type Decode = Admitted<T, H::Admission>;
    type Encoder = ResponseEncoder<T::Response>;
    type Decoder = SliceDecoder<T, H>;

    fn encoder(&mut self) -> Self::Encoder {
        ResponseEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(Arc::clone(&self.0), PhantomData)
    }
}

struct SliceDecoder<T, H>(Arc<H>, PhantomData<fn() -> T>);

impl<T: OtlpBatch, H: Export<T>> Decoder for SliceDecoder<T, H> {
    type Item = Admitted<T, H::Admission>;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        // The message's bytes, split off tonic's buffer without a copy.
        let message = buf.copy_to_bytes(buf.remaining());
        let admission = self.0.admit(message.as_ref())?;
        // prost's message ("failed to decode Protobuf message: ..."), which the
        // receiver's status correction counts as a bad request.
        let data = T::decode(message.as_ref())
            .map_err(|err| Status::new(Code::InvalidArgument, err.to_string()))?;
        Ok(Some(Admitted { data, admission }))
    }
}

struct ResponseEncoder<R>(PhantomData<fn(R)>);

impl<R: Message> Encoder for ResponseEncoder<R> {
    type Item = R;
    type Error = Status;

    fn encode(&mut self, item: R, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // The buffer grows as needed, so encoding has no room to run out of.
        item.encode(buf)
            .map_err(|err| Status::internal(format!("encoding the response: {err}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use opscope_proto::ExportService as _;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceResponse;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use opscope_proto::prost::bytes::{BufMut, Bytes, BytesMut};
    use std::sync::Mutex;

    /// Keeps what it is given.
    #[derive(Default)]
    struct Keep(Mutex<Vec<ExportTraceServiceRequest>>);

    impl Export<ExportTraceServiceRequest> for Arc<Keep> {
        type Admission = ();

        fn admit(&self, _: &[u8]) -> Result<(), Status> {
            Ok(())
        }

        async fn export(
            &self,
            request: Request<Admitted<ExportTraceServiceRequest, ()>>,
        ) -> Result<Response<ExportTraceServiceResponse>, Status> {
            self.0.lock().unwrap().push(request.into_inner().data);
            Ok(Response::new(ExportTraceServiceResponse::default()))
        }
    }

    /// One gRPC message: uncompressed flag, big-endian length, bytes.
    fn framed(message: &[u8]) -> Bytes {
        let mut frame = BytesMut::new();
        frame.put_u8(0);
        frame.put_u32(message.len() as u32);
        frame.put_slice(message);
        frame.freeze()
    }

    /// Calls the server at `path` with `body`; the grpc-status of the answer and
    /// what the handler kept.
    async fn call(path: &str, body: Bytes) -> (Option<String>, Vec<ExportTraceServiceRequest>) {
        let kept = Arc::new(Keep::default());
        let mut server = ExportServer::new(Arc::clone(&kept), 1 << 20);
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://localhost{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(body))
            .unwrap();
        let response = server.call(request).await.unwrap();
        let header = response.headers().get("grpc-status").cloned();
        let collected = response.into_body().collect().await.unwrap();
        let status = header
            .or_else(|| collected.trailers()?.get("grpc-status").cloned())
            .map(|value| value.to_str().unwrap().to_string());
        let kept = std::mem::take(&mut *kept.0.lock().unwrap());
        (status, kept)
    }

    fn one_span() -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        name: "reconcile".into(),
                        trace_id: vec![7; 16],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[tokio::test]
    async fn decodes_the_request_from_its_bytes() {
        let request = one_span();
        let (status, kept) = call(
            ExportTraceServiceRequest::GRPC_PATH,
            framed(&request.encode_to_vec()),
        )
        .await;
        assert_eq!(status.as_deref(), Some("0"));
        assert_eq!(kept, vec![request]);
    }

    #[tokio::test]
    async fn undecodable_bytes_are_an_invalid_argument() {
        // A length-delimited field whose length runs past the end.
        let (status, kept) =
            call(ExportTraceServiceRequest::GRPC_PATH, framed(&[0x0a, 0x7f])).await;
        assert_eq!(status.as_deref(), Some("3"));
        assert!(kept.is_empty());
    }

    #[tokio::test]
    async fn another_method_is_unimplemented() {
        let path = format!("/{}/Other", trace_service_server::SERVICE_NAME);
        let (status, kept) = call(&path, framed(&one_span().encode_to_vec())).await;
        assert_eq!(status.as_deref(), Some("12"));
        assert!(kept.is_empty());
    }
}
