//! `OtlpSink`: a stand-in downstream (OTLP/gRPC or OTLP/HTTP) that records what it receives and can fail or stall on demand.
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs};
use opentelemetry_proto::tonic::metrics::v1::{Metric, ResourceMetrics, metric::Data};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};
use opscope_testkit::otlp_grpc::{ExportHandler, export_services};
use prost::Message;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Status};
use tower_http::decompression::RequestDecompressionLayer;

use super::wait_until;

/// Large enough for any batch a test sends; the agent's own limits are what is under test.
const MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;

/// How a sink answers the export requests it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Record the request and answer success.
    Accept,
    /// Answer `code` (over HTTP: its usual HTTP equivalent) to the next `times` requests
    /// without recording them, then accept.
    Fail { code: Code, times: usize },
    /// Leave requests unanswered until the behaviour is changed, e.g. by [`OtlpSink::release`].
    Hold,
}

/// The requests a sink accepted, per signal, in arrival order.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub traces: Vec<ExportTraceServiceRequest>,
    pub logs: Vec<ExportLogsServiceRequest>,
    pub metrics: Vec<ExportMetricsServiceRequest>,
}

impl Received {
    pub fn resource_spans(&self) -> impl Iterator<Item = &ResourceSpans> {
        self.traces
            .iter()
            .flat_map(|request| &request.resource_spans)
    }

    pub fn spans(&self) -> impl Iterator<Item = &Span> {
        self.resource_spans()
            .flat_map(|resource| &resource.scope_spans)
            .flat_map(|scope| &scope.spans)
    }

    pub fn resource_logs(&self) -> impl Iterator<Item = &ResourceLogs> {
        self.logs.iter().flat_map(|request| &request.resource_logs)
    }

    pub fn log_records(&self) -> impl Iterator<Item = &LogRecord> {
        self.resource_logs()
            .flat_map(|resource| &resource.scope_logs)
            .flat_map(|scope| &scope.log_records)
    }

    pub fn resource_metrics(&self) -> impl Iterator<Item = &ResourceMetrics> {
        self.metrics
            .iter()
            .flat_map(|request| &request.resource_metrics)
    }

    pub fn metrics(&self) -> impl Iterator<Item = &Metric> {
        self.resource_metrics()
            .flat_map(|resource| &resource.scope_metrics)
            .flat_map(|scope| &scope.metrics)
    }

    /// The resources of all signals.
    pub fn resources(&self) -> impl Iterator<Item = Option<&Resource>> {
        let traces = self.resource_spans().map(|r| r.resource.as_ref());
        let logs = self.resource_logs().map(|r| r.resource.as_ref());
        let metrics = self.resource_metrics().map(|r| r.resource.as_ref());
        traces.chain(logs).chain(metrics)
    }

    /// The instrumentation scopes of all signals.
    pub fn scopes(&self) -> impl Iterator<Item = Option<&InstrumentationScope>> {
        let traces = self.resource_spans().flat_map(|r| &r.scope_spans);
        let logs = self.resource_logs().flat_map(|r| &r.scope_logs);
        let metrics = self.resource_metrics().flat_map(|r| &r.scope_metrics);
        (traces.map(|s| s.scope.as_ref()))
            .chain(logs.map(|s| s.scope.as_ref()))
            .chain(metrics.map(|s| s.scope.as_ref()))
    }

    pub fn span_count(&self) -> usize {
        self.spans().count()
    }

    pub fn log_record_count(&self) -> usize {
        self.log_records().count()
    }

    /// Data points of every kind (gauge, sum, histograms, summary).
    pub fn metric_point_count(&self) -> usize {
        self.metrics().map(data_point_count).sum()
    }
}

fn data_point_count(metric: &Metric) -> usize {
    match &metric.data {
        Some(Data::Gauge(gauge)) => gauge.data_points.len(),
        Some(Data::Sum(sum)) => sum.data_points.len(),
        Some(Data::Histogram(histogram)) => histogram.data_points.len(),
        Some(Data::ExponentialHistogram(histogram)) => histogram.data_points.len(),
        Some(Data::Summary(summary)) => summary.data_points.len(),
        None => 0,
    }
}

/// An OTLP server on a free loopback port, served by its own Tokio runtime (so it works
/// from sync and async tests alike) and stopped on drop.
pub struct OtlpSink {
    recorder: Arc<Recorder>,
    addr: SocketAddr,
    runtime: Option<Runtime>,
}

impl OtlpSink {
    /// An OTLP/gRPC server (trace, logs and metrics services; gzip and zstd accepted).
    pub fn grpc() -> Self {
        Self::serve(|listener, recorder| async move {
            export_services(recorder, MAX_MESSAGE_SIZE)
                .serve_with_incoming(TcpIncoming::from(listener))
                .await
                .expect("serve the gRPC sink");
        })
    }

    /// An OTLP/HTTP server: `POST /v1/traces`, `/v1/logs`, `/v1/metrics` with protobuf
    /// bodies, plain or gzip-encoded.
    pub fn http() -> Self {
        Self::serve(|listener, recorder| async move {
            let app = Router::new()
                .route("/v1/traces", post(export_traces))
                .route("/v1/logs", post(export_logs))
                .route("/v1/metrics", post(export_metrics))
                .layer(RequestDecompressionLayer::new())
                .with_state(recorder);
            axum::serve(listener, app)
                .await
                .expect("serve the HTTP sink");
        })
    }

