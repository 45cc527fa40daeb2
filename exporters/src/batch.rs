//! What a sending queue carries: OTLP requests, decoded for the exporters that read
//! them or encoded for those that send them on, and batches of signal changes for
//! the exporters that carry signals.

use std::marker::PhantomData;

use bytes::Bytes;
use opscope_model::Telemetry;
use opscope_model::signal::Signal;

use crate::split;

/// A batch that knows how many items it holds, and how to be kept on disk.
pub trait Batch: Send + Sync + Sized + 'static {
    /// What one item is called in logs (`spans`, `signals`).
    fn item_name() -> &'static str;
    fn items(&self) -> usize;
    /// Bytes the batch stands for in memory, for the memory limiter's account.
    fn memory_size(&self) -> u64;
    /// The batch as a durable queue's record.
    fn to_record(&self) -> Vec<u8>;
    /// A batch back from a durable queue's record.
    fn from_record(record: &[u8]) -> Result<Self, String>;
    /// Bytes of the request the batch goes out as (its OTLP encoding), what an
    /// exporter's `max_request_size` bounds.
    fn request_size(&self) -> usize;
    /// The batch cut into batches of at most `max` request bytes each, in order; an
    /// item over `max` alone is a batch of its own, larger than `max`.
    fn cut(&self, max: usize) -> Result<Vec<Self>, String>;
}

impl<T: Telemetry + prost::Message + Default> Batch for T {
    fn item_name() -> &'static str {
        T::KIND.item_name()
    }

    fn items(&self) -> usize {
        self.item_count()
    }

    fn memory_size(&self) -> u64 {
        Telemetry::memory_size(self)
    }

    fn to_record(&self) -> Vec<u8> {
        self.encode_request()
    }

    fn from_record(record: &[u8]) -> Result<Self, String> {
        T::decode(record).map_err(|error| error.to_string())
    }

    fn request_size(&self) -> usize {
        self.encoded_len()
    }

    /// Cut encoded, so that the sizes are exact, then decoded again: decoded batches
    /// are cut only when a destination refuses one for its size.
    fn cut(&self, max: usize) -> Result<Vec<Self>, String> {
        Encoded::new(self)
            .cut(max)?
            .iter()
            .map(|part| T::decode(part.bytes()).map_err(|error| error.to_string()))
            .collect()
    }
}

/// An OTLP request as protobuf bytes, for the exporters that send it on as it is.
/// The pipeline encodes each batch once, while its data is still in the cache, for
/// every such exporter; the queue then holds bytes rather than the decoded structures.
pub struct Encoded<T> {
    bytes: Bytes,
    items: usize,
    request: PhantomData<fn() -> T>,
}

impl<T: Telemetry> Encoded<T> {
    pub fn new(request: &T) -> Self {
        Self::concatenated(request.encode_request(), request.item_count())
    }

    /// Requests encoded one after the other into `bytes` (see
    /// [`Telemetry::encode_request_into`]), holding `items` in all.
    pub fn concatenated(bytes: Vec<u8>, items: usize) -> Self {
        Self {
            bytes: Bytes::from(bytes),
            items,
            request: PhantomData,
        }
    }

    /// The encoded request, shared rather than copied.
    pub fn bytes(&self) -> Bytes {
        self.bytes.clone()
    }
}

impl<T> Clone for Encoded<T> {
    fn clone(&self) -> Self {
        Self {
            bytes: self.bytes.clone(),
            items: self.items,
            request: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Encoded<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoded")
            .field("bytes", &self.bytes.len())
            .field("items", &self.items)
            .finish()
    }
}

impl<T: Telemetry> Batch for Encoded<T> {
    fn item_name() -> &'static str {
        T::KIND.item_name()
    }

    fn items(&self) -> usize {
        self.items
    }

    fn memory_size(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn to_record(&self) -> Vec<u8> {
        self.bytes.to_vec()
    }

    /// A record read back is decoded once, to be sure it is a request and to count
    /// its items, and kept as it was written.
    fn from_record(record: &[u8]) -> Result<Self, String> {
        let request = T::decode(record).map_err(|error| error.to_string())?;
        Ok(Self {
            bytes: Bytes::copy_from_slice(record),
            items: request.item_count(),
            request: PhantomData,
        })
    }

    fn request_size(&self) -> usize {
        self.bytes.len()
    }

    /// Cut on the wire, without decoding: whole resources are shared slices of the
    /// batch, and only a resource too large alone is rebuilt in parts.
    fn cut(&self, max: usize) -> Result<Vec<Self>, String> {
        let parts = split::cut(&self.bytes, T::KIND, max).map_err(|error| error.to_string())?;
        Ok(parts
            .into_iter()
            .map(|part| Self {
                bytes: part.bytes,
                items: part.items,
                request: PhantomData,
            })
            .collect())
    }
}

/// Signal changes (firing, updated, resolved) on their way to an exporter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SignalBatch(pub Vec<Signal>);

impl Batch for SignalBatch {
    fn item_name() -> &'static str {
        "signals"
    }

    fn items(&self) -> usize {
        self.0.len()
    }

    /// Signal changes are few and small: their JSON record's size is close enough.
    fn memory_size(&self) -> u64 {
        self.to_record().len() as u64
    }

    fn to_record(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).unwrap_or_default()
    }

    fn from_record(record: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(record)
            .map(SignalBatch)
            .map_err(|error| error.to_string())
    }

    /// The JSON record's size, close to that of the spans and log records the
    /// signals become.
    fn request_size(&self) -> usize {
        self.to_record().len()
    }

    fn cut(&self, max: usize) -> Result<Vec<Self>, String> {
        let mut parts = Vec::new();
        let mut part = Vec::new();
        let mut part_size = 2;
        for signal in &self.0 {
            let size = serde_json::to_vec(signal).map_or(0, |json| json.len() + 1);
            if part_size + size > max && !part.is_empty() {
                parts.push(SignalBatch(std::mem::take(&mut part)));
                part_size = 2;
            }
            part_size += size;
            part.push(signal.clone());
        }
        if !part.is_empty() {
            parts.push(SignalBatch(part));
        }
        Ok(parts)
    }
}

#[cfg(test)]
mod tests {
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    use super::*;

    fn request(spans: usize) -> ExportTraceServiceRequest {
        let span = |i: usize| Span {
            name: format!("reconcile {i}"),
            ..Default::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: (0..spans).map(span).collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn an_encoded_request_is_the_request_s_protobuf_and_counts_its_items() {
        let request = request(3);
        let encoded = Encoded::new(&request);
        assert_eq!(encoded.items(), 3);
        assert_eq!(encoded.bytes(), request.encode_to_vec());
        assert_eq!(encoded.memory_size(), request.encoded_len() as u64);
        assert_eq!(Encoded::<ExportTraceServiceRequest>::item_name(), "spans");
    }

    #[test]
    fn a_durable_record_reads_back_either_way_and_garbage_is_refused() {
        // A queue written while the exporter took decoded requests reads back encoded.
        let request = request(2);
        let record = Batch::to_record(&request);
        let encoded = Encoded::<ExportTraceServiceRequest>::from_record(&record).unwrap();
        assert_eq!(encoded.items(), 2);
        assert_eq!(encoded.to_record(), record);
        let decoded = <ExportTraceServiceRequest as Batch>::from_record(&encoded.to_record());
        assert_eq!(decoded.unwrap(), request);
        assert!(Encoded::<ExportTraceServiceRequest>::from_record(&[0xff, 0xff, 0xff]).is_err());
    }
}
