//! Routing an encoded request without decoding it: the pipeline hands OTLP exporters
//! their batches as protobuf bytes (`Encoded`), so the routing reads each record's
//! object attributes off the wire and copies each record's bytes, as they are, into
//! the request of its gateway, under copies of its resource and scope headers.
//!
//! Written by hand on the protobuf wire format (field numbers from the OTLP protos):
//! prost decodes whole messages only, and decoding every span to read four of its
//! attributes costs more than the routing itself. Only the framing is read; the bytes
//! of a record are never changed. A request that is not well-formed protobuf is
//! refused whole, as decoding it would have been.

use opscope_model::semconv::{
    K8S_NAMESPACE_NAME, K8S_POD_NAME, OBJECT_KIND, OBJECT_NAME, OBJECT_NAMESPACE, OBJECT_RESOURCE,
};
use opscope_proto::varint;

use super::ring::Ring;
use super::routing::key_of;

/// Where a request's records keep their attributes: spans in field 9, log records in
/// field 6; both containers hold their records in field 2 of the scope container.
#[derive(Debug, Clone, Copy)]
pub struct RecordLayout {
    pub attributes_field: u32,
}

pub const SPANS: RecordLayout = RecordLayout {
    attributes_field: 9,
};
pub const LOG_RECORDS: RecordLayout = RecordLayout {
    attributes_field: 6,
};

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;
const FIXED32: u8 = 5;

/// A malformed request: where the framing broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a well-formed OTLP request: {0}")]
pub struct WireError(&'static str);

/// One field of a message: its number, wire type, the bytes of the whole field (key
/// included) and, when length-delimited, its payload.
struct Field<'a> {
    number: u32,
    length_delimited: bool,
    whole: &'a [u8],
    payload: &'a [u8],
}

impl<'a> Field<'a> {
    /// The payload of a field that must hold a message.
    fn message(&self) -> Result<&'a [u8], WireError> {
        if self.length_delimited {
            Ok(self.payload)
        } else {
            Err(WireError("a message field of another wire type"))
        }
    }
}

/// The fields of a message, in order.
struct Fields<'a> {
    rest: &'a [u8],
}

fn fields(message: &[u8]) -> Fields<'_> {
    Fields { rest: message }
}

/// The varint at the start of `bytes`, and how many bytes it takes.
fn read_varint(bytes: &[u8]) -> Result<(u64, usize), WireError> {
    let mut rest = bytes;
    let value = varint::read(&mut rest).map_err(|_| WireError("a varint runs past its end"))?;
    Ok((value, bytes.len() - rest.len()))
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.read();
        if field.is_err() {
            self.rest = &[];
        }
        Some(field)
    }
}

impl<'a> Fields<'a> {
    fn read(&mut self) -> Result<Field<'a>, WireError> {
        let bytes = self.rest;
        let (key, key_len) = read_varint(bytes)?;
        let number = u32::try_from(key >> 3).map_err(|_| WireError("a field number too large"))?;
        let after_key = bytes.get(key_len..).unwrap_or_default();
        let wire_type = (key & 7) as u8;
        let (header, payload_len) = match wire_type {
            VARINT => (read_varint(after_key)?.1, 0),
            FIXED64 => (0, 8),
            FIXED32 => (0, 4),
            LENGTH_DELIMITED => {
                let (len, len_len) = read_varint(after_key)?;
                let len = usize::try_from(len).map_err(|_| WireError("a length too large"))?;
                (len_len, len)
            }
            _ => return Err(WireError("an unknown wire type")),
        };
        let start = key_len + header;
        let end = start
            .checked_add(payload_len)
            .filter(|end| *end <= bytes.len())
            .ok_or(WireError("a field runs past the message"))?;
        let whole = bytes
            .get(..end)
            .ok_or(WireError("a field runs past the message"))?;
        let payload = bytes.get(start..end).unwrap_or_default();
        self.rest = bytes.get(end..).unwrap_or_default();
        Ok(Field {
            number,
            length_delimited: wire_type == LENGTH_DELIMITED,
            whole,
            payload,
        })
    }
}

