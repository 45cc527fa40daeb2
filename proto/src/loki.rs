//! Loki's push request (`logproto.PushRequest`) as prost messages, written by hand
//! from the field numbers of Loki's public `pkg/push/push.proto`.

pub use prost_types::Timestamp;

/// What `POST /loki/api/v1/push` takes (snappy block-compressed on the wire). The
/// request's `format` (2) and the entry's `parsed` (4) are Loki's own and left out.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    pub streams: Vec<StreamAdapter>,
}

/// One stream: its label set in Loki's `{name="value", ...}` syntax and its entries.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamAdapter {
    #[prost(string, tag = "1")]
    pub labels: String,
    #[prost(message, repeated, tag = "2")]
    pub entries: Vec<EntryAdapter>,
    /// Computed by Loki from the labels; clients leave it at zero.
    #[prost(uint64, tag = "3")]
    pub hash: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EntryAdapter {
    #[prost(message, optional, tag = "1")]
    pub timestamp: Option<Timestamp>,
    #[prost(string, tag = "2")]
    pub line: String,
    /// Per-entry name/value pairs that are not stream labels (ids, object names).
    #[prost(message, repeated, tag = "3")]
    pub structured_metadata: Vec<LabelPairAdapter>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPairAdapter {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn field_numbers_match_push_proto() {
        let pair = LabelPairAdapter {
            name: "a".into(),
            value: "b".into(),
        };
        assert_eq!(pair.encode_to_vec(), [0x0a, 1, b'a', 0x12, 1, b'b']);
        let entry = EntryAdapter {
            timestamp: Some(Timestamp {
                seconds: 1,
                nanos: 2,
            }),
            line: "x".into(),
            structured_metadata: vec![pair],
        };
        assert_eq!(
            entry.encode_to_vec(),
            [
                0x0a, 4, 0x08, 1, 0x10, 2, 0x12, 1, b'x', 0x1a, 6, 0x0a, 1, b'a', 0x12, 1, b'b'
            ]
        );
        let stream = StreamAdapter {
            labels: "{}".into(),
            entries: Vec::new(),
            hash: 7,
        };
        assert_eq!(stream.encode_to_vec(), [0x0a, 2, b'{', b'}', 0x18, 7]);
        let request = PushRequest {
            streams: vec![stream],
        };
        assert_eq!(
            request.encode_to_vec(),
            [0x0a, 6, 0x0a, 2, b'{', b'}', 0x18, 7]
        );
    }
}
