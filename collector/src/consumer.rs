//! The receivers' side of the pipelines: a receiver hands each request to every
//! pipeline that lists it, all or none, and is told to refuse when one is full or
//! its memory limiter is over the soft limit. A pipeline whose exporters acknowledge
//! durably also says when the request is in their queues, and the receiver answers
//! its client only then.

use opscope_model::Telemetry;
use opscope_model::memory::{MemoryAccount, MemoryHold};
use opscope_processors::memory_limiter::MemoryLimiter;
use opscope_processors::{CorrelatorEvents, Taggable};
use opscope_proto::ExportService;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::oneshot;

/// What the collector needs of a batch type: the model's view of it, the OTLP
/// service facts receivers and exporters use, and the tagger's and correlator's
/// reading of its records.
pub trait OtlpBatch: Telemetry + ExportService + Taggable + CorrelatorEvents {}

impl<T: Telemetry + ExportService + Taggable + CorrelatorEvents> OtlpBatch for T {}

/// A request on its way into a pipeline.
pub struct Input<T> {
    pub data: T,
    /// Signalled once the data is in the sending queue of every exporter of the
    /// pipeline; dropped unsignalled when it could not be queued.
    pub acknowledge: Option<oneshot::Sender<()>>,
    /// The request's bytes, counted in the process's memory account from the moment
    /// it is handed over.
    pub hold: MemoryHold,
}

/// Where receivers hand a pipeline their requests, and what decides whether it takes them.
pub struct PipelineInput<T> {
    pub sender: mpsc::Sender<Input<T>>,
    /// Whether receivers wait for the pipeline's exporters to queue what they sent.
    pub acknowledges_durably: bool,
    /// The pipeline's memory limiter, consulted before a request enters.
    pub limiter: Option<MemoryLimiter>,
    pub account: MemoryAccount,
}

impl<T> Clone for PipelineInput<T> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            acknowledges_durably: self.acknowledges_durably,
            limiter: self.limiter.clone(),
            account: self.account.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A pipeline's input queue is full: the client should retry later.
    Full,
    /// The pipelines are shutting down.
    Closed,
    /// No pipeline of this signal type lists the receiver.
    NoPipeline,
    /// A pipeline took the request but could not confirm that its exporters' queues
    /// hold it (it shut down): the client should send it again.
    NotQueued,
    /// A pipeline's memory limiter is above its soft limit: the client should retry later.
    MemoryLimit,
}

impl Refusal {
    /// The `reason` label of the refused-items counters.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Full => "pipeline_full",
            Self::Closed => "shutting_down",
            Self::NoPipeline => "no_pipeline",
            Self::NotQueued => "not_queued",
            Self::MemoryLimit => "memory_limit",
        }
    }

    /// Whether the client may send the same request again later.
    pub fn is_retryable(self) -> bool {
        match self {
            Self::Full | Self::Closed | Self::NotQueued | Self::MemoryLimit => true,
            Self::NoPipeline => false,
        }
    }
}

/// The confirmations due for data handed to pipelines that acknowledge durably;
/// empty when none does.
#[derive(Debug, Default)]
pub struct Acknowledgements(Vec<oneshot::Receiver<()>>);

impl Acknowledgements {
    /// Adds the confirmations of later data.
    pub fn extend(&mut self, later: Acknowledgements) {
        self.0.extend(later.0);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Without waiting: `Some(true)` once every confirmation came, `Some(false)` if a
    /// pipeline dropped one (the data may not be queued), `None` while some are due.
    pub fn settled(&mut self) -> Option<bool> {
        let mut failed = false;
        self.0
            .retain_mut(|acknowledged| match acknowledged.try_recv() {
                Ok(()) => false,
                Err(oneshot::error::TryRecvError::Empty) => true,
                Err(oneshot::error::TryRecvError::Closed) => {
                    failed = true;
                    false
                }
            });
        if failed {
            return Some(false);
        }
        self.0.is_empty().then_some(true)
    }

    /// Waits, blocking the thread, for every confirmation; false if one failed. For
    /// receivers that do their work on blocking threads.
    pub fn wait_blocking(self) -> bool {
        self.0
            .into_iter()
            .all(|acknowledged| acknowledged.blocking_recv().is_ok())
    }
}

/// The inputs of the pipelines one receiver feeds with one signal type.
pub struct Consumer<T> {
    inputs: Vec<PipelineInput<T>>,
}

impl<T> Default for Consumer<T> {
    fn default() -> Self {
        Self { inputs: Vec::new() }
    }
}

impl<T> Clone for Consumer<T> {
    fn clone(&self) -> Self {
        Self {
            inputs: self.inputs.clone(),
        }
    }
}

impl<T> Consumer<T> {
    /// The memory limiters of the pipelines, for what a receiver holds before it
    /// hands a request over (bodies still arriving).
    pub fn memory_limiters(&self) -> impl Iterator<Item = &MemoryLimiter> {
        self.inputs
            .iter()
            .filter_map(|input| input.limiter.as_ref())
    }
}

impl<T: Telemetry> Consumer<T> {
    pub fn add_input(&mut self, input: PipelineInput<T>) {
        self.inputs.push(input);
    }

