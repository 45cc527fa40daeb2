//! Batching for a pipeline whose exporters all send OTLP on: each request is encoded
//! as soon as the processors let go of it, and its bytes are appended to the batch
//! being filled. An OTLP export request is one repeated field, so requests written one
//! after the other are one request holding all their data. The decoded request is
//! freed at once, and a batch waiting to fill holds protobuf bytes, several times
//! smaller than the decoded structures: that is most of what the agent holds at a
//! steady load. Batches are cut where the `batch` processor would cut them.

use std::time::Instant;

use opscope_exporters::Encoded;
use opscope_model::Telemetry;
use opscope_processors::batch::BatchConfig;

pub struct EncodedBatcher<T> {
    config: BatchConfig,
    bytes: Vec<u8>,
    items: usize,
    /// When the oldest data held arrived.
    oldest: Option<Instant>,
    /// The size of the last batch, reserved for the next: batches are alike, and a
    /// buffer grown by doubling would copy itself and keep up to half unused.
    last_size: usize,
    out: Vec<Encoded<T>>,
}

impl<T: Telemetry> EncodedBatcher<T> {
    pub fn new(config: BatchConfig) -> Self {
        Self {
            config,
            bytes: Vec::new(),
            items: 0,
            oldest: None,
            last_size: 0,
            out: Vec::new(),
        }
    }

    /// Takes a request that came out of the processors at `now`.
    pub fn add(&mut self, mut request: T, now: Instant) {
        let mut items = request.item_count();
        let max = self.config.send_batch_max_size;
        // Below the target size after every call, so below the maximum too: the room
        // left is at least one item.
        while max > 0 && self.items + items > max {
            let room = max.saturating_sub(self.items);
            if room == 0 {
                self.release();
                continue;
            }
            let front = request.split_front(room);
            self.append(&front, room, now);
            self.release();
            items -= room;
        }
        if items == 0 {
            return;
        }
        self.append(&request, items, now);
        if self.items >= self.config.send_batch_size.max(1) {
            self.release();
        }
    }

    fn append(&mut self, request: &T, items: usize, now: Instant) {
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(self.last_size);
        }
        request.encode_request_into(&mut self.bytes);
        self.items += items;
        self.oldest.get_or_insert(now);
    }

    fn release(&mut self) {
        if self.items == 0 {
            return;
        }
        self.last_size = self.bytes.len();
        let bytes = std::mem::take(&mut self.bytes);
        self.out.push(Encoded::concatenated(
            bytes,
            std::mem::take(&mut self.items),
        ));
        self.oldest = None;
    }

    /// When what is held must go, waiting for more or not.
    pub fn deadline(&self) -> Option<Instant> {
        self.oldest.map(|oldest| oldest + self.config.timeout)
    }

    pub fn holds_data(&self) -> bool {
        self.items > 0
    }

    /// Releases what is held if its deadline has come by `now`.
    pub fn on_deadline(&mut self, now: Instant) {
        if self.deadline().is_some_and(|deadline| deadline <= now) {
            self.release();
        }
    }

    /// Releases what is held.
    pub fn flush(&mut self) {
        self.release();
    }

    /// The batches ready to send.
    pub fn take_ready(&mut self) -> Vec<Encoded<T>> {
        std::mem::take(&mut self.out)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opscope_exporters::Batch;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use opscope_proto::prost::Message;

    use super::*;

    /// A request of `spans` spans named `first`, `first + 1`, … under one resource.
    fn request(first: usize, spans: usize) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: (first..first + spans)
                        .map(|n| Span {
                            name: n.to_string(),
                            ..Span::default()
                        })
                        .collect(),
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
    }

    /// The span names of a batch, decoded by prost.
    fn names(batch: &Encoded<ExportTraceServiceRequest>) -> Vec<usize> {
        let decoded = ExportTraceServiceRequest::decode(batch.bytes()).unwrap();
        assert_eq!(decoded.item_count(), batch.items());
        decoded
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|span| span.name.parse().unwrap())
            .collect()
    }

    fn batcher(size: usize, max: usize) -> EncodedBatcher<ExportTraceServiceRequest> {
        EncodedBatcher::new(BatchConfig {
            send_batch_size: size,
            send_batch_max_size: max,
            timeout: Duration::from_millis(200),
        })
    }

    #[test]
    fn requests_fill_a_batch_that_decodes_to_all_their_spans_in_order() {
        let now = Instant::now();
        let mut batcher = batcher(10, 0);
        batcher.add(request(0, 4), now);
        batcher.add(request(4, 4), now);
        assert!(batcher.take_ready().is_empty());
        assert!(batcher.holds_data());
        batcher.add(request(8, 5), now);
        let ready = batcher.take_ready();
        assert_eq!(ready.len(), 1);
        assert_eq!(names(&ready[0]), (0..13).collect::<Vec<_>>());
        assert!(!batcher.holds_data());
        assert_eq!(batcher.deadline(), None);
    }

    #[test]
    fn batches_are_cut_at_the_maximum_as_the_batch_processor_cuts_them() {
        let now = Instant::now();
        let mut batcher = batcher(100, 150);
        batcher.add(request(0, 80), now);
        batcher.add(request(80, 100), now);
        batcher.add(request(180, 300), now);
        let sizes: Vec<usize> = batcher.take_ready().iter().map(Batch::items).collect();
        assert_eq!(sizes, [150, 150, 150]);
        assert!(batcher.holds_data(), "30 items wait for more");
        batcher.flush();
        let rest = batcher.take_ready();
        assert_eq!(names(&rest[0]), (450..480).collect::<Vec<_>>());
    }

    #[test]
    fn what_is_held_goes_at_its_deadline_and_not_before() {
        let now = Instant::now();
        let mut batcher = batcher(100, 0);
        batcher.add(request(0, 3), now);
        batcher.add(request(3, 0), now + Duration::from_millis(50));
        assert_eq!(batcher.deadline(), Some(now + Duration::from_millis(200)));
        batcher.on_deadline(now + Duration::from_millis(199));
        assert!(batcher.take_ready().is_empty());
        batcher.on_deadline(now + Duration::from_millis(200));
        let ready = batcher.take_ready();
        assert_eq!(names(&ready[0]), [0, 1, 2]);
        assert_eq!(batcher.deadline(), None);
    }
}
