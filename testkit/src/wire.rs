//! An independent reader of the snappy block format and the protobuf wire format,
//! written from their public specifications, so that what opscope encodes is checked
//! without the structs it was encoded with.

/// Reads a protobuf varint at `*at`, moving `*at` past it.
fn varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = bytes[*at];
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
    }
    panic!("varint longer than 10 bytes");
}

/// Decompresses the snappy block format: a varint length, then literals and copies.
pub fn snappy_block_decode(input: &[u8]) -> Vec<u8> {
    let mut at = 0;
    let length = varint(input, &mut at) as usize;
    let mut output = Vec::with_capacity(length);
    while at < input.len() {
        let tag = input[at];
        at += 1;
        let (copy_length, offset) = match tag & 0b11 {
            0 => {
                let mut literal = usize::from(tag >> 2);
                if literal >= 60 {
                    let width = literal - 59;
                    literal = little_endian(&input[at..at + width]);
                    at += width;
                }
                output.extend_from_slice(&input[at..=at + literal]);
                at += literal + 1;
                continue;
            }
            1 => {
                let offset = (usize::from(tag >> 5) << 8) | usize::from(input[at]);
                at += 1;
                (usize::from((tag >> 2) & 0b111) + 4, offset)
            }
            width => {
                let width = if width == 2 { 2 } else { 4 };
                let offset = little_endian(&input[at..at + width]);
                at += width;
                (usize::from(tag >> 2) + 1, offset)
            }
        };
        assert!(offset > 0 && offset <= output.len(), "copy offset {offset}");
        for _ in 0..copy_length {
            output.push(output[output.len() - offset]);
        }
    }
    assert_eq!(output.len(), length, "length announced by the block");
    output
}

fn little_endian(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rev()
        .fold(0, |value, byte| (value << 8) | usize::from(*byte))
}

enum WireValue<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// The fields of one protobuf message, in wire order: (field number, value).
fn fields(message: &[u8]) -> Vec<(u64, WireValue<'_>)> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let key = varint(message, &mut at);
        let value = match key & 0b111 {
            0 => WireValue::Varint(varint(message, &mut at)),
            2 => {
                let length = varint(message, &mut at) as usize;
                at += length;
                WireValue::Bytes(&message[at - length..at])
            }
            other => panic!("wire type {other} is not read here"),
        };
        fields.push((key >> 3, value));
    }
    fields
}

/// Every value of the length-delimited field `number` (messages, strings, bytes).
pub fn bytes_of(message: &[u8], number: u64) -> Vec<&[u8]> {
    fields(message)
        .into_iter()
        .filter(|(n, _)| *n == number)
        .map(|(_, value)| match value {
            WireValue::Bytes(bytes) => bytes,
            WireValue::Varint(_) => panic!("field {number} is not length-delimited"),
        })
        .collect()
}

/// The string field `number` (the last value wins, as in protobuf); empty when absent.
pub fn string_of(message: &[u8], number: u64) -> String {
    let values = bytes_of(message, number);
    let value = values.last().copied().unwrap_or_default();
    String::from_utf8(value.to_vec()).expect("UTF-8 string field")
}

/// The varint field `number` (the last value wins, as in protobuf); 0 when absent.
pub fn varint_of(message: &[u8], number: u64) -> u64 {
    fields(message)
        .into_iter()
        .filter_map(|(n, value)| match value {
            WireValue::Varint(v) if n == number => Some(v),
            _ => None,
        })
        .next_back()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snappy_block_of_a_literal_and_a_copy() {
        // Length 9, the literal "abc", then a copy of 6 bytes from 3 back.
        let block = [9, 0x08, b'a', b'b', b'c', 0x09, 0x03];
        assert_eq!(snappy_block_decode(&block), b"abcabcabc");
    }

    #[test]
    fn a_message_of_a_string_and_a_varint() {
        // Field 1 = "x" (length-delimited), field 2 = 300 (varint).
        let message = [0x0a, 0x01, b'x', 0x10, 0xac, 0x02];
        assert_eq!(string_of(&message, 1), "x");
        assert_eq!(varint_of(&message, 2), 300);
        assert!(bytes_of(&message, 3).is_empty());
    }
}
