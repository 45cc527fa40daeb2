//! Timestamps as operators print them: RFC 3339 / ISO 8601 date-times (any fraction,
//! `Z`, `+02:00`, `+0200` or no offset) and epoch seconds (`1714564800.123`, `1.7e+09`).

const SECOND_NANOS: i64 = 1_000_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Event time: nanoseconds since the Unix epoch.
pub type Nanos = u64;

pub const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// The wall clock in nanoseconds since the Unix epoch: 0 for a clock set before
/// 1970, `u64::MAX` after the year 2554.
pub fn now_unix_nanos() -> Nanos {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// Nanoseconds since the Unix epoch of an RFC 3339 or epoch-seconds timestamp.
pub fn parse_timestamp(text: &str) -> Option<u64> {
    parse_rfc3339(text).or_else(|| parse_epoch_seconds(text))
}

/// Nanoseconds since the Unix epoch of `2024-05-01T12:00:00.123456789+02:00` and its
/// relatives: `T`, `t` or a space between date and time, a fraction of any length
/// (beyond nanoseconds ignored), and `Z`, `±hh:mm`, `±hhmm`, `±hh` or no offset (UTC).
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let days = date_days(bytes)?;
    if !matches!(bytes.get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let seconds_of_day = time_of_day_seconds(bytes)?;
    let (fraction_nanos, offset_start) = fraction(bytes, 19)?;
    let offset = offset_seconds(bytes.get(offset_start..)?)?;
    let seconds = days * SECONDS_PER_DAY + seconds_of_day - offset;
    // In i128: nanoseconds of years past 2262 overflow i64 but still fit the u64 result.
    let nanos = i128::from(seconds) * i128::from(SECOND_NANOS) + i128::from(fraction_nanos);
    u64::try_from(nanos).ok()
}

/// Whether a timestamp [`parse_timestamp`] reads says which zone it is in: epoch
/// seconds and RFC 3339 with `Z` or an offset do; `2024-05-30 11:37:18,581` does not.
pub fn has_zone(text: &str) -> bool {
    if parse_rfc3339(text).is_none() {
        return true;
    }
    let bytes = text.as_bytes();
    fraction(bytes, 19).is_some_and(|(_, zone_start)| zone_start < bytes.len())
}

/// A fixed offset from UTC, in seconds, as a config writes it: `UTC`, `Z`, `+02:00`,
/// `-0500`, `+05`.
pub fn parse_utc_offset(text: &str) -> Option<i64> {
    match text.trim() {
        "UTC" | "utc" | "Z" | "z" => Some(0),
        zone => offset_seconds(zone.as_bytes()).filter(|_| !zone.is_empty()),
    }
}

/// Days since 1970-01-01 of the `YYYY-MM-DD` at the start of `bytes`.
fn date_days(bytes: &[u8]) -> Option<i64> {
    let year = number(bytes, 0, 4)?;
    let month = number(bytes, 5, 2)?;
    let day = number(bytes, 8, 2)?;
    if bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// Seconds into the day of the `hh:mm:ss` at offset 11 (a leap second 60 is allowed).
fn time_of_day_seconds(bytes: &[u8]) -> Option<i64> {
    let hour = number(bytes, 11, 2)?;
    let minute = number(bytes, 14, 2)?;
    let second = number(bytes, 17, 2)?;
    if bytes.get(13) != Some(&b':') || bytes.get(16) != Some(&b':') {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(hour * 3600 + minute * 60 + second)
}

/// The nanoseconds of an optional `.fraction` at `start`, and where what follows begins.
fn fraction(bytes: &[u8], start: usize) -> Option<(i64, usize)> {
    if !matches!(bytes.get(start), Some(b'.' | b',')) {
        return Some((0, start));
    }
    let digits = bytes
        .get(start + 1..)?
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 {
        return None;
    }
    let nanos = bytes
        .get(start + 1..)?
        .iter()
        .take(digits)
        .chain(std::iter::repeat(&b'0'))
        .take(9)
        .fold(0, |nanos, digit| nanos * 10 + i64::from(digit - b'0'));
    Some((nanos, start + 1 + digits))
}

/// The offset from UTC, in seconds, of `Z`, `±hh:mm`, `±hhmm`, `±hh` or nothing.
fn offset_seconds(zone: &[u8]) -> Option<i64> {
    let (sign, digits) = match zone {
        [] | [b'Z' | b'z'] => return Some(0),
        [b'+', rest @ ..] => (1, rest),
        [b'-', rest @ ..] => (-1, rest),
        _ => return None,
    };
    let (hours, minutes) = match digits {
        [h1, h2] => (two_digits(*h1, *h2)?, 0),
        [h1, h2, m1, m2] | [h1, h2, b':', m1, m2] => (two_digits(*h1, *h2)?, two_digits(*m1, *m2)?),
        _ => return None,
    };
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some(sign * (hours * 3600 + minutes * 60))
}

fn two_digits(tens: u8, ones: u8) -> Option<i64> {
    number(&[tens, ones], 0, 2)
}

/// The decimal number in `bytes[start..start + len]`, all digits.
fn number(bytes: &[u8], start: usize, len: usize) -> Option<i64> {
    let digits = bytes.get(start..start + len)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0, |value, digit| value * 10 + i64::from(digit - b'0')),
    )
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date, counting in 400-year eras
/// that start on 1 March so the leap day falls at the end of each year.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Nanoseconds since the Unix epoch of epoch seconds: `1714564800`, `1714564800.123`
/// (exact), or a float such as zap console's `1.6836474195594983e+09`.
pub fn parse_epoch_seconds(text: &str) -> Option<u64> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    decimal_seconds(text).or_else(|| epoch_seconds_from_f64(text.parse().ok()?))
}

/// Nanoseconds since the Unix epoch of a float number of seconds, taken at its
/// shortest decimal spelling so `1714564800.123` is exactly `…800_123_000_000`.
pub fn epoch_seconds_from_f64(seconds: f64) -> Option<u64> {
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    decimal_seconds(&seconds.to_string())
}

fn decimal_seconds(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let fraction_nanos = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0u64, |nanos, digit| nanos * 10 + u64::from(digit - b'0'));
    whole
        .parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(fraction_nanos)
}

