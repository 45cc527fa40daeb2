//! Loki push requests read back with the independent wire reader, from the public
//! field numbers of `logproto.PushRequest`; the endpoint itself is a
//! [`RecordingServer`](crate::recording::RecordingServer).

use crate::wire::{bytes_of, snappy_block_decode, string_of, varint_of};

/// Where Loki takes pushes, below its base URL.
pub const PUSH_PATH: &str = "/loki/api/v1/push";

/// One stream of a push: its label set as Loki writes it (`{a="1", b="2"}`) and entries.
#[derive(Debug)]
pub struct Stream {
    pub labels: String,
    pub entries: Vec<Entry>,
}

#[derive(Debug)]
pub struct Entry {
    /// Nanoseconds since the epoch.
    pub time: u64,
    pub line: String,
    /// Structured metadata, in the order sent.
    pub metadata: Vec<(String, String)>,
}

/// `PushRequest{streams=1}`, `StreamAdapter{labels=1, entries=2}`,
/// `EntryAdapter{timestamp=1, line=2, structuredMetadata=3}`, `Timestamp{seconds=1,
/// nanos=2}`, `LabelPairAdapter{name=1, value=2}`.
pub fn decode_push(body: &[u8]) -> Vec<Stream> {
    let request = snappy_block_decode(body);
    bytes_of(&request, 1)
        .into_iter()
        .map(|stream| Stream {
            labels: string_of(stream, 1),
            entries: bytes_of(stream, 2).into_iter().map(decode_entry).collect(),
        })
        .collect()
}

fn decode_entry(entry: &[u8]) -> Entry {
    let timestamp = bytes_of(entry, 1).last().copied().unwrap_or_default();
    Entry {
        time: varint_of(timestamp, 1) * 1_000_000_000 + varint_of(timestamp, 2),
        line: string_of(entry, 2),
        metadata: bytes_of(entry, 3)
            .into_iter()
            .map(|pair| (string_of(pair, 1), string_of(pair, 2)))
            .collect(),
    }
}

/// The structured metadata `name` of an entry.
pub fn metadata<'a>(entry: &'a Entry, name: &str) -> Option<&'a str> {
    entry
        .metadata
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.as_str())
}