/// The string values of the attributes (`KeyValue` messages in field
/// `attributes_field` of `message`) named in `keys`, in `keys`' order. A key
/// written twice counts by its first, as everything that reads decoded attributes
/// takes it: routing by another value would send the record to a gateway that files
/// it under the first.
fn string_attributes<'a, const N: usize>(
    message: &'a [u8],
    attributes_field: u32,
    keys: [&str; N],
) -> Result<[&'a str; N], WireError> {
    let mut values = [""; N];
    let mut seen = [false; N];
    for field in fields(message) {
        let field = field?;
        if field.number != attributes_field {
            continue;
        }
        // Most attributes are not wanted: their key, field 1 and first as every
        // encoder writes it, is compared before anything else is read.
        if let Some(key) = leading_key(field.payload)
            && !keys.iter().any(|wanted| wanted.as_bytes() == key)
        {
            continue;
        }
        let (mut key, mut value) = (&[][..], &[][..]);
        for part in fields(field.payload) {
            let part = part?;
            match part.number {
                1 => key = part.payload,
                2 => value = part.payload,
                _ => {}
            }
        }
        let Some(index) = keys.iter().position(|wanted| wanted.as_bytes() == key) else {
            continue;
        };
        match seen.get_mut(index) {
            Some(seen) if !*seen => *seen = true,
            _ => continue,
        }
        // AnyValue: a string is field 1.
        for part in fields(value) {
            let part = part?;
            if part.number == 1
                && let Ok(text) = std::str::from_utf8(part.payload)
                && let Some(slot) = values.get_mut(index)
            {
                *slot = text;
            }
        }
    }
    Ok(values)
}

/// The key of a `KeyValue` that starts with it (field 1, a length under 128), the
/// way encoders write it; `None` otherwise, and the fields are read one by one.
fn leading_key(key_value: &[u8]) -> Option<&[u8]> {
    match key_value {
        [0x0a, length, rest @ ..] if *length < 0x80 => rest.get(..usize::from(*length)),
        _ => None,
    }
}

/// The routing key hash of a record (its bytes), sent by the resource whose pod
/// names are `pod`: the same as [`super::routing::record_key`] of it decoded.
fn record_key(record: &[u8], layout: RecordLayout, pod: [&str; 2]) -> Result<u64, WireError> {
    let object = string_attributes(
        record,
        layout.attributes_field,
        [OBJECT_KIND, OBJECT_RESOURCE, OBJECT_NAMESPACE, OBJECT_NAME],
    )?;
    Ok(key_of(object, pod))
}

/// A scope container being cut: its other fields, before and after its records.
#[derive(Default)]
struct ScopeFields<'a> {
    before: Vec<&'a [u8]>,
    after: Vec<&'a [u8]>,
}

/// The encoded request `request` cut into one encoded request per gateway of
/// `ring` (by index), each with its count of records; only the records whose key
/// hash `keep` takes. Each record's bytes are copied once, straight into its part:
/// the sizes of the containers are summed from the slices first.
pub fn split(
    request: &[u8],
    layout: RecordLayout,
    ring: &Ring,
    keep: &dyn Fn(u64) -> bool,
) -> Result<Vec<(Vec<u8>, usize)>, WireError> {
    let gateways = ring.len().max(1);
    // Sized for an even share and a little more, so that they rarely grow.
    let share = request.len() / gateways + request.len() / (4 * gateways) + 64;
    let mut parts: Vec<(Vec<u8>, usize)> = (0..gateways)
        .map(|_| (Vec::with_capacity(share), 0))
        .collect();
    // Of the resource container being cut: its scope containers' other fields, and
    // each record kept, with its owner and scope container, in order.
    let mut scopes: Vec<ScopeFields<'_>> = Vec::new();
    let mut records: Vec<(usize, usize, &[u8])> = Vec::new();
    for resource_container in fields(request) {
        let resource_container = resource_container?;
        if resource_container.number != 1 {
            continue;
        }
        let resource_payload = resource_container.message()?;
        // Its other fields, before and after its scope containers, so that a part
        // keeps the order of the fields.
        let (mut before, mut after): (Vec<&[u8]>, Vec<&[u8]>) = (Vec::new(), Vec::new());
        let mut pod = ["", ""];
        scopes.clear();
        records.clear();
        for field in fields(resource_payload) {
            let field = field?;
            match field.number {
                0 | 1 => {
                    if field.number == 1 {
                        pod = string_attributes(
                            field.message()?,
                            1,
                            [K8S_NAMESPACE_NAME, K8S_POD_NAME],
                        )?;
                    }
                    before.push(field.whole);
                }
                2 => {}
                _ => after.push(field.whole),
            }
        }
        for scope_container in fields(resource_payload) {
            let scope_container = scope_container?;
            if scope_container.number != 2 {
                continue;
            }
            let scope_payload = scope_container.message()?;
            let scope = scopes.len();
            let mut scope_fields = ScopeFields::default();
            for field in fields(scope_payload) {
                let field = field?;
                match field.number {
                    0 | 1 => scope_fields.before.push(field.whole),
                    2 => {
                        let key = record_key(field.message()?, layout, pod)?;
                        if keep(key) {
                            records.push((ring.owner(key).unwrap_or(0), scope, field.whole));
                        }
                    }
                    _ => scope_fields.after.push(field.whole),
                }
            }
            scopes.push(scope_fields);
        }
        for (gateway, (bytes, count)) in parts.iter_mut().enumerate() {
            let mine = || {
                records
                    .iter()
                    .filter(move |(owner, _, _)| *owner == gateway)
            };
            if mine().next().is_none() {
                continue;
            }
            // The length of each scope container of this gateway's, in order.
            let mut scope_lengths: Vec<(usize, usize)> = Vec::new();
            for &(_, scope, record) in mine() {
                match scope_lengths.last_mut() {
                    Some((last, length)) if *last == scope => *length += record.len(),
                    _ => {
                        let fields = scopes.get(scope);
                        let other: usize = fields.map_or(0, |f| total(&f.before) + total(&f.after));
                        scope_lengths.push((scope, other + record.len()));
                    }
                }
            }
            let resource_length = total(&before)
                + total(&after)
                + scope_lengths
                    .iter()
                    .map(|(_, length)| field_length(2, *length))
                    .sum::<usize>();
            put_key(bytes, 1, resource_length);
            before
                .iter()
                .for_each(|field| bytes.extend_from_slice(field));
            let mut written = mine().peekable();
            for (scope, length) in &scope_lengths {
                put_key(bytes, 2, *length);
                let fields = scopes.get(*scope);
                for field in fields.map_or(&[][..], |f| &f.before[..]) {
                    bytes.extend_from_slice(field);
                }
                while let Some((_, _, record)) = written.next_if(|(_, of, _)| of == scope) {
                    bytes.extend_from_slice(record);
                    *count += 1;
                }
                for field in fields.map_or(&[][..], |f| &f.after[..]) {
                    bytes.extend_from_slice(field);
                }
            }
            after
                .iter()
                .for_each(|field| bytes.extend_from_slice(field));
        }
    }
    Ok(parts)
}