/// `2024-05-01T12:00:00.123Z` for nanoseconds since the Unix epoch.
pub fn format_rfc3339(unix_nanos: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(unix_nanos);
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_and_offsets() {
        assert!(has_zone("2024-05-01T12:00:00Z"));
        assert!(has_zone("2024-05-01T12:00:00.5+02:00"));
        assert!(has_zone("1714564800.5"));
        assert!(!has_zone("2024-05-30 11:37:18,581"));
        assert!(!has_zone("2024-05-30T11:37:18"));
        assert_eq!(parse_utc_offset("UTC"), Some(0));
        assert_eq!(parse_utc_offset("+02:00"), Some(7200));
        assert_eq!(parse_utc_offset("-0500"), Some(-18000));
        assert_eq!(parse_utc_offset("Europe/Paris"), None);
        assert_eq!(parse_utc_offset(""), None);
    }

    /// 2024-05-01T12:00:00Z.
    const NOON: u64 = 1_714_564_800_000_000_000;

    #[test]
    fn rfc3339_with_fractions_of_any_length() {
        assert_eq!(parse_rfc3339("2024-05-01T12:00:00Z"), Some(NOON));
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00.123Z"),
            Some(NOON + 123_000_000)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00.123456789Z"),
            Some(NOON + 123_456_789)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00.1234567891234Z"),
            Some(NOON + 123_456_789)
        );
    }

    #[test]
    fn rfc3339_offsets() {
        assert_eq!(parse_rfc3339("2024-05-01T14:00:00+02:00"), Some(NOON));
        assert_eq!(parse_rfc3339("2024-05-01T14:00:00.000+0200"), Some(NOON));
        assert_eq!(parse_rfc3339("2024-05-01T07:30:00-04:30"), Some(NOON));
        assert_eq!(parse_rfc3339("2024-05-01T14:00:00+02"), Some(NOON));
        assert_eq!(parse_rfc3339("2024-05-01 12:00:00"), Some(NOON));
        assert_eq!(parse_rfc3339("2024-05-01t12:00:00z"), Some(NOON));
    }

    #[test]
    fn rfc3339_calendar() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z"),
            Some(1_709_164_800 * 1_000_000_000)
        );
        assert_eq!(parse_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(
            parse_rfc3339("2000-12-31T23:59:59Z"),
            Some(978_307_199 * 1_000_000_000)
        );
    }

    #[test]
    fn rfc3339_rejects_malformed() {
        for text in [
            "",
            "2024",
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:00:00.Z",
            "2024-05-01T12:00:00+2:00",
            "2024-05-01T12:00:00 UTC",
            "1969-12-31T23:59:59Z",
            "2024-05-01T12:00:0é",
            "２０２４-05-01T12:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(text), None, "{text}");
        }
    }

    #[test]
    fn epoch_seconds() {
        assert_eq!(parse_epoch_seconds("1714564800"), Some(NOON));
        assert_eq!(
            parse_epoch_seconds("1714564800.123"),
            Some(NOON + 123_000_000)
        );
        assert_eq!(
            parse_epoch_seconds("1.6836474195594983e+09"),
            Some(1_683_647_419_559_498_300)
        );
        assert_eq!(
            epoch_seconds_from_f64(1_714_564_800.123),
            Some(NOON + 123_000_000)
        );
        for text in ["", ".5", "-1", "NaN", "inf", "1e300", "12:00"] {
            assert_eq!(parse_epoch_seconds(text), None, "{text}");
        }
    }

    #[test]
    fn either_form() {
        assert_eq!(parse_timestamp("2024-05-01T12:00:00Z"), Some(NOON));
        assert_eq!(parse_timestamp("1714564800"), Some(NOON));
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    /// Found by the property tests: past 2262 the nanoseconds overflowed i64, so
    /// times that `format_rfc3339` prints did not read back.
    #[test]
    fn times_past_the_i64_range_read_back() {
        assert_eq!(
            parse_rfc3339("2262-04-11T23:47:16.855Z"),
            Some(9_223_372_036_855_000_000)
        );
        assert_eq!(
            parse_rfc3339("2554-07-21T23:34:33.709551615Z"),
            Some(u64::MAX)
        );
        assert_eq!(parse_rfc3339("2554-07-21T23:34:33.709551616Z"), None);
        assert_eq!(parse_rfc3339("9999-12-31T23:59:59Z"), None);
    }
}
