//! OTLP trace and log requests encoded in two passes, the same bytes prost writes.
//!
//! prost writes a nested message's length before its body and works it out by walking
//! the body; an attribute value sits five messages deep (request, resource, scope,
//! span, attribute), so its size is worked out five times over, and every write checks
//! the buffer's room. Here each message is measured once, the lengths are kept in
//! the order the messages are met, and the bytes are written into a buffer of exactly
//! the right size. No maintained crate encodes prost's generated types that way.
//!
//! Every message lists its fields once ([`Fields::fields`]), for both passes. The
//! structs are taken apart without `..`, so a field added to the model by an
//! upgrade of the OTLP crate fails the build here instead of being dropped.

use crate::otlp::collector::logs::v1::ExportLogsServiceRequest;
use crate::otlp::collector::trace::v1::ExportTraceServiceRequest;
use crate::otlp::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use crate::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use crate::otlp::resource::v1::Resource;
use crate::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use crate::varint;

/// A request encoded in two passes.
pub trait EncodeOnce {
    fn encode_once(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_once_into(&mut out);
        out
    }

    /// Appends the encoding to `out`, which grows once, to exactly the size needed
    /// when it is empty.
    fn encode_once_into(&self, out: &mut Vec<u8>);
}

impl<M: Fields> EncodeOnce for M {
    fn encode_once_into(&self, out: &mut Vec<u8>) {
        let mut measure = Measure::default();
        self.fields(&mut measure);
        out.reserve(measure.size);
        let mut write = Write {
            out: std::mem::take(out),
            lengths: measure.lengths.into_iter(),
        };
        self.fields(&mut write);
        *out = write.out;
    }
}

/// A message's fields, in field-number order (prost's order), given to a pass.
pub trait Fields {
    fn fields<P: Pass>(&self, pass: &mut P);
}

/// One pass over the fields: measuring or writing. The `_present` forms are for
/// fields with presence (oneof members), written even when they hold the default.
pub trait Pass {
    fn bytes(&mut self, field: u32, value: &[u8]);
    fn bytes_present(&mut self, field: u32, value: &[u8]);
    fn varint(&mut self, field: u32, value: u64);
    fn varint_present(&mut self, field: u32, value: u64);
    fn fixed64(&mut self, field: u32, value: u64);
    fn fixed64_present(&mut self, field: u32, value: u64);
    fn fixed32(&mut self, field: u32, value: u32);
    fn message<M: Fields>(&mut self, field: u32, message: &M);
}

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LENGTH_DELIMITED: u32 = 2;
const FIXED32: u32 = 5;

fn key_len(field: u32) -> usize {
    varint::encoded_len(u64::from(field << 3))
}

/// The first pass: the size of the message, and of each nested one in order.
#[derive(Default)]
struct Measure {
    size: usize,
    lengths: Vec<usize>,
}

impl Pass for Measure {
    fn bytes(&mut self, field: u32, value: &[u8]) {
        if !value.is_empty() {
            self.bytes_present(field, value);
        }
    }

    fn bytes_present(&mut self, field: u32, value: &[u8]) {
        self.size += key_len(field) + varint::encoded_len(value.len() as u64) + value.len();
    }

    fn varint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.varint_present(field, value);
        }
    }

    fn varint_present(&mut self, field: u32, value: u64) {
        self.size += key_len(field) + varint::encoded_len(value);
    }

    fn fixed64(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.fixed64_present(field, value);
        }
    }

    fn fixed64_present(&mut self, field: u32, _: u64) {
        self.size += key_len(field) + 8;
    }

    fn fixed32(&mut self, field: u32, value: u32) {
        if value != 0 {
            self.size += key_len(field) + 4;
        }
    }

    fn message<M: Fields>(&mut self, field: u32, message: &M) {
        let slot = self.lengths.len();
        self.lengths.push(0);
        let outer = std::mem::take(&mut self.size);
        message.fields(self);
        let length = std::mem::replace(&mut self.size, outer);
        if let Some(recorded) = self.lengths.get_mut(slot) {
            *recorded = length;
        }
        self.size += key_len(field) + varint::encoded_len(length as u64) + length;
    }
}

