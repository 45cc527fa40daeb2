//! The sending queue: bounds, retries, durable storage, shedding and shutdown.

use super::*;
use crate::batch::Encoded;
use crate::exporter::Delivery;
use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
use opscope_proto::prost::Message;
use std::sync::Mutex;

/// Answers with the scripted results in order, then succeeds.
struct Scripted {
    script: Mutex<Vec<Result<Delivery, ExportError>>>,
    delivered: Mutex<usize>,
}

impl Exporter<ExportTraceServiceRequest> for Scripted {
    async fn export(&self, batch: &ExportTraceServiceRequest) -> Result<Delivery, ExportError> {
        let next = {
            let mut script = self.script.lock().unwrap();
            if script.is_empty() {
                Ok(Delivery::default())
            } else {
                script.remove(0)
            }
        };
        if next.is_ok() {
            *self.delivered.lock().unwrap() += batch.items();
        }
        next
    }
}

fn spans(n: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span::default(); n],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn fast_retry() -> RetryConfig {
    RetryConfig {
        initial_interval: Duration::from_millis(1),
        max_interval: Duration::from_millis(5),
        max_elapsed_time: Duration::from_secs(5),
        ..Default::default()
    }
}

async fn run(
    script: Vec<Result<Delivery, ExportError>>,
    retry: RetryConfig,
) -> (usize, QueueMetrics) {
    let exporter = Arc::new(Scripted {
        script: Mutex::new(script),
        delivered: Mutex::new(0),
    });
    let metrics = QueueMetrics::default();
    let (sender, mut queue) = SendingQueue::start(
        "test",
        Arc::clone(&exporter),
        &QueueConfig::default(),
        &retry,
        metrics.clone(),
        CancellationToken::new(),
        QueueStore::Memory(&MemoryAccount::default()),
    )
    .unwrap();
    sender.send(spans(3)).await.unwrap();
    drop(sender);
    queue.join().await;
    let delivered = *exporter.delivered.lock().unwrap();
    (delivered, metrics)
}

fn failed(metrics: &QueueMetrics, reason: &str) -> u64 {
    let labels = vec![("reason".to_string(), reason.to_string())];
    metrics.failed_items.get_or_create(&labels).get()
}

#[tokio::test]
async fn retryable_errors_are_retried_until_delivered() {
    let script = vec![
        Err(ExportError::retryable("unavailable")),
        Err(ExportError::retryable("unavailable")),
    ];
    let (delivered, metrics) = run(script, fast_retry()).await;
    assert_eq!(delivered, 3);
    assert_eq!(metrics.sent_items.get(), 3);
}

#[tokio::test]
async fn permanent_errors_are_dropped_and_counted() {
    let (delivered, metrics) = run(vec![Err(ExportError::permanent("bad"))], fast_retry()).await;
    assert_eq!(delivered, 0);
    assert_eq!(failed(&metrics, "permanent_error"), 3);
}

#[tokio::test]
async fn retries_stop_at_the_elapsed_time_budget() {
    let retry = RetryConfig {
        max_elapsed_time: Duration::from_millis(20),
        ..fast_retry()
    };
    let script = (0..1000)
        .map(|_| Err(ExportError::retryable("down")))
        .collect();
    let (delivered, metrics) = run(script, retry).await;
    assert_eq!(delivered, 0);
    assert_eq!(failed(&metrics, "retries_exhausted"), 3);
}

#[tokio::test]
async fn partial_rejections_are_counted() {
    let script = vec![Ok(Delivery {
        rejected_items: 1,
        message: "one bad".into(),
        ..Delivery::default()
    })];
    let (_, metrics) = run(script, fast_retry()).await;
    assert_eq!(metrics.sent_items.get(), 2);
    assert_eq!(failed(&metrics, "rejected"), 1);
}

/// Takes requests up to `limit` bytes, refusing larger ones for their size, and
/// says so in advance when `advertised`; the first request sent as the
/// `fail_once`-th fails once, retryably.
struct SizeLimited {
    limit: usize,
    advertised: bool,
    fail_once: Option<usize>,
    requests: Mutex<Vec<usize>>,
    names: Mutex<Vec<String>>,
}

impl SizeLimited {
    fn new(limit: usize, advertised: bool) -> Self {
        Self {
            limit,
            advertised,
            fail_once: None,
            requests: Mutex::default(),
            names: Mutex::default(),
        }
    }
}

impl Exporter<Encoded<ExportTraceServiceRequest>> for SizeLimited {
    async fn export(
        &self,
        batch: &Encoded<ExportTraceServiceRequest>,
    ) -> Result<Delivery, ExportError> {
        let attempt = {
            let mut requests = self.requests.lock().unwrap();
            requests.push(batch.request_size());
            requests.len()
        };
        if self.fail_once == Some(attempt) {
            return Err(ExportError::retryable("a blip"));
        }
        if batch.request_size() > self.limit {
            return Err(ExportError::TooLarge {
                reason: "RESOURCE_EXHAUSTED: message too large".into(),
            });
        }
        let request = ExportTraceServiceRequest::decode(batch.bytes()).unwrap();
        let names = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|span| span.name.clone());
        self.names.lock().unwrap().extend(names);
        Ok(Delivery::default())
    }

    fn max_request_size(&self) -> Option<usize> {
        self.advertised.then_some(self.limit)
    }
}

