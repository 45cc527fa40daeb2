//! Drives an OTLP endpoint with an [`OperatorWorkload`]: a few concurrent senders
//! over gRPC or HTTP, at a fixed rate of items per second or as fast as the
//! endpoint accepts, counting what was accepted and what refused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opscope_processors::tagger::{OperatorTagger, TaggerConfig};
use opscope_proto::otlp::collector::logs::v1::logs_service_client::LogsServiceClient;
use opscope_proto::otlp::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opscope_proto::otlp::collector::trace::v1::trace_service_client::TraceServiceClient;
use opscope_workload::{OperatorWorkload, WorkloadConfig, WorkloadConfigError};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::signal::{Payload, Signal};
use opscope_model::timestamp::now_unix_nanos;

/// After a refusal a sender waits this long, as an SDK would back off.
const REFUSED_BACKOFF: Duration = Duration::from_millis(20);
const MAX_MESSAGE_SIZE: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Grpc,
    Http,
}

/// What to send, where, how fast and for how long.
#[derive(Debug, Clone)]
pub struct LoadSettings {
    /// `http://host:port` of the OTLP receiver (gRPC or HTTP, per `transport`).
    pub endpoint: String,
    pub transport: Transport,
    pub signal: Signal,
    /// Items per second; `None` sends as fast as the endpoint accepts.
    pub rate: Option<f64>,
    /// Stop after this long...
    pub duration: Option<Duration>,
    /// ...or after this many requests, whichever comes first.
    pub max_requests: Option<u64>,
    /// Items per request (spans: whole reconciles, so a few more).
    pub batch: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    pub workload: WorkloadConfig,
    /// Tag each request before it is sent (here, not in the collector measured), as
    /// an agent of the gateway tier has.
    pub tagged: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Workload(#[from] WorkloadConfigError),
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("HTTP client: {0}")]
    HttpClient(reqwest::Error),
    #[error("a run needs a duration or a request limit, a batch and a concurrency of at least 1")]
    Unbounded,
}

/// What a run sent and how it was answered.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadCounts {
    pub requests: u64,
    pub sent: u64,
    pub accepted: u64,
    /// Refused with a retryable answer (gRPC `UNAVAILABLE`/`RESOURCE_EXHAUSTED`, HTTP
    /// 429/503) or rejected in a partial success.
    pub refused: u64,
    /// Failed otherwise (connection errors, other status codes).
    pub failed: u64,
    pub elapsed: Duration,
}