/// The second pass: the bytes, with the lengths the first pass found.
struct Write {
    out: Vec<u8>,
    lengths: std::vec::IntoIter<usize>,
}

impl Write {
    fn put_varint(&mut self, value: u64) {
        varint::write(&mut self.out, value);
    }

    fn put_key(&mut self, field: u32, wire_type: u32) {
        self.put_varint(u64::from(field << 3 | wire_type));
    }
}

impl Pass for Write {
    fn bytes(&mut self, field: u32, value: &[u8]) {
        if !value.is_empty() {
            self.bytes_present(field, value);
        }
    }

    fn bytes_present(&mut self, field: u32, value: &[u8]) {
        self.put_key(field, LENGTH_DELIMITED);
        self.put_varint(value.len() as u64);
        self.out.extend_from_slice(value);
    }

    fn varint(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.varint_present(field, value);
        }
    }

    fn varint_present(&mut self, field: u32, value: u64) {
        self.put_key(field, VARINT);
        self.put_varint(value);
    }

    fn fixed64(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.fixed64_present(field, value);
        }
    }

    fn fixed64_present(&mut self, field: u32, value: u64) {
        self.put_key(field, FIXED64);
        self.out.extend_from_slice(&value.to_le_bytes());
    }

    fn fixed32(&mut self, field: u32, value: u32) {
        if value != 0 {
            self.put_key(field, FIXED32);
            self.out.extend_from_slice(&value.to_le_bytes());
        }
    }

    fn message<M: Fields>(&mut self, field: u32, message: &M) {
        // The first pass met the same messages in the same order.
        let length = self.lengths.next().unwrap_or_default();
        self.put_key(field, LENGTH_DELIMITED);
        self.put_varint(length as u64);
        message.fields(self);
    }
}

/// Signed integers are varints of their two's complement (64 bits, as prost).
fn signed(value: i64) -> u64 {
    value as u64
}

fn messages<P: Pass, M: Fields>(pass: &mut P, field: u32, messages: &[M]) {
    for message in messages {
        pass.message(field, message);
    }
}

impl Fields for ExportTraceServiceRequest {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self { resource_spans } = self;
        messages(pass, 1, resource_spans);
    }
}

impl Fields for ExportLogsServiceRequest {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self { resource_logs } = self;
        messages(pass, 1, resource_logs);
    }
}

impl Fields for ResourceSpans {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            resource,
            scope_spans,
            schema_url,
        } = self;
        if let Some(resource) = resource {
            pass.message(1, resource);
        }
        messages(pass, 2, scope_spans);
        pass.bytes(3, schema_url.as_bytes());
    }
}

impl Fields for ResourceLogs {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            resource,
            scope_logs,
            schema_url,
        } = self;
        if let Some(resource) = resource {
            pass.message(1, resource);
        }
        messages(pass, 2, scope_logs);
        pass.bytes(3, schema_url.as_bytes());
    }
}

impl Fields for Resource {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            attributes,
            dropped_attributes_count,
            entity_refs,
        } = self;
        messages(pass, 1, attributes);
        pass.varint(2, u64::from(*dropped_attributes_count));
        messages(pass, 3, entity_refs);
    }
}

impl Fields for EntityRef {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            schema_url,
            r#type,
            id_keys,
            description_keys,
        } = self;
        pass.bytes(1, schema_url.as_bytes());
        pass.bytes(2, r#type.as_bytes());
        for key in id_keys {
            pass.bytes_present(3, key.as_bytes());
        }
        for key in description_keys {
            pass.bytes_present(4, key.as_bytes());
        }
    }
}

impl Fields for InstrumentationScope {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            name,
            version,
            attributes,
            dropped_attributes_count,
        } = self;
        pass.bytes(1, name.as_bytes());
        pass.bytes(2, version.as_bytes());
        messages(pass, 3, attributes);
        pass.varint(4, u64::from(*dropped_attributes_count));
    }
}

