//! The receivers' side of the pipelines: a receiver hands each request to every
//! pipeline that lists it, all or none, and is told to refuse when one is full. A
//! pipeline whose exporters acknowledge durably also says when the request is in
//! their queues, and the receiver answers its client only then.

use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::oneshot;

/// A request on its way into a pipeline.
pub struct Input<T> {
    pub data: T,
    /// Signalled once the data is in the sending queue of every exporter of the
    /// pipeline; dropped unsignalled when it could not be queued.
    pub acknowledge: Option<oneshot::Sender<()>>,
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
}

impl Refusal {
    /// The `reason` label of the refused-items counters.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Full => "pipeline_full",
            Self::Closed => "shutting_down",
            Self::NoPipeline => "no_pipeline",
            Self::NotQueued => "not_queued",
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
    /// Each input, and whether its pipeline acknowledges durably.
    inputs: Vec<(mpsc::Sender<Input<T>>, bool)>,
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

impl<T: Clone> Consumer<T> {
    pub fn add_input(&mut self, input: mpsc::Sender<Input<T>>, acknowledges_durably: bool) {
        self.inputs.push((input, acknowledges_durably));
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

    fn hand_over(&self, data: T, wait: bool) -> Result<Vec<oneshot::Receiver<()>>, Refusal> {
        let mut permits = Vec::with_capacity(self.inputs.len());
        for (input, durable) in &self.inputs {
            let permit = input.try_reserve().map_err(|err| match err {
                TrySendError::Full(()) => Refusal::Full,
                TrySendError::Closed(()) => Refusal::Closed,
            })?;
            permits.push((permit, *durable && wait));
        }
        let mut waits = Vec::new();
        let mut input = |data: T, acknowledged: bool| {
            let acknowledge = acknowledged.then(|| {
                let (sender, receiver) = oneshot::channel();
                waits.push(receiver);
                sender
            });
            Input { data, acknowledge }
        };
        let (last, last_acknowledged) = permits.pop().ok_or(Refusal::NoPipeline)?;
        for (permit, acknowledged) in permits {
            permit.send(input(data.clone(), acknowledged));
        }
        last.send(input(data, last_acknowledged));
        Ok(waits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn all_or_none() {
        let (roomy, mut roomy_rx) = mpsc::channel::<Input<u32>>(4);
        let (tight, mut tight_rx) = mpsc::channel::<Input<u32>>(1);
        let mut consumer = Consumer::default();
        consumer.add_input(roomy, false);
        consumer.add_input(tight, false);
        assert_eq!(consumer.push(1), Ok(()));
        assert_eq!(consumer.push(2), Err(Refusal::Full));
        assert_eq!(roomy_rx.recv().await.map(|i| i.data), Some(1));
        assert_eq!(tight_rx.recv().await.map(|i| i.data), Some(1));
        assert!(
            roomy_rx.try_recv().is_err(),
            "a refused push must not reach any pipeline"
        );
        assert_eq!(Consumer::<u32>::default().push(1), Err(Refusal::NoPipeline));
    }

    #[tokio::test]
    async fn delivery_waits_for_the_durable_pipelines_only() {
        let (durable, mut durable_rx) = mpsc::channel::<Input<u32>>(4);
        let (plain, mut plain_rx) = mpsc::channel::<Input<u32>>(4);
        let mut consumer = Consumer::default();
        consumer.add_input(durable, true);
        consumer.add_input(plain, false);
        let delivering = tokio::spawn(async move { consumer.deliver(7).await });
        let from_durable = durable_rx.recv().await.unwrap();
        let from_plain = plain_rx.recv().await.unwrap();
        assert!(from_plain.acknowledge.is_none());
        tokio::task::yield_now().await;
        assert!(!delivering.is_finished(), "waits for the durable pipeline");
        from_durable.acknowledge.unwrap().send(()).unwrap();
        assert_eq!(delivering.await.unwrap(), Ok(()));

        let mut consumer = Consumer::default();
        let (durable, mut durable_rx) = mpsc::channel::<Input<u32>>(4);
        consumer.add_input(durable, true);
        let delivering = tokio::spawn(async move { consumer.deliver(8).await });
        drop(durable_rx.recv().await.unwrap());
        assert_eq!(delivering.await.unwrap(), Err(Refusal::NotQueued));
    }
}
