//! The receivers' side of the pipelines: a receiver hands each request to every
//! pipeline that lists it, all or none, and is told to refuse when one is full.

use tokio::sync::mpsc::{self, error::TrySendError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A pipeline's input queue is full: the client should retry later.
    Full,
    /// The pipelines are shutting down.
    Closed,
    /// No pipeline of this signal type lists the receiver.
    NoPipeline,
}

impl Refusal {
    /// The `reason` label of the refused-items counters.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Full => "pipeline_full",
            Self::Closed => "shutting_down",
            Self::NoPipeline => "no_pipeline",
        }
    }
}

/// The inputs of the pipelines one receiver feeds with one signal type.
pub struct Consumer<T> {
    inputs: Vec<mpsc::Sender<T>>,
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
    pub fn add_input(&mut self, input: mpsc::Sender<T>) {
        self.inputs.push(input);
    }

    /// Hands `data` to every pipeline, or to none when any of them has no room, so a
    /// refused request can be retried without duplicating what was accepted.
    pub fn push(&self, data: T) -> Result<(), Refusal> {
        let mut permits = Vec::with_capacity(self.inputs.len());
        for input in &self.inputs {
            let permit = input.try_reserve().map_err(|err| match err {
                TrySendError::Full(()) => Refusal::Full,
                TrySendError::Closed(()) => Refusal::Closed,
            })?;
            permits.push(permit);
        }
        let last = permits.pop().ok_or(Refusal::NoPipeline)?;
        for permit in permits {
            permit.send(data.clone());
        }
        last.send(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn all_or_none() {
        let (roomy, mut roomy_rx) = mpsc::channel::<u32>(4);
        let (tight, mut tight_rx) = mpsc::channel::<u32>(1);
        let mut consumer = Consumer::default();
        consumer.add_input(roomy);
        consumer.add_input(tight);
        assert_eq!(consumer.push(1), Ok(()));
        assert_eq!(consumer.push(2), Err(Refusal::Full));
        assert_eq!(roomy_rx.recv().await, Some(1));
        assert_eq!(tight_rx.recv().await, Some(1));
        assert!(
            roomy_rx.try_recv().is_err(),
            "a refused push must not reach any pipeline"
        );
        assert_eq!(Consumer::<u32>::default().push(1), Err(Refusal::NoPipeline));
    }
}