/// Spans named `0`, `1`, … of about `size` bytes each, the `big`-th of `big_size`.
fn named_spans(n: usize, size: usize, big: Option<(usize, usize)>) -> ExportTraceServiceRequest {
    let name = |i: usize| {
        let size = match big {
            Some((index, big_size)) if index == i => big_size,
            _ => size,
        };
        format!("{i:06}{}", "x".repeat(size))
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..n)
                    .map(|i| Span {
                        name: name(i),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

async fn send_encoded(
    exporter: &Arc<SizeLimited>,
    batch: &ExportTraceServiceRequest,
) -> QueueMetrics {
    let metrics = QueueMetrics::default();
    let (sender, mut queue) = SendingQueue::start(
        "test",
        Arc::clone(exporter),
        &QueueConfig::default(),
        &fast_retry(),
        metrics.clone(),
        CancellationToken::new(),
        QueueStore::Memory(&MemoryAccount::default()),
    )
    .unwrap();
    sender.send(Encoded::new(batch)).await.unwrap();
    drop(sender);
    queue.join().await;
    metrics
}

fn names_of(batch: &ExportTraceServiceRequest) -> Vec<String> {
    batch.resource_spans[0].scope_spans[0]
        .spans
        .iter()
        .map(|span| span.name.clone())
        .collect()
}

#[tokio::test]
async fn a_batch_over_max_request_size_goes_in_parts_and_every_item_arrives() {
    let batch = named_spans(3000, 100, None);
    let limit = 64 * 1024;
    let exporter = Arc::new(SizeLimited::new(limit, true));
    let metrics = send_encoded(&exporter, &batch).await;
    let requests = exporter.requests.lock().unwrap().clone();
    assert!(requests.len() >= 5, "{requests:?}");
    assert!(requests.iter().all(|&size| size <= limit), "{requests:?}");
    assert_eq!(*exporter.names.lock().unwrap(), names_of(&batch));
    assert_eq!(metrics.sent_items.get(), 3000);
}

#[tokio::test]
async fn a_batch_refused_for_its_size_is_sent_again_in_halves() {
    let batch = named_spans(3000, 100, None);
    let exporter = Arc::new(SizeLimited::new(100 * 1024, false));
    let metrics = send_encoded(&exporter, &batch).await;
    assert_eq!(*exporter.names.lock().unwrap(), names_of(&batch));
    assert_eq!(metrics.sent_items.get(), 3000);
    assert_eq!(failed(&metrics, "permanent_error"), 0);
}

#[tokio::test]
async fn only_an_item_over_the_limit_alone_is_dropped_as_too_large() {
    let batch = named_spans(1000, 100, Some((500, 200 * 1024)));
    let mut expected = names_of(&batch);
    expected.remove(500);
    for advertised in [true, false] {
        let exporter = Arc::new(SizeLimited::new(64 * 1024, advertised));
        let metrics = send_encoded(&exporter, &batch).await;
        assert_eq!(
            *exporter.names.lock().unwrap(),
            expected,
            "advertised: {advertised}"
        );
        assert_eq!(metrics.sent_items.get(), 999);
        assert_eq!(failed(&metrics, "too_large"), 1);
    }
}

#[tokio::test]
async fn a_part_delivered_is_not_sent_again_when_another_is_retried() {
    let batch = named_spans(3000, 100, None);
    let mut exporter = SizeLimited::new(64 * 1024, true);
    exporter.fail_once = Some(3);
    let exporter = Arc::new(exporter);
    let metrics = send_encoded(&exporter, &batch).await;
    assert_eq!(
        *exporter.names.lock().unwrap(),
        names_of(&batch),
        "no span twice"
    );
    assert_eq!(metrics.sent_items.get(), 3000);
}

#[tokio::test]
async fn a_small_request_refused_for_its_size_is_not_cut_further() {
    // A refusal at 1 KiB is not about size: the batch is given up, not cut into
    // hundreds of requests.
    let batch = named_spans(300, 100, None);
    let exporter = Arc::new(SizeLimited::new(1024, false));
    let metrics = send_encoded(&exporter, &batch).await;
    assert_eq!(exporter.requests.lock().unwrap().len(), 1);
    assert_eq!(failed(&metrics, "permanent_error"), 300);
}

/// Panics on every batch, as an exporter whose timeout overflowed an instant did.
struct Panicking;

impl Exporter<ExportTraceServiceRequest> for Panicking {
    async fn export(&self, _: &ExportTraceServiceRequest) -> Result<Delivery, ExportError> {
        panic!("overflow when adding duration to instant");
    }
}

#[tokio::test]
async fn a_consumer_that_panics_is_reported_and_one_that_ends_is_not() {
    let start = |exporter| {
        SendingQueue::start(
            "otlp/panics",
            exporter,
            &QueueConfig::default(),
            &fast_retry(),
            QueueMetrics::default(),
            CancellationToken::new(),
            QueueStore::Memory(&MemoryAccount::default()),
        )
        .unwrap()
    };
    let (sender, mut queue) = start(Panicking);
    assert_eq!(queue.exporter(), "otlp/panics");
    sender.send(spans(1)).await.unwrap();
    let error = tokio::time::timeout(
        Duration::from_secs(5),
        std::future::poll_fn(|cx| queue.poll_panicked(cx)),
    )
    .await
    .expect("the panic is reported");
    let message = error.into_panic();
    assert_eq!(
        message.downcast_ref::<&str>(),
        Some(&"overflow when adding duration to instant")
    );

    // Consumers that end because every sender is gone are not a panic.
    let (sender, mut queue) = start(Panicking);
    drop(sender);
    queue.join().await;
    let mut context = Context::from_waker(std::task::Waker::noop());
    assert!(queue.poll_panicked(&mut context).is_pending());
}
