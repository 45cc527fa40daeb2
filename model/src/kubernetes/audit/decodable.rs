//! What a reader that skips the members it does not name lets through, though a
//! reader of the whole text refuses it: an escaped lone surrogate, a number beyond a
//! double, arrays and objects nested deeper than serde_json reads. Each check is a
//! scan of the bytes that may be wrong (a false alarm costs a decoding of the whole
//! text), never one that misses.

/// Whether `raw` may hold an escaped UTF-16 surrogate (`\ud800`–`\udfff`, any case).
/// A skipped string is not decoded, so a lone surrogate there passes. (An escaped
/// backslash before `ud8…` is a false alarm.)
pub(super) fn may_escape_surrogate(raw: &str) -> bool {
    raw.as_bytes().windows(4).any(|window| {
        matches!(
            window,
            [
                b'\\',
                b'u',
                b'd' | b'D',
                b'8' | b'9' | b'a'..=b'f' | b'A'..=b'F',
            ]
        )
    })
}

/// Whether `raw` may hold a number no JSON reader takes as a double (`2e+312`, or
/// hundreds of digits): a skipped number is not converted. An exponent of three or
/// more digits, or a run of 300 digits, is an alarm. (Found by the `audit_json` fuzz
/// target.)
pub(super) fn may_overflow_number(raw: &str) -> bool {
    const LONG_DIGIT_RUN: usize = 300;
    let bytes = raw.as_bytes();
    let mut run = 0;
    for (at, byte) in bytes.iter().enumerate() {
        if byte.is_ascii_digit() {
            run += 1;
            if run >= LONG_DIGIT_RUN {
                return true;
            }
            continue;
        }
        let exponent = matches!(byte, b'e' | b'E') && run > 0;
        run = 0;
        if exponent {
            let digits = bytes
                .get(at + 1..)
                .unwrap_or_default()
                .iter()
                .skip_while(|b| matches!(b, b'+' | b'-'))
                .take_while(|b| b.is_ascii_digit())
                .count();
            if digits >= 3 {
                return true;
            }
        }
    }
    false
}

/// Whether `raw` may nest arrays and objects deeper than serde_json reads them (fewer
/// than 128 levels): a skipped value is not counted. Brackets in strings do not
/// count; 100 levels are an alarm.
pub(super) fn may_nest_too_deep(raw: &str) -> bool {
    const DEEP: usize = 100;
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for byte in raw.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth >= DEEP {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn what_serde_json_nests_too_deep_is_an_alarm() {
        let refused = (1..200)
            .find(|&depth| serde_json::from_str::<serde_json::Value>(&nested(depth)).is_err());
        assert!(refused.is_some_and(|depth| may_nest_too_deep(&nested(depth))));
        assert!(!may_nest_too_deep(&nested(99)));
        assert!(may_nest_too_deep(&nested(100)));
    }

    #[test]
    fn brackets_in_strings_do_not_nest() {
        let in_string = format!(r#"{{"a":"{}\"{}"}}"#, "[".repeat(200), "{".repeat(200));
        assert!(serde_json::from_str::<serde_json::Value>(&in_string).is_ok());
        assert!(!may_nest_too_deep(&in_string));
    }
}
