//! One pipeline, written once for the three signal types: a bounded input queue fed
//! by receivers, the processor chain, and a fan-out to each exporter's sending
//! queue. A full sending queue makes the fan-out wait, which fills the input queue,
//! which makes receivers refuse: backpressure end to end, nothing dropped between.

pub mod encoded_batch;
pub mod memory_watch;
mod processors;

use std::time::Instant;

use opscope_exporters::{Batch, Encoded, QueueSender, SendingQueue};
use opscope_model::Telemetry;
use opscope_model::config::FieldError;
use opscope_model::memory::MemoryHold;
use opscope_processors::ProcessorChain;
use opscope_processors::correlator::SharedCorrelator;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::consumer::{Input, OtlpBatch, PipelineInput};

use crate::config::ProcessorConfig;
use crate::exporters::{Exporters, Output, QueueFor};
use crate::self_telemetry::SelfTelemetry;
use encoded_batch::EncodedBatcher;
pub use processors::SharedProcessors;
use processors::build_processor;

/// Requests a pipeline holds between receivers and its processors.
pub const INPUT_QUEUE_CAPACITY: usize = 16;

/// A pipeline ready to run, with the sending queues of its exporters.
pub struct Pipeline<T> {
    id: String,
    input: mpsc::Receiver<Input<T>>,
    chain: ProcessorChain<T>,
    /// In place of a trailing `batch` processor when every exporter sends OTLP on:
    /// batches of encoded bytes (see [`encoded_batch`]).
    batcher: Option<EncodedBatcher<T>>,
    fan_out: FanOut<T>,
    /// Acknowledgements of inputs whose data the processors may still hold.
    unacknowledged: Vec<oneshot::Sender<()>>,
    /// Bytes of the inputs not yet in the sending queues (the processors may hold
    /// data back, and change its size).
    held: MemoryHold,
}

/// The sending queues of a pipeline's exporters.
struct FanOut<T> {
    pipeline: String,
    /// Exporters that read the data.
    decoded: Vec<(String, QueueSender<T>)>,
    /// Exporters that send it on as OTLP.
    encoded: Vec<(String, QueueSender<Encoded<T>>)>,
}

impl<T: OtlpBatch> Pipeline<T> {
    /// Builds the processors and starts the exporters' sending queues. Returns the
    /// pipeline, the sender receivers feed, and the running queues.
    pub fn build(
        id: &str,
        processors: &[(&str, &ProcessorConfig)],
        shared: &SharedProcessors,
        exporters: &[&str],
        built: &Exporters,
        telemetry: &SelfTelemetry,
        abort: &CancellationToken,
    ) -> Result<(Self, PipelineInput<T>, Vec<SendingQueue>), FieldError> {
        let all_encoded =
            !exporters.is_empty() && exporters.iter().all(|e| built.sends_otlp::<T>(e));
        let (processors, batcher) = match processors.split_last() {
            Some(((_, ProcessorConfig::Batch(batch)), rest)) if all_encoded => {
                (rest, Some(EncodedBatcher::new(batch.clone())))
            }
            _ => (processors, None),
        };
        let chain = ProcessorChain::new(
            processors
                .iter()
                .map(|(name, config)| build_processor::<T>(name, config, shared))
                .collect::<Result<_, _>>()?,
        );
        let mut fan_out = FanOut {
            pipeline: id.to_string(),
            decoded: Vec::new(),
            encoded: Vec::new(),
        };
        let mut queues = Vec::new();
        for name in exporters {
            let metrics = telemetry.exporter_queue(T::KIND, name, id);
            let (output, queue) = built.start_output::<T>(QueueFor {
                exporter: name,
                pipeline: id,
                metrics,
                memory: &shared.memory,
                abort: abort.clone(),
            })?;
            match output {
                Output::Decoded(sender) => fan_out.decoded.push((name.to_string(), sender)),
                Output::Encoded(sender) => fan_out.encoded.push((name.to_string(), sender)),
            }
            queues.push(queue);
        }
        let (sender, input) = mpsc::channel(INPUT_QUEUE_CAPACITY);
        let pipeline = Self {
            id: id.to_string(),
            input,
            chain,
            batcher,
            fan_out,
            unacknowledged: Vec::new(),
            held: MemoryHold::default(),
        };
        let input = PipelineInput {
            sender,
            // A journaling correlator is as durable as a queue on disk: a batch is
            // acknowledged once it is written.
            acknowledges_durably: exporters.iter().any(|e| built.acknowledges_durably(e))
                || (processors.iter()).any(|(name, _)| {
                    (shared.correlators.get(*name)).is_some_and(SharedCorrelator::journals)
                }),
            limiter: shared
                .memory_limiter_of(processors)
                .map(|(_, limiter)| limiter.clone()),
            account: shared.memory.clone(),
        };
        Ok((pipeline, input, queues))
    }