fn total(fields: &[&[u8]]) -> usize {
    fields.iter().map(|field| field.len()).sum()
}

/// Bytes of a length-delimited field `number` holding `length` bytes.
fn field_length(number: u32, length: usize) -> usize {
    varint::encoded_len(u64::from(number << 3)) + varint::encoded_len(length as u64) + length
}

/// Writes the key and length of a length-delimited field `number` of `length` bytes.
fn put_key(out: &mut Vec<u8>, number: u32, length: usize) {
    varint::write(out, u64::from(number << 3 | u32::from(LENGTH_DELIMITED)));
    varint::write(out, length as u64);
}

#[cfg(test)]
mod tests {
    use opscope_model::Telemetry;
    use opscope_model::attributes::set_str;
    use opscope_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
    use opscope_proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
    use opscope_proto::otlp::common::v1::InstrumentationScope;
    use opscope_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opscope_proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use opscope_proto::prost::Message;

    use super::*;
    use opscope_model::kubernetes::ObjectRef;

    use crate::loadbalancing::routing::object_key_hash;
    use crate::loadbalancing::routing::tests::pod;
    use crate::loadbalancing::routing::{encode_logs, encode_traces};

    fn ring() -> Ring {
        Ring::new(&["10.0.0.5:4317", "10.0.0.6:4317", "10.0.0.7:4317"])
    }

    fn span(object: Option<&str>, i: usize) -> Span {
        let mut attributes = Vec::new();
        set_str(&mut attributes, "http.method", "PUT");
        if let Some(name) = object {
            set_str(&mut attributes, OBJECT_KIND, "Widget");
            set_str(&mut attributes, OBJECT_NAMESPACE, "shop");
            set_str(&mut attributes, OBJECT_NAME, name);
        }
        Span {
            trace_id: vec![7; 16],
            span_id: (i as u64 + 1).to_be_bytes().to_vec(),
            name: format!("span {i}"),
            start_time_unix_nano: 1_700_000_000_000_000_000 + i as u64,
            attributes,
            ..Span::default()
        }
    }

