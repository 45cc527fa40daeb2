//! The protobuf varint, read and written in one place: every hand-written walk over
//! wire bytes (the receivers' decode budget, the exporters' splitting and routing) and
//! the OTLP encoder stand on these three functions.
//!
//! A varint is 7-bit groups, least significant first, each byte but the last with its
//! high bit set; a `u64` takes at most 10 bytes.

/// Why [`read`] found no varint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The bytes end before a byte without the continuation bit.
    RunsPastTheEnd,
    /// Ten bytes, all with the continuation bit: longer than any `u64`'s.
    LongerThanTenBytes,
}

/// Reads the varint at the start of `bytes` and moves `bytes` past it (also past
/// what it read when it fails). Bits of a tenth byte beyond the 64th are dropped.
#[inline]
pub fn read(bytes: &mut &[u8]) -> Result<u64, VarintError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first().ok_or(VarintError::RunsPastTheEnd)?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(VarintError::LongerThanTenBytes)
}

/// Appends `value` as a varint.
#[inline]
pub fn write(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// How many bytes [`write`] takes for `value` (prost's formula).
#[inline]
pub fn encoded_len(value: u64) -> usize {
    (((value | 1).leading_zeros() ^ 63) as usize * 9 + 73) / 64
}

#[cfg(test)]
mod tests {
    use super::{VarintError, encoded_len, read, write};

    #[test]
    fn values_read_back_in_the_length_announced() {
        for value in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = vec![0xaa];
            write(&mut out, value);
            assert_eq!(out.len() - 1, encoded_len(value), "{value}");
            let mut bytes = &out[1..];
            assert_eq!(read(&mut bytes), Ok(value));
            assert!(bytes.is_empty());
        }
    }

    #[test]
    fn the_reference_encodings() {
        let mut out = Vec::new();
        write(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let mut bytes: &[u8] = &[0x96, 0x01, 0x05];
        assert_eq!(read(&mut bytes), Ok(150));
        assert_eq!(bytes, [0x05]);
    }

    #[test]
    fn cut_and_overlong_varints_are_refused() {
        let mut cut: &[u8] = &[0x80, 0x80];
        assert_eq!(read(&mut cut), Err(VarintError::RunsPastTheEnd));
        let mut empty: &[u8] = &[];
        assert_eq!(read(&mut empty), Err(VarintError::RunsPastTheEnd));
        let mut overlong: &[u8] = &[0xff; 11];
        assert_eq!(read(&mut overlong), Err(VarintError::LongerThanTenBytes));
        assert_eq!(overlong.len(), 1, "ten bytes taken");
    }
}
