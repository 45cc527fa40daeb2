//! Property tests of timestamp parsing: any text is read without panic, every valid
//! RFC 3339 date-time is read as an independent parser reads it, and printed times
//! read back.

use std::time::{Duration, UNIX_EPOCH};

use opscope_model::timestamp::{
    epoch_seconds_from_f64, format_rfc3339, parse_epoch_seconds, parse_rfc3339, parse_timestamp,
};
use opscope_testkit::mutate::{mutated_text, token_soup};
use proptest::prelude::*;

fn seeds() -> Vec<String> {
    [
        "2024-05-01T12:00:00Z",
        "2024-05-01T12:00:00.123456789+02:00",
        "2024-02-29 23:59:60,5-0130",
        "1970-01-01T00:00:00.000000000001z",
        "1714564800.123",
        "1.6836474195594983e+09",
    ]
    .map(str::to_string)
    .to_vec()
}

/// A valid date-time in the years a u64 of nanoseconds holds, with a `Z` or numeric offset that keeps it after
/// the epoch, and its value as `humantime` reads the same instant in UTC.
fn valid_rfc3339() -> impl Strategy<Value = (String, u64)> {
    (
        1971..=2553i64,
        1..=12u32,
        1..=28u32,
        0..24u32,
        0..60u32,
        0..60u32,
        0..1_000_000_000u32,
        -14 * 60..=14 * 60i32,
    )
        .prop_map(|(year, month, day, hour, minute, second, nanos, offset)| {
            let utc = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z");
            let base = humantime::parse_rfc3339(&utc)
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            let sign = if offset < 0 { '-' } else { '+' };
            let zone = format!("{sign}{:02}:{:02}", offset.abs() / 60, offset.abs() % 60);
            let text = format!(
                "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{nanos:09}{zone}"
            );
            let seconds = base as i64 - i64::from(offset) * 60;
            let expected = seconds as u64 * 1_000_000_000 + u64::from(nanos);
            (text, expected)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn any_text_is_read_without_panic(text in prop_oneof![
        any::<String>(),
        token_soup(),
        mutated_text(seeds()),
        "[0-9]{1,30}(\\.[0-9]{0,30})?(e[+-]?[0-9]{1,4})?",
    ]) {
        parse_timestamp(&text);
        parse_rfc3339(&text);
        parse_epoch_seconds(&text);
    }

    #[test]
    fn valid_date_times_are_read_like_an_independent_parser((text, expected) in valid_rfc3339()) {
        prop_assert_eq!(parse_rfc3339(&text), Some(expected), "{}", text);
    }

    /// What opscope prints (millisecond precision) reads back as the same instant.
    #[test]
    fn printed_times_read_back(nanos in any::<u64>()) {
        let millis = nanos / 1_000_000 * 1_000_000;
        prop_assert_eq!(parse_rfc3339(&format_rfc3339(nanos)), Some(millis));
    }

    #[test]
    fn epoch_seconds_are_exact(seconds in 0..10_000_000_000u64, nanos in 0..1_000_000_000u64) {
        let text = format!("{seconds}.{nanos:09}");
        prop_assert_eq!(parse_epoch_seconds(&text), Some(seconds * 1_000_000_000 + nanos));
    }

    #[test]
    fn any_float_is_read_without_panic(seconds in any::<f64>()) {
        if let Some(nanos) = epoch_seconds_from_f64(seconds) {
            let back = Duration::from_nanos(nanos).as_secs_f64();
            prop_assert!((back - seconds).abs() <= seconds.abs() * 1e-9 + 1e-6);
        }
    }
}
