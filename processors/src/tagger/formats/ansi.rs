//! ANSI colour codes that development-mode loggers (zap console, tracing fmt) put
//! around levels and field names, removed so the formats read the plain text.

use std::borrow::Cow;
use std::str::Chars;

const ESCAPE: char = '\u{1b}';

/// `line` without its ANSI escape sequences (`ESC [ params final`); borrowed when
/// there are none.
pub fn strip_ansi(line: &str) -> Cow<'_, str> {
    if !line.contains(ESCAPE) {
        return Cow::Borrowed(line);
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
    fn leaves_plain_text_borrowed() {
        assert!(matches!(strip_ansi("plain"), Cow::Borrowed("plain")));
    }

    #[test]
    fn survives_truncated_sequences() {
        assert_eq!(strip_ansi("text\u{1b}[31"), "text");
        assert_eq!(strip_ansi("text\u{1b}"), "text");
    }
}
