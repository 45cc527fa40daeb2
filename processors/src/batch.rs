//! The `batch` processor: groups small requests into batches of a target size and
//! sends what it holds after a timeout, cutting batches above a maximum size.

use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::processor::Processor;
use opscope_model::config::{FieldError, Validate, duration};
use opscope_model::telemetry::Telemetry;

/// Settings of the `batch` processor, named as in the OpenTelemetry Collector.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// Items (spans, log records, metric points) that trigger a send.
    pub send_batch_size: usize,
    /// Upper bound of a batch; larger batches are split. 0 means no bound.
    pub send_batch_max_size: usize,
    /// How long data may wait for a batch to fill.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            send_batch_size: 1024,
            send_batch_max_size: 0,
            timeout: Duration::from_millis(200),
        }
    }
}

impl Validate for BatchConfig {
    fn validate(&self) -> Result<(), FieldError> {
        if self.send_batch_max_size > 0 && self.send_batch_max_size < self.send_batch_size {
            return Err(FieldError::new(
                "send_batch_max_size",
                format!(
                    "{} is smaller than send_batch_size {}",
                    self.send_batch_max_size, self.send_batch_size
                ),
            ));
        }
        Ok(())
    }
}

pub struct BatchProcessor<T> {
    config: BatchConfig,
    pending: Option<T>,
    pending_items: usize,
    /// When the oldest held data arrived.
    oldest: Option<Instant>,
}

impl<T: Telemetry> BatchProcessor<T> {
    pub fn new(config: BatchConfig) -> Self {
        Self {
            config,
            pending: None,
            pending_items: 0,
            oldest: None,
        }
    }

    /// Sends full batches while enough is held; with `all`, sends the remainder too.
    fn release(&mut self, all: bool, out: &mut Vec<T>) {
        let threshold = if all {
            1
        } else {
            self.config.send_batch_size.max(1)
        };
        while self.pending_items >= threshold {
            let Some(pending) = self.pending.as_mut() else {
                break;
            };
            let max = self.config.send_batch_max_size;
            if max > 0 && self.pending_items > max {
                out.push(pending.split_front(max));
                self.pending_items -= max;
            } else {
                out.extend(self.pending.take());
                self.pending_items = 0;
            }
        }
        if self.pending_items == 0 {
            self.pending = None;
            self.oldest = None;
        }
    }
}

impl<T: Telemetry> Processor<T> for BatchProcessor<T> {
    fn process(&mut self, data: T, now: Instant, out: &mut Vec<T>) {
        let items = data.item_count();
        if items == 0 {
            return;
        }
        match self.pending.as_mut() {
            Some(pending) => pending.append(data),
            None => self.pending = Some(data),
        }
        self.pending_items += items;
        self.oldest.get_or_insert(now);
        self.release(false, out);
    }

    fn deadline(&self) -> Option<Instant> {
        self.oldest.map(|oldest| oldest + self.config.timeout)
    }

    fn on_deadline(&mut self, _now: Instant, out: &mut Vec<T>) {
        self.release(true, out);
    }

    fn flush(&mut self, out: &mut Vec<T>) {
        self.release(true, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_testkit::otlp_batches::traces;

    fn processor(
        size: usize,
        max: usize,
    ) -> BatchProcessor<opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest> {
        BatchProcessor::new(BatchConfig {
            send_batch_size: size,
            send_batch_max_size: max,
            timeout: Duration::from_millis(200),
        })
    }

    #[test]
    fn holds_until_size_then_sends() {
        let mut batch = processor(10, 0);
        let now = Instant::now();
        let mut out = Vec::new();
        batch.process(traces(1, 4), now, &mut out);
        batch.process(traces(1, 4), now, &mut out);
        assert!(out.is_empty());
        assert_eq!(batch.deadline(), Some(now + Duration::from_millis(200)));
        batch.process(traces(1, 4), now, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].item_count(), 12);
        assert_eq!(batch.deadline(), None);
    }

    #[test]
    fn splits_above_max_size_and_keeps_the_rest() {
        let mut batch = processor(5, 5);
        let mut out = Vec::new();
        batch.process(traces(3, 4), Instant::now(), &mut out);
        let sizes: Vec<usize> = out.iter().map(|b| b.item_count()).collect();
        assert_eq!(sizes, vec![5, 5]);
        let mut rest = Vec::new();
        batch.flush(&mut rest);
        assert_eq!(rest.iter().map(|b| b.item_count()).sum::<usize>(), 2);
    }

    #[test]
    fn timeout_releases_a_partial_batch() {
        let mut batch = processor(100, 0);
        let start = Instant::now();
        let mut out = Vec::new();
        batch.process(traces(1, 3), start, &mut out);
        let deadline = batch.deadline().expect("data is held");
        batch.on_deadline(deadline, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].item_count(), 3);
    }

    #[test]
    fn max_smaller_than_size_is_rejected() {
        let config = BatchConfig {
            send_batch_size: 10,
            send_batch_max_size: 5,
            ..Default::default()
        };
        assert_eq!(config.validate().unwrap_err().field, "send_batch_max_size");
    }
}
