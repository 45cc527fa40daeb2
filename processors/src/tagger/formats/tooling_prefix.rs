//! What log tooling puts around an operator's line when people copy it out of a
//! terminal or a log store: `kubectl logs --timestamps` and Loki/Grafana exports
//! (timestamps before the line), `kubectl logs --prefix` (`[pod/name/container]`),
//! stern (`pod container`), and k9s' log view borders (`│ … │`).
//!
//! A prefix is only taken off when what follows is a line the formats recognise (see
//! `recognize_line`), so prose that happens to start with a date or two words stays
//! as it was written.

use super::fields::is_object_name;
use opscope_model::timestamp::parse_timestamp;

/// Prefixes taken off one line at most: stern with `--timestamps` gives two.
pub const MAX_PREFIXES: usize = 3;

/// A line with one prefix of log tooling taken off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripped<'a> {
    /// What followed the prefix.
    pub rest: &'a str,
    /// The time the prefix gave (kubectl's or the log store's), if any.
    pub time: Option<u64>,
}

/// The line without the borders k9s draws around its log view.
pub fn strip_borders(line: &str) -> &str {
    const BORDERS: &[char] = &['│', '┃', '║'];
    let trimmed = line.trim();
    match trimmed.strip_prefix(BORDERS) {
        Some(inner) => inner.strip_suffix(BORDERS).unwrap_or(inner).trim(),
        None => trimmed,
    }
}

/// The shapes of prefix to try on a line, most specific first; each gives the line
/// after it, which the caller recognises before accepting.
pub fn candidates(line: &str) -> impl Iterator<Item = Stripped<'_>> {
    [
        kubectl_prefix(line),
        timestamp_column(line),
        month_day_time(line),
        stern(line),
        compose_pipe(line),
    ]
    .into_iter()
    .flatten()
}

/// `[pod/kuberay-operator-5f9d/operator] {...}` from `kubectl logs --prefix`.
fn kubectl_prefix(line: &str) -> Option<Stripped<'_>> {
    let inner = line.strip_prefix("[pod/")?;
    let (source, rest) = inner.split_once("] ")?;
    if source.contains(char::is_whitespace) || source.split('/').count() != 2 {
        return None;
    }
    Some(Stripped {
        rest: rest.trim_start(),
        time: None,
    })
}

/// A timestamp column ended by a space or a tab: `kubectl logs --timestamps` writes
/// RFC 3339 with nanoseconds; Loki and Grafana exports write epoch milliseconds or
/// nanoseconds, then RFC 3339, tab-separated.
fn timestamp_column(line: &str) -> Option<Stripped<'_>> {
    let end = line.find([' ', '\t'])?;
    let (column, rest) = line.split_at(end);
    let time = parse_timestamp(column).or_else(|| epoch_integer(column))?;
    Some(Stripped {
        rest: rest.trim_start(),
        time: Some(time),
    })
}

/// `07-01 13:53:30 line`: a log viewer's month, day and time (no year: no time is
/// taken from it).
fn month_day_time(line: &str) -> Option<Stripped<'_>> {
    let head = line.get(..15)?;
    let shape = head.bytes().enumerate().all(|(at, b)| match at {
        2 => b == b'-',
        5 | 14 => b == b' ',
        8 | 11 => b == b':',
        _ => b.is_ascii_digit(),
    });
    shape.then(|| Stripped {
        rest: line.get(15..).unwrap_or_default().trim_start(),
        time: None,
    })
}

/// Nanoseconds of an integer epoch timestamp in milliseconds (13 digits),
/// microseconds (16) or nanoseconds (19), as log stores export them.
fn epoch_integer(column: &str) -> Option<u64> {
    if !column.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = column.parse().ok()?;
    match column.len() {
        13 => value.checked_mul(1_000_000),
        16 => value.checked_mul(1_000),
        19 => Some(value),
        _ => None,
    }
}

/// `| line`, as docker compose and some consoles set a service's lines apart.
fn compose_pipe(line: &str) -> Option<Stripped<'_>> {
    let rest = line.strip_prefix("| ").or_else(|| {
        let (_, rest) = line.split_once(" | ")?;
        Some(rest)
    })?;
    Some(Stripped {
        rest: rest.trim_start(),
        time: None,
    })
}

/// stern's `pod container line`: two words that are Kubernetes names; or one
/// before a JSON line, where the pod's name was wrapped onto the line before.
fn stern(line: &str) -> Option<Stripped<'_>> {
    let (pod, rest) = line.trim_start().split_once(' ')?;
    if !is_object_name(pod) {
        return None;
    }
    let rest = match rest.split_once(' ') {
        Some((container, rest)) if is_object_name(container) => rest,
        _ if rest.starts_with('{') => rest,
        _ => return None,
    };
    Some(Stripped {
        rest: rest.trim_start(),
        time: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rests(line: &str) -> Vec<&str> {
        candidates(line).map(|stripped| stripped.rest).collect()
    }

    #[test]
    fn kubectl_prefix_and_timestamps() {
        assert_eq!(
            rests("[pod/op-5f9d/manager] {\"msg\":\"x\"}"),
            ["{\"msg\":\"x\"}"]
        );
        let stripped = candidates("2024-05-01T12:00:00.123456789Z {\"msg\":\"x\"}")
            .next()
            .unwrap();
        assert_eq!(stripped.rest, "{\"msg\":\"x\"}");
        assert_eq!(stripped.time, Some(1_714_564_800_123_456_789));
    }

    #[test]
    fn log_store_exports() {
        let stripped = candidates("1714564800123\t2024-05-01T12:00:00.123Z\t{\"msg\":\"x\"}")
            .next()
            .unwrap();
        assert_eq!(stripped.time, Some(1_714_564_800_123_000_000));
        assert_eq!(stripped.rest, "2024-05-01T12:00:00.123Z\t{\"msg\":\"x\"}");
    }

    #[test]
    fn stern_names() {
        assert_eq!(
            rests("cert-manager-7d9f cert-manager I0501 12:00:00.000000 1 a.go:1] m"),
            ["I0501 12:00:00.000000 1 a.go:1] m"]
        );
        assert!(rests("Starting Workers now").is_empty());
    }

    #[test]
    fn log_viewer_dates() {
        assert!(
            rests("07-01 13:53:30 time=\"2024-07-01T17:53:30Z\" level=info")
                .contains(&"time=\"2024-07-01T17:53:30Z\" level=info")
        );
    }

    #[test]
    fn k9s_borders() {
        assert_eq!(strip_borders("│ {\"msg\":\"x\"} │"), "{\"msg\":\"x\"}");
        assert_eq!(strip_borders("  plain  "), "plain");
    }
}