    fn traces() -> ExportTraceServiceRequest {
        let resource = |pod_name: &str, offset: usize| ResourceSpans {
            resource: Some(pod(pod_name)),
            scope_spans: vec![
                ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "controller-runtime".into(),
                        ..InstrumentationScope::default()
                    }),
                    spans: (0..40)
                        .map(|i| span(Some(&format!("w{}", (i + offset) % 25)), i + offset))
                        .chain([span(None, 1000 + offset)])
                        .collect(),
                    schema_url: "scope-schema".into(),
                },
                ScopeSpans {
                    spans: (0..5)
                        .map(|i| span(Some(&format!("x{i}")), 500 + i))
                        .collect(),
                    ..ScopeSpans::default()
                },
            ],
            schema_url: "resource-schema".into(),
        };
        ExportTraceServiceRequest {
            resource_spans: vec![resource("operator-0", 0), resource("operator-1", 100)],
        }
    }

    /// A record naming its object twice goes by the first name, as the tagger, the
    /// correlator and the decoded routing read it.
    #[test]
    fn a_repeated_object_attribute_routes_by_its_first_value() {
        let key = |span: &Span| record_key(&span.encode_to_vec(), SPANS, ["", ""]).unwrap();
        let mut repeated = span(Some("first"), 1);
        let mut second = Vec::new();
        set_str(&mut second, OBJECT_NAME, "second");
        repeated.attributes.extend(second);
        assert_eq!(key(&repeated), key(&span(Some("first"), 1)));
        assert_ne!(key(&repeated), key(&span(Some("second"), 1)));
        assert_eq!(
            key(&repeated),
            crate::loadbalancing::routing::record_key(&repeated.attributes, None)
        );
    }

    /// The wire cut gives, byte for byte, what encoding the decoded request's parts
    /// gives (an independent path: prost's structs and the two-pass encoder).
    #[test]
    fn the_wire_cut_equals_the_decoded_cut_byte_for_byte() {
        let request = traces();
        let bytes = request.encode_to_vec();
        let ring = ring();
        let cut = split(&bytes, SPANS, &ring, &|_| true).unwrap();
        let expected = encode_traces(&request, &ring);
        assert_eq!(cut.len(), expected.len());
        for ((bytes, records), expected) in cut.iter().zip(&expected) {
            assert_eq!(&bytes[..], &expected.bytes()[..]);
            assert_eq!(
                *records,
                ExportTraceServiceRequest::decode(&bytes[..])
                    .unwrap()
                    .item_count()
            );
        }
        assert_eq!(cut.iter().map(|(_, records)| records).sum::<usize>(), 92);
    }

    #[test]
    fn log_records_are_cut_alike_and_a_filter_keeps_only_its_keys() {
        let record = |name: &str| {
            let mut attributes = Vec::new();
            set_str(&mut attributes, OBJECT_KIND, "Widget");
            set_str(&mut attributes, OBJECT_NAMESPACE, "shop");
            set_str(&mut attributes, OBJECT_NAME, name);
            LogRecord {
                attributes,
                body: None,
                ..LogRecord::default()
            }
        };
        let request = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(pod("operator-0")),
                scope_logs: vec![ScopeLogs {
                    log_records: (0..30).map(|i| record(&format!("w{i}"))).collect(),
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            }],
        };
        let bytes = request.encode_to_vec();
        let ring = ring();
        let cut = split(&bytes, LOG_RECORDS, &ring, &|_| true).unwrap();
        for ((bytes, _), expected) in cut.iter().zip(encode_logs(&request, &ring)) {
            assert_eq!(&bytes[..], &expected.bytes()[..]);
        }
        let w7 = object_key_hash(
            &ObjectRef {
                kind: "Widget".into(),
                namespace: "shop".into(),
                name: "w7".into(),
                ..ObjectRef::default()
            }
            .key(),
        );
        let only = split(&bytes, LOG_RECORDS, &ring, &|key| key == w7).unwrap();
        assert_eq!(only.iter().map(|(_, records)| records).sum::<usize>(), 1);
    }

    proptest::proptest! {
        /// Damaged requests (as the fuzz target `loadbalancing_wire` feeds them):
        /// never a panic; a cut gives parts that decode, with every record that the
        /// request decodes into.
        #[test]
        fn a_damaged_request_is_refused_or_cut_whole(
            flips in proptest::collection::vec((0usize..4096, 0u8..=255), 0..6),
            cut_at in 0usize..4096,
        ) {
            let mut bytes = traces().encode_to_vec();
            for (at, byte) in flips {
                let len = bytes.len();
                bytes[at % len] = byte;
            }
            bytes.truncate(cut_at.max(bytes.len() / 2));
            if let Ok(parts) = split(&bytes, SPANS, &ring(), &|_| true) {
                let mut records = 0;
                for (part, count) in &parts {
                    let decoded = ExportTraceServiceRequest::decode(&part[..]);
                    proptest::prop_assert!(decoded.is_ok());
                    proptest::prop_assert_eq!(decoded.unwrap().item_count(), *count);
                    records += count;
                }
                if let Ok(whole) = ExportTraceServiceRequest::decode(&bytes[..]) {
                    proptest::prop_assert_eq!(records, whole.item_count());
                }
            }
        }
    }

    #[test]
    fn a_torn_request_is_refused_not_cut() {
        let bytes = traces().encode_to_vec();
        for end in [1, 7, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                split(&bytes[..end], SPANS, &ring(), &|_| true).is_err(),
                "{end}"
            );
        }
        assert!(
            split(&[0x0f], SPANS, &ring(), &|_| true).is_err(),
            "wire type 7"
        );
        assert_eq!(split(&[], SPANS, &ring(), &|_| true).unwrap().len(), 3);
    }
}
