//! Go's `time.Duration` spelling (`5s`, `1m30s`, `500ms`, `1h2m3.5s`, `1.5µs`), as
//! controller-runtime prints a requested requeue delay.

use std::time::Duration;

/// Nanoseconds in each unit Go prints, longest spelling first where they share a start.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Digits of a fraction beyond which precision no longer matters (below a nanosecond
/// even for hours).
const FRACTION_DIGITS: usize = 18;

/// The duration Go's `time.Duration.String()` or `time.ParseDuration` spells; negative
/// durations and overflow are `None`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return None;
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let (nanos, after) = next_component(rest)?;
        total_nanos = total_nanos.checked_add(nanos)?;
        rest = after;
    }
    u64::try_from(total_nanos).ok().map(Duration::from_nanos)
}

/// The nanoseconds of the leading `<number><unit>` of `text`, and what follows it.
fn next_component(text: &str) -> Option<(u128, &str)> {
    let number_len = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, rest) = text.split_at_checked(number_len)?;
    let unit_len = rest
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(rest.len());
    let (unit, rest) = rest.split_at_checked(unit_len)?;
    let (_, unit_nanos) = UNITS.iter().find(|(name, _)| *name == unit)?;
    Some((scaled(number, *unit_nanos)?, rest))
}

/// `number` (digits with an optional fraction) times `unit_nanos`.
fn scaled(number: &str, unit_nanos: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole_nanos = match whole {
        "" => 0,
        digits => digits.parse::<u128>().ok()?.checked_mul(unit_nanos)?,
    };
    let (fraction_value, fraction_scale) = fraction
        .bytes()
        .take(FRACTION_DIGITS)
        .fold((0u128, 1u128), |(value, scale), digit| {
            (value * 10 + u128::from(digit - b'0'), scale * 10)
        });
    whole_nanos.checked_add(fraction_value * unit_nanos / fraction_scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(ms: u64) -> Option<Duration> {
        Some(Duration::from_millis(ms))
    }

    #[test]
    fn single_units() {
        assert_eq!(parse_go_duration("5s"), millis(5_000));
        assert_eq!(parse_go_duration("500ms"), millis(500));
        assert_eq!(parse_go_duration("2h"), millis(7_200_000));
        assert_eq!(parse_go_duration("10ns"), Some(Duration::from_nanos(10)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("0s"), Some(Duration::ZERO));
    }

    #[test]
    fn compound_and_fractional() {
        assert_eq!(parse_go_duration("1m30s"), millis(90_000));
        assert_eq!(parse_go_duration("1h2m3.5s"), millis(3_723_500));
        assert_eq!(parse_go_duration("2h0m0s"), millis(7_200_000));
        assert_eq!(
            parse_go_duration("1.5µs"),
            Some(Duration::from_nanos(1_500))
        );
        assert_eq!(
            parse_go_duration("1.5μs"),
            Some(Duration::from_nanos(1_500))
        );
        assert_eq!(parse_go_duration("2us"), Some(Duration::from_nanos(2_000)));
        assert_eq!(parse_go_duration(".5s"), millis(500));
        assert_eq!(parse_go_duration("+3s"), millis(3_000));
    }

    #[test]
    fn rejects_malformed() {
        for text in [
            "", "s", "5", "5x", "-5s", "1.2.3s", "1m30", "1 m", "5sec", ".s",
        ] {
            assert_eq!(parse_go_duration(text), None, "{text}");
        }
        assert_eq!(parse_go_duration("99999999999999999999999h"), None);
        assert_eq!(parse_go_duration(&"9".repeat(100_000)), None);
    }
}
