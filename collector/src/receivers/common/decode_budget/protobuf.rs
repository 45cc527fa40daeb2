//! The census of an OTLP/protobuf request, read off its wire bytes without building
//! anything: a walk over the length-delimited fields the schema names.
//!
//! Hand-written because prost decodes into the structs (the very allocation the
//! budget exists to refuse) and offers no visitor over the wire format.

use opscope_proto::varint::VarintError;

use super::schema::{FieldKind, Message};
use super::{Census, CensusError};

/// How deep messages may nest, as prost allows.
const MAX_DEPTH: u32 = 100;

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LENGTH_DELIMITED: u64 = 2;
const START_GROUP: u64 = 3;
const END_GROUP: u64 = 4;
const FIXED32: u64 = 5;

/// The census of `bytes` read as `message`.
pub fn census(message: &'static Message, bytes: &[u8]) -> Result<Census, CensusError> {
    let mut census = Census::default();
    walk(message, bytes, 0, &mut census)?;
    Ok(census)
}

fn walk(
    message: &'static Message,
    mut bytes: &[u8],
    depth: u32,
    census: &mut Census,
) -> Result<(), CensusError> {
    if depth > MAX_DEPTH {
        return Err(CensusError::new("messages nested too deeply"));
    }
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let number = u32::try_from(key >> 3).map_err(|_| CensusError::new("invalid field"))?;
        match key & 7 {
            // An unpacked element of a repeated number field takes eight bytes too.
            VARINT => {
                varint(&mut bytes)?;
                census.unpacked_number(message.field(number));
            }
            FIXED64 => {
                skip(&mut bytes, 8)?;
                census.unpacked_number(message.field(number));
            }
            FIXED32 => skip(&mut bytes, 4)?,
            LENGTH_DELIMITED => {
                let length = usize::try_from(varint(&mut bytes)?)
                    .map_err(|_| CensusError::new("length out of range"))?;
                let (value, rest) = bytes
                    .split_at_checked(length)
                    .ok_or_else(|| CensusError::new("a field runs past the end"))?;
                bytes = rest;
                if let Some(kind) = message.field(number) {
                    length_delimited(kind, value, depth, census)?;
                }
            }
            // Groups are in no OTLP message: an unknown field, skipped as prost does.
            START_GROUP => skip_group(number, &mut bytes, depth)?,
            _ => return Err(CensusError::new("invalid wire type")),
        }
    }
    Ok(())
}

/// Skips the fields of the group `number` up to its end.
fn skip_group(number: u32, bytes: &mut &[u8], depth: u32) -> Result<(), CensusError> {
    if depth > MAX_DEPTH {
        return Err(CensusError::new("messages nested too deeply"));
    }
    loop {
        let key = varint(bytes)?;
        let inner = u32::try_from(key >> 3).map_err(|_| CensusError::new("invalid field"))?;
        match key & 7 {
            VARINT => drop(varint(bytes)?),
            FIXED64 => skip(bytes, 8)?,
            FIXED32 => skip(bytes, 4)?,
            LENGTH_DELIMITED => {
                let length = usize::try_from(varint(bytes)?)
                    .map_err(|_| CensusError::new("length out of range"))?;
                skip(bytes, length)?;
            }
            START_GROUP => skip_group(inner, bytes, depth + 1)?,
            END_GROUP if inner == number => return Ok(()),
            _ => return Err(CensusError::new("unexpected end of group")),
        }
    }
}

fn length_delimited(
    kind: FieldKind,
    value: &[u8],
    depth: u32,
    census: &mut Census,
) -> Result<(), CensusError> {
    match kind {
        FieldKind::Inline(child) => walk(child, value, depth + 1, census),
        FieldKind::Repeated(child) => {
            census.element(child);
            walk(child, value, depth + 1, census)
        }
        FieldKind::Text => {
            census.text(value.len());
            Ok(())
        }
        FieldKind::RepeatedText => {
            census.repeated_text(value.len());
            Ok(())
        }
        FieldKind::Numbers { fixed: true } => {
            census.numbers(value.len() / 8);
            Ok(())
        }
        // A packed run of varints: one number ends at each byte without the
        // continuation bit.
        FieldKind::Numbers { fixed: false } => {
            census.numbers(value.iter().filter(|&&byte| byte & 0x80 == 0).count());
            Ok(())
        }
    }
}

fn varint(bytes: &mut &[u8]) -> Result<u64, CensusError> {
    opscope_proto::varint::read(bytes).map_err(|error| {
        CensusError::new(match error {
            VarintError::RunsPastTheEnd => "a varint runs past the end",
            VarintError::LongerThanTenBytes => "a varint longer than 10 bytes",
        })
    })
}

fn skip(bytes: &mut &[u8], length: usize) -> Result<(), CensusError> {
    let (_, rest) = bytes
        .split_at_checked(length)
        .ok_or_else(|| CensusError::new("a field runs past the end"))?;
    *bytes = rest;
    Ok(())
}