impl LoadCounts {
    pub fn accepted_per_second(&self) -> f64 {
        self.accepted as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Counters shared by the senders, readable while a run goes on.
#[derive(Debug, Default)]
pub struct LiveCounts {
    requests: AtomicU64,
    sent: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

impl LiveCounts {
    pub fn snapshot(&self, elapsed: Duration) -> LoadCounts {
        LoadCounts {
            requests: self.requests.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            elapsed,
        }
    }
}

enum Answer {
    Accepted { rejected: u64 },
    Refused,
    Failed,
}

#[derive(Clone)]
enum Client {
    Grpc(Channel),
    Http {
        client: reqwest::Client,
        url: String,
    },
}

impl Client {
    async fn connect(settings: &LoadSettings) -> Result<Self, LoadError> {
        match settings.transport {
            Transport::Grpc => {
                let connect_error = |source| LoadError::Connect {
                    endpoint: settings.endpoint.clone(),
                    source,
                };
                let channel = Endpoint::from_shared(settings.endpoint.clone())
                    .map_err(connect_error)?
                    .connect()
                    .await
                    .map_err(connect_error)?;
                Ok(Client::Grpc(channel))
            }
            Transport::Http => {
                // reqwest is built without a default crypto provider; plain HTTP
                // still needs one installed.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let client = reqwest::Client::builder()
                    .build()
                    .map_err(LoadError::HttpClient)?;
                let url = format!(
                    "{}{}",
                    settings.endpoint.trim_end_matches('/'),
                    settings.signal.http_path()
                );
                Ok(Client::Http { client, url })
            }
        }
    }

    async fn send(&self, payload: Payload) -> Answer {
        match self {
            Client::Grpc(channel) => send_grpc(channel.clone(), payload).await,
            Client::Http { client, url } => {
                let response = client
                    .post(url)
                    .header("content-type", "application/x-protobuf")
                    .body(payload.encode_to_vec())
                    .send()
                    .await;
                match response.map(|r| r.status().as_u16()) {
                    Ok(200..=299) => Answer::Accepted { rejected: 0 },
                    Ok(429 | 503) => Answer::Refused,
                    _ => Answer::Failed,
                }
            }
        }
    }
}

async fn send_grpc(channel: Channel, payload: Payload) -> Answer {
    let answer = match payload {
        Payload::Traces(request) => TraceServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .export(request)
            .await
            .map(|r| {
                r.into_inner()
                    .partial_success
                    .map_or(0, |p| p.rejected_spans)
            }),
        Payload::Logs(request) => LogsServiceClient::new(channel)
            .export(request)
            .await
            .map(|r| {
                r.into_inner()
                    .partial_success
                    .map_or(0, |p| p.rejected_log_records)
            }),
        Payload::Metrics(request) => MetricsServiceClient::new(channel)
            .export(request)
            .await
            .map(|r| {
                r.into_inner()
                    .partial_success
                    .map_or(0, |p| p.rejected_data_points)
            }),
    };
    match answer {
        Ok(rejected) => Answer::Accepted {
            rejected: u64::try_from(rejected).unwrap_or(0),
        },
        Err(status) if matches!(status.code(), Code::Unavailable | Code::ResourceExhausted) => {
            Answer::Refused
        }
        Err(_) => Answer::Failed,
    }
}

/// Runs the load until its duration or request limit is reached, or `stop` is set;
/// `live` is updated as requests are answered.
pub async fn run(
    settings: &LoadSettings,
    live: Arc<LiveCounts>,
    stop: Arc<AtomicBool>,
) -> Result<LoadCounts, LoadError> {
    if (settings.duration.is_none() && settings.max_requests.is_none())
        || settings.batch == 0
        || settings.concurrency == 0
    {
        return Err(LoadError::Unbounded);
    }
    let workload = Arc::new(Mutex::new(OperatorWorkload::new(
        settings.workload.clone(),
        now_unix_nanos(),
    )?));
    let client = Client::connect(settings).await?;
    let started = Instant::now();
    // Items handed out so far; at a fixed rate, item n is due at n / rate seconds.
    let scheduled = Arc::new(AtomicU64::new(0));
    let senders: Vec<_> = (0..settings.concurrency)
        .map(|_| {
            let sender = Sender {
                settings: settings.clone(),
                tagger: settings
                    .tagged
                    .then(|| OperatorTagger::new(&TaggerConfig::default())),
                client: client.clone(),
                workload: workload.clone(),
                live: live.clone(),
                stop: stop.clone(),
                scheduled: scheduled.clone(),
                started,
            };
            tokio::spawn(sender.run())
        })
        .collect();
    for sender in senders {
        let _ = sender.await;
    }
    Ok(live.snapshot(started.elapsed()))
}

struct Sender {
    settings: LoadSettings,
    tagger: Option<OperatorTagger>,
    client: Client,
    workload: Arc<Mutex<OperatorWorkload>>,
    live: Arc<LiveCounts>,
    stop: Arc<AtomicBool>,
    scheduled: Arc<AtomicU64>,
    started: Instant,
}

impl Sender {
    async fn run(mut self) {
        let mut tagger = self.tagger.take();
        let settings = &self.settings;
        loop {
            if self.stop.load(Ordering::Relaxed)
                || settings
                    .duration
                    .is_some_and(|d| self.started.elapsed() >= d)
            {
                return;
            }
            // Claims a request slot; past the limit, this sender is done.
            let request_number = self.live.requests.fetch_add(1, Ordering::Relaxed);
            if settings
                .max_requests
                .is_some_and(|max| request_number >= max)
            {
                self.live.requests.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            if let Some(rate) = settings.rate {
                let due = self
                    .scheduled
                    .fetch_add(settings.batch as u64, Ordering::Relaxed)
                    as f64
                    / rate;
                tokio::time::sleep_until((self.started + Duration::from_secs_f64(due)).into())
                    .await;
                // A request due after the end is not sent.
                if settings
                    .duration
                    .is_some_and(|d| self.started.elapsed() >= d)
                {
                    self.live.requests.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
            }
            let (mut payload, items) = {
                let mut workload = self.workload.lock().unwrap_or_else(PoisonError::into_inner);
                Payload::generate(
                    &mut workload,
                    settings.signal,
                    settings.batch,
                    now_unix_nanos(),
                )
            };
            if let Some(tagger) = &mut tagger {
                match &mut payload {
                    Payload::Traces(request) => tagger.tag_traces(request),
                    Payload::Logs(request) => tagger.tag_logs(request),
                    Payload::Metrics(_) => {}
                }
            }
            let items = items as u64;
            // Whole reconciles may overshoot the batch: later requests are due later.
            self.scheduled.fetch_add(
                items.saturating_sub(settings.batch as u64),
                Ordering::Relaxed,
            );
            let answer = self.client.send(payload).await;
            // Counted with its answer, so that sent = accepted + refused + failed at
            // every instant the counts are read.
            self.live.sent.fetch_add(items, Ordering::Relaxed);
            match answer {
                Answer::Accepted { rejected } => {
                    self.live
                        .accepted
                        .fetch_add(items.saturating_sub(rejected), Ordering::Relaxed);
                    self.live
                        .refused
                        .fetch_add(rejected.min(items), Ordering::Relaxed);
                }
                Answer::Refused => {
                    self.live.refused.fetch_add(items, Ordering::Relaxed);
                    tokio::time::sleep(REFUSED_BACKOFF).await;
                }
                Answer::Failed => {
                    self.live.failed.fetch_add(items, Ordering::Relaxed);
                    tokio::time::sleep(REFUSED_BACKOFF).await;
                }
            }
        }
    }
}