    fn serve<F, Server>(server: F) -> Self
    where
        F: FnOnce(TcpListener, Arc<Recorder>) -> Server,
        Server: Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-sink")
            .enable_all()
            .build()
            .expect("build the sink runtime");
        let listener = StdTcpListener::bind("127.0.0.1:0").expect("bind the sink port");
        listener
            .set_nonblocking(true)
            .expect("make the sink socket non-blocking");
        let addr = listener.local_addr().expect("sink address");
        let listener = {
            let _context = runtime.enter();
            TcpListener::from_std(listener).expect("register the sink socket")
        };
        let recorder = Arc::new(Recorder::new());
        runtime.spawn(server(listener, recorder.clone()));
        OtlpSink {
            recorder,
            addr,
            runtime: Some(runtime),
        }
    }

    /// The URL to configure as the exporter's `endpoint` (for OTLP/HTTP, the base URL).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set_behaviour(&self, behaviour: Behaviour) {
        self.recorder.behaviour.send_replace(behaviour);
    }

    /// Answers the held requests and every later one with success.
    pub fn release(&self) {
        self.set_behaviour(Behaviour::Accept);
    }

    /// Requests that arrived so far, whatever the answer (accepted, failed or held).
    pub fn attempts(&self) -> usize {
        self.recorder.attempts.load(Ordering::SeqCst)
    }

    /// A copy of everything accepted so far.
    pub fn received(&self) -> Received {
        self.recorder.received().clone()
    }

    pub fn span_count(&self) -> usize {
        self.recorder.received().span_count()
    }

    pub fn log_record_count(&self) -> usize {
        self.recorder.received().log_record_count()
    }

    pub fn metric_point_count(&self) -> usize {
        self.recorder.received().metric_point_count()
    }

    /// Waits up to `timeout` until what was accepted satisfies `predicate`; returns whether it did.
    pub fn wait_for(&self, timeout: Duration, predicate: impl Fn(&Received) -> bool) -> bool {
        wait_until(timeout, || predicate(&self.recorder.received()))
    }
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// What a sink's request handlers share with the test.
struct Recorder {
    received: Mutex<Received>,
    behaviour: watch::Sender<Behaviour>,
    attempts: AtomicUsize,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            received: Mutex::default(),
            behaviour: watch::Sender::new(Behaviour::Accept),
            attempts: AtomicUsize::new(0),
        }
    }

    fn received(&self) -> MutexGuard<'_, Received> {
        self.received.lock().expect("sink state lock")
    }

    /// Decides the answer to one request: waits while the sink holds, then either lets it
    /// through or counts down a programmed failure.
    async fn admit(&self) -> Result<(), Code> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let mut behaviour = self.behaviour.subscribe();
        // Fails only if the sender is gone, and the sender lives as long as `self`.
        let _ = behaviour.wait_for(|b| *b != Behaviour::Hold).await;
        let mut verdict = Ok(());
        self.behaviour.send_if_modified(|behaviour| {
            if let Behaviour::Fail { code, times } = behaviour {
                if *times > 0 {
                    verdict = Err(*code);
                    *times -= 1;
                }
                if *times == 0 {
                    *behaviour = Behaviour::Accept;
                }
            }
            false // nobody waits for a change between Fail and Accept
        });
        verdict
    }

    async fn export_grpc<T>(&self, request: T, store: fn(&mut Received, T)) -> Result<(), Status> {
        self.admit()
            .await
            .map_err(|code| Status::new(code, "the test sink was told to fail"))?;
        store(&mut self.received(), request);
        Ok(())
    }
}

impl ExportHandler for Recorder {
    async fn traces(&self, request: ExportTraceServiceRequest) -> Result<(), Status> {
        self.export_grpc(request, |received, request| received.traces.push(request))
            .await
    }

    async fn logs(&self, request: ExportLogsServiceRequest) -> Result<(), Status> {
        self.export_grpc(request, |received, request| received.logs.push(request))
            .await
    }

    async fn metrics(&self, request: ExportMetricsServiceRequest) -> Result<(), Status> {
        self.export_grpc(request, |received, request| received.metrics.push(request))
            .await
    }
}

async fn export_traces(State(recorder): State<Arc<Recorder>>, body: Bytes) -> HttpResponse {
    export_http::<_, ExportTraceServiceResponse>(&recorder, body, |received, request| {
        received.traces.push(request)
    })
    .await
}

async fn export_logs(State(recorder): State<Arc<Recorder>>, body: Bytes) -> HttpResponse {
    export_http::<_, ExportLogsServiceResponse>(&recorder, body, |received, request| {
        received.logs.push(request)
    })
    .await
}

async fn export_metrics(State(recorder): State<Arc<Recorder>>, body: Bytes) -> HttpResponse {
    export_http::<_, ExportMetricsServiceResponse>(&recorder, body, |received, request| {
        received.metrics.push(request)
    })
    .await
}

async fn export_http<Req, Resp>(
    recorder: &Recorder,
    body: Bytes,
    store: fn(&mut Received, Req),
) -> HttpResponse
where
    Req: Message + Default,
    Resp: Message + Default,
{
    let request = match Req::decode(body) {
        Ok(request) => request,
        Err(error) => return (StatusCode::BAD_REQUEST, error.to_string()).into_response(),
    };
    if let Err(code) = recorder.admit().await {
        let message = format!("the test sink was told to fail with {code:?}");
        return (http_status(code), message).into_response();
    }
    store(&mut recorder.received(), request);
    let response = Resp::default().encode_to_vec();
    ([(CONTENT_TYPE, "application/x-protobuf")], response).into_response()
}

/// The HTTP status an OTLP/HTTP server answers where a gRPC server would answer `code`.
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound | Code::Unimplemented => StatusCode::NOT_FOUND,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