impl Fields for KeyValue {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            key,
            value,
            key_strindex,
        } = self;
        pass.bytes(1, key.as_bytes());
        if let Some(value) = value {
            pass.message(2, value);
        }
        pass.varint(3, signed(i64::from(*key_strindex)));
    }
}

impl Fields for AnyValue {
    fn fields<P: Pass>(&self, pass: &mut P) {
        use any_value::Value;
        let Self { value } = self;
        match value {
            None => {}
            Some(Value::StringValue(text)) => pass.bytes_present(1, text.as_bytes()),
            Some(Value::BoolValue(flag)) => pass.varint_present(2, u64::from(*flag)),
            Some(Value::IntValue(number)) => pass.varint_present(3, signed(*number)),
            Some(Value::DoubleValue(number)) => pass.fixed64_present(4, number.to_bits()),
            Some(Value::ArrayValue(array)) => pass.message(5, array),
            Some(Value::KvlistValue(list)) => pass.message(6, list),
            Some(Value::BytesValue(bytes)) => pass.bytes_present(7, bytes),
            Some(Value::StringValueStrindex(index)) => {
                pass.varint_present(8, signed(i64::from(*index)))
            }
        }
    }
}

impl Fields for ArrayValue {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self { values } = self;
        messages(pass, 1, values);
    }
}

impl Fields for KeyValueList {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self { values } = self;
        messages(pass, 1, values);
    }
}

impl Fields for ScopeSpans {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            scope,
            spans,
            schema_url,
        } = self;
        if let Some(scope) = scope {
            pass.message(1, scope);
        }
        messages(pass, 2, spans);
        pass.bytes(3, schema_url.as_bytes());
    }
}

impl Fields for Span {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            trace_id,
            span_id,
            trace_state,
            parent_span_id,
            flags,
            name,
            kind,
            start_time_unix_nano,
            end_time_unix_nano,
            attributes,
            dropped_attributes_count,
            events,
            dropped_events_count,
            links,
            dropped_links_count,
            status,
        } = self;
        pass.bytes(1, trace_id);
        pass.bytes(2, span_id);
        pass.bytes(3, trace_state.as_bytes());
        pass.bytes(4, parent_span_id);
        pass.bytes(5, name.as_bytes());
        pass.varint(6, signed(i64::from(*kind)));
        pass.fixed64(7, *start_time_unix_nano);
        pass.fixed64(8, *end_time_unix_nano);
        messages(pass, 9, attributes);
        pass.varint(10, u64::from(*dropped_attributes_count));
        messages(pass, 11, events);
        pass.varint(12, u64::from(*dropped_events_count));
        messages(pass, 13, links);
        pass.varint(14, u64::from(*dropped_links_count));
        if let Some(status) = status {
            pass.message(15, status);
        }
        pass.fixed32(16, *flags);
    }
}

impl Fields for span::Event {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            time_unix_nano,
            name,
            attributes,
            dropped_attributes_count,
        } = self;
        pass.fixed64(1, *time_unix_nano);
        pass.bytes(2, name.as_bytes());
        messages(pass, 3, attributes);
        pass.varint(4, u64::from(*dropped_attributes_count));
    }
}

impl Fields for span::Link {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            trace_id,
            span_id,
            trace_state,
            attributes,
            dropped_attributes_count,
            flags,
        } = self;
        pass.bytes(1, trace_id);
        pass.bytes(2, span_id);
        pass.bytes(3, trace_state.as_bytes());
        messages(pass, 4, attributes);
        pass.varint(5, u64::from(*dropped_attributes_count));
        pass.fixed32(6, *flags);
    }
}

impl Fields for Status {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self { message, code } = self;
        pass.bytes(2, message.as_bytes());
        pass.varint(3, signed(i64::from(*code)));
    }
}

impl Fields for ScopeLogs {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            scope,
            log_records,
            schema_url,
        } = self;
        if let Some(scope) = scope {
            pass.message(1, scope);
        }
        messages(pass, 2, log_records);
        pass.bytes(3, schema_url.as_bytes());
    }
}