    /// Runs until every receiver has let go of the input, or `close` fires, and the
    /// input is drained; then flushes the processors. Dropping the pipeline closes the
    /// sending queues. `close` is for receivers that did not stop in time: what they
    /// send after it is refused.
    pub async fn run(mut self, close: CancellationToken) {
        let mut closed = false;
        loop {
            let deadline = self.deadline();
            let wake = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let batches = tokio::select! {
                received = self.input.recv() => match received {
                    Some(Input { data, acknowledge, hold }) => {
                        self.unacknowledged.extend(acknowledge);
                        self.held.absorb(hold);
                        self.chain.process(data, Instant::now())
                    }
                    None => break,
                },
                () = close.cancelled(), if !closed => {
                    closed = true;
                    self.input.close();
                    continue;
                }
                () = wake => {
                    let now = Instant::now();
                    if let Some(batcher) = &mut self.batcher {
                        batcher.on_deadline(now);
                    }
                    self.chain.on_deadline(now)
                }
            };
            self.send(batches).await;
        }
        let rest = self.chain.flush(Instant::now());
        self.send(rest).await;
        if let Some(batcher) = &mut self.batcher {
            batcher.flush();
            self.send(Vec::new()).await;
        }
        tracing::debug!(pipeline = %self.id, "pipeline drained");
    }

    /// When the processors or the batcher must release what they hold.
    fn deadline(&self) -> Option<Instant> {
        let batcher = self.batcher.as_ref().and_then(EncodedBatcher::deadline);
        self.chain.deadline().into_iter().chain(batcher).min()
    }

    /// Whether the processors or the batcher hold data back.
    fn holds_data(&self) -> bool {
        self.chain.deadline().is_some()
            || self
                .batcher
                .as_ref()
                .is_some_and(EncodedBatcher::holds_data)
    }

    /// Hands what came out of the processors to the sending queues (through the
    /// batcher, when there is one); its bytes are then counted by the in-memory queues
    /// (or are on disk) and leave the pipeline's hold.
    async fn send(&mut self, batches: Vec<T>) {
        let now = Instant::now();
        let queued = match &mut self.batcher {
            Some(batcher) => {
                for batch in batches {
                    batcher.add(batch, now);
                }
                let ready = batcher.take_ready();
                let sent: u64 = ready.iter().map(Batch::memory_size).sum();
                let queued = self.fan_out.send_encoded(ready).await;
                self.held.release(sent);
                queued
            }
            None => {
                // Sizing walks every batch: only done when memory is counted.
                let sent: u64 = match self.held.bytes() {
                    0 => 0,
                    _ => batches.iter().map(Telemetry::memory_size).sum(),
                };
                let queued = self.fan_out.send_all(batches).await;
                self.held.release(sent);
                queued
            }
        };
        if !self.holds_data() {
            // The processors hold nothing: whatever is left was filtered out or shrank.
            self.held.release(u64::MAX);
        }
        self.acknowledge(queued);
    }

    /// Acknowledges the inputs received so far once the processors hold none of their
    /// data (a processor that holds data has a deadline) and the exporters' queues took
    /// all that came out. Inputs whose data a queue lost are not acknowledged: their
    /// senders are told to retry.
    fn acknowledge(&mut self, queued: bool) {
        if !queued {
            self.unacknowledged.clear();
            return;
        }
        if self.holds_data() {
            return;
        }
        for acknowledge in self.unacknowledged.drain(..) {
            // The receiver may have given up waiting (its client went away).
            let _ = acknowledge.send(());
        }
    }
}

impl<T: OtlpBatch> FanOut<T> {
    /// Hands every batch to every exporter, waiting while a queue is full; false if a
    /// queue lost one.
    async fn send_all(&self, batches: Vec<T>) -> bool {
        let mut queued = true;
        for batch in batches {
            // Encoded once for all OTLP exporters, while the processors have just
            // read the batch; without a decoded output, it is dropped here too.
            let encoded = (!self.encoded.is_empty()).then(|| Encoded::new(&batch));
            queued &= self.send_each(&self.decoded, batch).await;
            if let Some(encoded) = encoded {
                queued &= self.send_each(&self.encoded, encoded).await;
            }
        }
        queued
    }

    /// Hands batches encoded by the pipeline's batcher to every exporter.
    async fn send_encoded(&self, batches: Vec<Encoded<T>>) -> bool {
        let mut queued = true;
        for batch in batches {
            queued &= self.send_each(&self.encoded, batch).await;
        }
        queued
    }

    /// Hands a batch to each of `outputs`, copying it for all but the last.
    async fn send_each<B: Batch + Clone>(
        &self,
        outputs: &[(String, QueueSender<B>)],
        batch: B,
    ) -> bool {
        let Some(((last_name, last), others)) = outputs.split_last() else {
            return true;
        };
        let mut queued = true;
        for (name, output) in others {
            queued &= self.send(name, output, batch.clone()).await;
        }
        queued & self.send(last_name, last, batch).await
    }

    async fn send<B: Batch>(&self, exporter: &str, output: &QueueSender<B>, batch: B) -> bool {
        let Err(batch) = output.send(batch).await else {
            return true;
        };
        // Only reachable if the exporter's consumers stopped early, which they do
        // not: the loss is still reported rather than hidden.
        tracing::error!(pipeline = %self.pipeline, %exporter, items = batch.items(),
            "sending queue closed; batch lost");
        false
    }
}