    /// Hands `data` to every pipeline, or to none when any of them has no room, so a
    /// refused request can be retried without duplicating what was accepted. Does not
    /// wait for pipelines that acknowledge durably: for sources with no client to
    /// answer.
    pub fn push(&self, data: T) -> Result<(), Refusal> {
        self.hand_over(data, false).map(drop)
    }

    /// Like [`push`](Self::push), then waits until every pipeline that acknowledges
    /// durably has the data in its exporters' queues: what a receiver answers its
    /// client after.
    pub async fn deliver(&self, data: T) -> Result<(), Refusal> {
        for acknowledged in self.push_acknowledged(data)?.0 {
            acknowledged.await.map_err(|_| Refusal::NotQueued)?;
        }
        Ok(())
    }

    /// Like [`push`](Self::push), returning what will tell when the pipelines that
    /// acknowledge durably have the data in their exporters' queues.
    pub fn push_acknowledged(&self, data: T) -> Result<Acknowledgements, Refusal> {
        self.hand_over(data, true).map(Acknowledgements)
    }

    /// Reserves `bytes` in the memory account for data about to be built (a request
    /// being decoded), refused as a hand-over of that size would be; counted until the
    /// hold is dropped. `None` when no pipeline counts memory.
    pub fn reserve(&self, bytes: u64) -> Result<Option<MemoryHold>, Refusal> {
        let Some(first) = self.inputs.first() else {
            return Ok(None);
        };
        let bytes = first.account.size_of(|| bytes);
        if self.any_over_limit(bytes) {
            return Err(Refusal::MemoryLimit);
        }
        Ok((bytes > 0).then(|| first.account.hold(bytes)))
    }

    /// Whether a pipeline's memory limiter would refuse `bytes` more.
    fn any_over_limit(&self, bytes: u64) -> bool {
        self.inputs.iter().any(|input| {
            input
                .limiter
                .as_ref()
                .is_some_and(|limiter| !limiter.admits(bytes))
        })
    }

    fn hand_over(&self, data: T, wait: bool) -> Result<Vec<oneshot::Receiver<()>>, Refusal> {
        let counting = self.inputs.first().map(|input| &input.account);
        let bytes = counting.map_or(0, |account| account.size_of(|| data.memory_size()));
        if self.any_over_limit(bytes) {
            return Err(Refusal::MemoryLimit);
        }
        let mut permits = Vec::with_capacity(self.inputs.len());
        for input in &self.inputs {
            let permit = input.sender.try_reserve().map_err(|err| match err {
                TrySendError::Full(()) => Refusal::Full,
                TrySendError::Closed(()) => Refusal::Closed,
            })?;
            permits.push((permit, input, input.acknowledges_durably && wait));
        }
        let mut waits = Vec::new();
        let mut input = |data: T, pipeline: &PipelineInput<T>, acknowledged: bool| {
            let acknowledge = acknowledged.then(|| {
                let (sender, receiver) = oneshot::channel();
                waits.push(receiver);
                sender
            });
            // Each pipeline holds a copy of its own.
            let hold = pipeline.account.hold(bytes);
            Input {
                data,
                acknowledge,
                hold,
            }
        };
        let (last, last_pipeline, last_acknowledged) = permits.pop().ok_or(Refusal::NoPipeline)?;
        for (permit, pipeline, acknowledged) in permits {
            permit.send(input(data.clone(), pipeline, acknowledged));
        }
        last.send(input(data, last_pipeline, last_acknowledged));
        Ok(waits)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opscope_processors::memory_limiter::Limits;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};

    use super::*;

    type Traces = ExportTraceServiceRequest;

