//! ANSI colour codes that development-mode loggers (zap console, tracing fmt) put
//! around levels and field names, removed so the formats read the plain text.

use std::borrow::Cow;
use std::str::Chars;

const ESCAPE: char = '\u{1b}';

/// `line` without its ANSI escape sequences (`ESC [ params final`); borrowed when
/// there are none.
pub fn strip_ansi(line: &str) -> Cow<'_, str> {
    if !line.contains(ESCAPE) {
        return strip_lost_escapes(line);
    }
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != ESCAPE {
            plain.push(c);
        } else if chars.as_str().starts_with('[') {
            skip_control_sequence(&mut chars);
        }
    }
    Cow::Owned(plain)
}

/// A colour reset that lost its escape character, as terminal output pasted into an
/// issue often does: `[2m2025-11-13T01:14:37Z[0m [31mERROR[0m`.
const LOST_RESET: &str = "[0m";

/// `line` without colour sequences whose escape character was lost in copying
/// (`[31m`, `[2;3m`): only in a line with two resets or more, so that text which
/// merely holds `[1m` stays as it is.
fn strip_lost_escapes(line: &str) -> Cow<'_, str> {
    if line.matches(LOST_RESET).nth(1).is_none() {
        return Cow::Borrowed(line);
    }
    let mut plain = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find('[') {
        let (before, from) = rest.split_at(at);
        plain.push_str(before);
        let parameters = from
            .get(1..)
            .unwrap_or_default()
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b';')
            .count();
        if parameters > 0 && from.as_bytes().get(1 + parameters) == Some(&b'm') {
            rest = from.get(parameters + 2..).unwrap_or_default();
        } else {
            plain.push('[');
            rest = from.get(1..).unwrap_or_default();
        }
    }
    plain.push_str(rest);
    Cow::Owned(plain)
}

/// Consumes `[`, the parameters and the final character (`@`..=`~`) of a sequence.
fn skip_control_sequence(chars: &mut Chars<'_>) {
    chars.next();
    for c in chars {
        if ('@'..='~').contains(&c) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_colour_sequences() {
        assert_eq!(strip_ansi("\u{1b}[31mERROR\u{1b}[0m\tmsg"), "ERROR\tmsg");
        assert_eq!(strip_ansi("\u{1b}[2;3mdim\u{1b}[0m"), "dim");
    }

    #[test]
    fn removes_colour_sequences_that_lost_their_escape() {
        // https://github.com/rancher/cluster-api-addon-provider-fleet/issues/366
        assert_eq!(
            strip_ansi("[2m2025-11-13T01:14:37.669665Z[0m [31mERROR[0m [1mreconciling object[0m"),
            "2025-11-13T01:14:37.669665Z ERROR reconciling object"
        );
        assert_eq!(strip_ansi("[1m] one [0m only"), "[1m] one [0m only");
        assert_eq!(strip_ansi("[0m [x] [0m [12"), " [x]  [12");
    }

    #[test]
    fn leaves_plain_text_borrowed() {
        assert!(matches!(strip_ansi("plain"), Cow::Borrowed("plain")));
    }

    #[test]
    fn survives_truncated_sequences() {
        assert_eq!(strip_ansi("text\u{1b}[31"), "text");
        assert_eq!(strip_ansi("text\u{1b}"), "text");
    }
}