impl Fields for LogRecord {
    fn fields<P: Pass>(&self, pass: &mut P) {
        let Self {
            time_unix_nano,
            observed_time_unix_nano,
            severity_number,
            severity_text,
            body,
            attributes,
            dropped_attributes_count,
            flags,
            trace_id,
            span_id,
            event_name,
        } = self;
        pass.fixed64(1, *time_unix_nano);
        pass.varint(2, signed(i64::from(*severity_number)));
        pass.bytes(3, severity_text.as_bytes());
        if let Some(body) = body {
            pass.message(5, body);
        }
        messages(pass, 6, attributes);
        pass.varint(7, u64::from(*dropped_attributes_count));
        pass.fixed32(8, *flags);
        pass.bytes(9, trace_id);
        pass.bytes(10, span_id);
        pass.fixed64(11, *observed_time_unix_nano);
        pass.bytes(12, event_name.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::logs::v1::LogRecord;
    use prost::Message;

    /// A small deterministic generator: each field is left at its default or set to
    /// an edge value, so that every field is met both absent and present.
    struct Draw(u64);

    impl Draw {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }

        fn chance(&mut self) -> bool {
            !self.next().is_multiple_of(3)
        }

        fn count(&mut self, max: u64) -> usize {
            (self.next() % (max + 1)) as usize
        }

        fn text(&mut self) -> String {
            match self.next() % 4 {
                0 => String::new(),
                1 => "k8s.object.name".into(),
                2 => "ü".repeat(self.count(70)),
                _ => "x".repeat(self.count(300)),
            }
        }

        fn bytes(&mut self) -> Vec<u8> {
            let length = [0, 8, 16, 200][self.count(3)];
            (0..length).map(|i| i as u8).collect()
        }

        fn u64(&mut self) -> u64 {
            [0, 1, 127, 128, u64::MAX, 1_700_000_000_000_000_000][self.count(5)]
        }

        fn u32(&mut self) -> u32 {
            [0, 1, 300, u32::MAX][self.count(3)]
        }

        fn i32(&mut self) -> i32 {
            [0, 1, -1, i32::MIN, 17][self.count(4)]
        }

        fn value(&mut self, depth: u32) -> AnyValue {
            use any_value::Value;
            let kind = self.next() % if depth > 2 { 5 } else { 10 };
            let value = match kind {
                0 => None,
                1 => Some(Value::StringValue(self.text())),
                2 => Some(Value::BoolValue(self.chance())),
                3 => Some(Value::IntValue([0, -1, i64::MAX, 42][self.count(3)])),
                4 => Some(Value::DoubleValue(
                    [0.0, -0.0, 1.5, f64::NAN][self.count(3)],
                )),
                5 => Some(Value::BytesValue(self.bytes())),
                6 => Some(Value::StringValueStrindex(self.i32())),
                7 => Some(Value::ArrayValue(ArrayValue {
                    values: (0..self.count(3)).map(|_| self.value(depth + 1)).collect(),
                })),
                _ => Some(Value::KvlistValue(KeyValueList {
                    values: self.attributes(depth + 1),
                })),
            };
            AnyValue { value }
        }

        fn attributes(&mut self, depth: u32) -> Vec<KeyValue> {
            (0..self.count(4))
                .map(|_| KeyValue {
                    key: self.text(),
                    value: self.chance().then(|| self.value(depth)),
                    key_strindex: self.i32(),
                })
                .collect()
        }

        fn resource(&mut self) -> Option<Resource> {
            self.chance().then(|| Resource {
                attributes: self.attributes(0),
                dropped_attributes_count: self.u32(),
                entity_refs: (0..self.count(2))
                    .map(|_| EntityRef {
                        schema_url: self.text(),
                        r#type: self.text(),
                        id_keys: (0..self.count(2)).map(|_| self.text()).collect(),
                        description_keys: (0..self.count(2)).map(|_| self.text()).collect(),
                    })
                    .collect(),
            })
        }

        fn scope(&mut self) -> Option<InstrumentationScope> {
            self.chance().then(|| InstrumentationScope {
                name: self.text(),
                version: self.text(),
                attributes: self.attributes(0),
                dropped_attributes_count: self.u32(),
            })
        }

        fn span(&mut self) -> Span {
            Span {
                trace_id: self.bytes(),
                span_id: self.bytes(),
                trace_state: self.text(),
                parent_span_id: self.bytes(),
                flags: self.u32(),
                name: self.text(),
                kind: self.i32(),
                start_time_unix_nano: self.u64(),
                end_time_unix_nano: self.u64(),
                attributes: self.attributes(0),
                dropped_attributes_count: self.u32(),
                events: (0..self.count(2))
                    .map(|_| span::Event {
                        time_unix_nano: self.u64(),
                        name: self.text(),
                        attributes: self.attributes(0),
                        dropped_attributes_count: self.u32(),
                    })
                    .collect(),
                dropped_events_count: self.u32(),
                links: (0..self.count(2))
                    .map(|_| span::Link {
                        trace_id: self.bytes(),
                        span_id: self.bytes(),
                        trace_state: self.text(),
                        attributes: self.attributes(0),
                        dropped_attributes_count: self.u32(),
                        flags: self.u32(),
                    })
                    .collect(),
                dropped_links_count: self.u32(),
                status: self.chance().then(|| Status {
                    message: self.text(),
                    code: self.i32(),
                }),
            }
        }

        fn log(&mut self) -> LogRecord {
            LogRecord {
                time_unix_nano: self.u64(),
                observed_time_unix_nano: self.u64(),
                severity_number: self.i32(),
                severity_text: self.text(),
                body: self.chance().then(|| self.value(0)),
                attributes: self.attributes(0),
                dropped_attributes_count: self.u32(),
                flags: self.u32(),
                trace_id: self.bytes(),
                span_id: self.bytes(),
                event_name: self.text(),
            }
        }

        fn traces(&mut self) -> ExportTraceServiceRequest {
            ExportTraceServiceRequest {
                resource_spans: (0..self.count(3))
                    .map(|_| ResourceSpans {
                        resource: self.resource(),
                        scope_spans: (0..self.count(3))
                            .map(|_| ScopeSpans {
                                scope: self.scope(),
                                spans: (0..self.count(4)).map(|_| self.span()).collect(),
                                schema_url: self.text(),
                            })
                            .collect(),
                        schema_url: self.text(),
                    })
                    .collect(),
            }
        }

        fn logs(&mut self) -> ExportLogsServiceRequest {
            ExportLogsServiceRequest {
                resource_logs: (0..self.count(3))
                    .map(|_| ResourceLogs {
                        resource: self.resource(),
                        scope_logs: (0..self.count(3))
                            .map(|_| ScopeLogs {
                                scope: self.scope(),
                                log_records: (0..self.count(4)).map(|_| self.log()).collect(),
                                schema_url: self.text(),
                            })
                            .collect(),
                        schema_url: self.text(),
                    })
                    .collect(),
            }
        }
    }

    #[test]
    fn traces_are_the_bytes_prost_writes() {
        let mut draw = Draw(7);
        for _ in 0..2_000 {
            let request = draw.traces();
            assert_eq!(
                request.encode_once(),
                request.encode_to_vec(),
                "{request:?}"
            );
        }
    }

    #[test]
    fn logs_are_the_bytes_prost_writes() {
        let mut draw = Draw(11);
        for _ in 0..2_000 {
            let request = draw.logs();
            assert_eq!(
                request.encode_once(),
                request.encode_to_vec(),
                "{request:?}"
            );
        }
    }

    #[test]
    fn the_buffer_is_sized_exactly() {
        let mut draw = Draw(3);
        let request = draw.traces();
        let bytes = request.encode_once();
        assert_eq!(bytes.len(), request.encoded_len());
        assert_eq!(bytes.capacity(), bytes.len());
    }
}