    /// A request with `n` spans, told apart by their count.
    fn spans(n: usize) -> Traces {
        Traces {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span::default(); n],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn input(
        capacity: usize,
        durable: bool,
        account: &MemoryAccount,
    ) -> (PipelineInput<Traces>, mpsc::Receiver<Input<Traces>>) {
        let (sender, receiver) = mpsc::channel(capacity);
        let input = PipelineInput {
            sender,
            acknowledges_durably: durable,
            limiter: None,
            account: account.clone(),
        };
        (input, receiver)
    }

    fn count(input: Option<Input<Traces>>) -> Option<usize> {
        input.map(|i| i.data.item_count())
    }

    #[tokio::test]
    async fn all_or_none() {
        let account = MemoryAccount::default();
        let (roomy, mut roomy_rx) = input(4, false, &account);
        let (tight, mut tight_rx) = input(1, false, &account);
        let mut consumer = Consumer::default();
        consumer.add_input(roomy);
        consumer.add_input(tight);
        assert_eq!(consumer.push(spans(1)), Ok(()));
        assert_eq!(consumer.push(spans(2)), Err(Refusal::Full));
        assert_eq!(count(roomy_rx.recv().await), Some(1));
        assert_eq!(count(tight_rx.recv().await), Some(1));
        assert!(
            roomy_rx.try_recv().is_err(),
            "a refused push must not reach any pipeline"
        );
        assert_eq!(
            Consumer::<Traces>::default().push(spans(1)),
            Err(Refusal::NoPipeline)
        );
    }

    #[tokio::test]
    async fn each_pipeline_holds_the_bytes_of_its_copy_until_it_lets_go() {
        let account = MemoryAccount::default();
        let (first, mut first_rx) = input(4, false, &account);
        let (second, mut second_rx) = input(4, false, &account);
        let mut consumer = Consumer::default();
        consumer.add_input(first);
        consumer.add_input(second);
        let request = spans(3);
        let size = request.memory_size();
        consumer.push(request).unwrap();
        assert_eq!(account.bytes(), 2 * size);
        drop(first_rx.recv().await);
        assert_eq!(account.bytes(), size);
        drop(second_rx.recv().await);
        assert_eq!(account.bytes(), 0);
    }

    #[tokio::test]
    async fn a_limiter_over_its_soft_limit_refuses_for_every_pipeline() {
        let account = MemoryAccount::default();
        let limits = Limits {
            soft: 1000,
            hard: 2000,
        };
        let limiter = MemoryLimiter::new(limits, Duration::from_secs(1), account.clone(), 0);
        let (limited, mut limited_rx) = input(4, false, &account);
        let (free, mut free_rx) = input(4, false, &account);
        let mut consumer = Consumer::default();
        consumer.add_input(PipelineInput {
            limiter: Some(limiter.clone()),
            ..limited
        });
        consumer.add_input(free);
        assert_eq!(consumer.push(spans(1)), Ok(()));
        limiter.observe(1500);
        assert_eq!(consumer.push(spans(1)), Err(Refusal::MemoryLimit));
        assert!(Refusal::MemoryLimit.is_retryable());
        assert_eq!(count(limited_rx.recv().await), Some(1));
        assert_eq!(count(free_rx.recv().await), Some(1));
        assert!(free_rx.try_recv().is_err(), "refused for all pipelines");
        limiter.observe(10);
        assert_eq!(consumer.push(spans(2)), Ok(()));
    }

    #[tokio::test]
    async fn delivery_waits_for_the_durable_pipelines_only() {
        let account = MemoryAccount::default();
        let (durable, mut durable_rx) = input(4, true, &account);
        let (plain, mut plain_rx) = input(4, false, &account);
        let mut consumer = Consumer::default();
        consumer.add_input(durable);
        consumer.add_input(plain);
        let delivering = tokio::spawn(async move { consumer.deliver(spans(7)).await });
        let from_durable = durable_rx.recv().await.unwrap();
        let from_plain = plain_rx.recv().await.unwrap();
        assert!(from_plain.acknowledge.is_none());
        tokio::task::yield_now().await;
        assert!(!delivering.is_finished(), "waits for the durable pipeline");
        from_durable.acknowledge.unwrap().send(()).unwrap();
        assert_eq!(delivering.await.unwrap(), Ok(()));

        let mut consumer = Consumer::default();
        let (durable, mut durable_rx) = input(4, true, &account);
        consumer.add_input(durable);
        let delivering = tokio::spawn(async move { consumer.deliver(spans(8)).await });
        drop(durable_rx.recv().await.unwrap());
        assert_eq!(delivering.await.unwrap(), Err(Refusal::NotQueued));
    }
}
