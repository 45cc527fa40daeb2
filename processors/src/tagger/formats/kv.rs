//! `key=value` pairs as logfmt and klog write them: keys and values bare or in double
//! quotes, Go-style escapes (`\"`, `\\`, `\n`, `\t`, `\uXXXX`) inside quotes.

use std::borrow::Cow;

/// One item of a `key=value` line.
#[derive(Debug, PartialEq)]
pub enum Token<'a> {
    Pair(Cow<'a, str>, Cow<'a, str>),
    /// A word with no `=` after it, such as the halves of klog's `worker count=1`.
    Word(Cow<'a, str>),
}

/// The tokens of `text`, left to right.
pub fn tokens(text: &str) -> Tokens<'_> {
    Tokens { rest: text }
}

pub struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let text = self.rest.trim_start();
        if text.is_empty() {
            return None;
        }
        let (key, rest) = read_item(text, true);
        let Some(value_text) = rest.strip_prefix('=') else {
            self.rest = rest;
            return Some(Token::Word(key));
        };
        let (value, rest) = read_item(value_text, false);
        self.rest = rest;
        Some(Token::Pair(key, value))
    }
}

/// A quoted item, or a bare one up to whitespace (and `=` for keys); what follows.
fn read_item(text: &str, is_key: bool) -> (Cow<'_, str>, &str) {
    if let Some(quoted) = text.strip_prefix('"') {
        return read_quoted(quoted);
    }
    let end = text
        .find(|c: char| c.is_whitespace() || (is_key && c == '='))
        .unwrap_or(text.len());
    let (item, rest) = text.split_at_checked(end).unwrap_or((text, ""));
    (Cow::Borrowed(item), rest)
}

/// The unescaped content of a quoted string whose opening quote is already consumed,
/// and the text after its closing quote; an unterminated string runs to the end.
pub fn read_quoted(text: &str) -> (Cow<'_, str>, &str) {
    let mut escaped = false;
    let mut has_escapes = false;
    for (index, byte) in text.bytes().enumerate() {
        match byte {
            _ if escaped => escaped = false,
            b'\\' => (escaped, has_escapes) = (true, true),
            b'"' => {
                let content = text.get(..index).unwrap_or_default();
                let rest = text.get(index + 1..).unwrap_or_default();
                return (unescaped(content, has_escapes), rest);
            }
            _ => {}
        }
    }
    (unescaped(text, has_escapes), "")
}

fn unescaped(content: &str, has_escapes: bool) -> Cow<'_, str> {
    if !has_escapes {
        return Cow::Borrowed(content);
    }
    let mut text = String::with_capacity(content.len());
    let mut chars = content.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            text.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => text.push('\n'),
            Some('t') => text.push('\t'),
            Some('r') => text.push('\r'),
            Some('u') => text.push(unicode_escape(&mut chars)),
            Some(other) => text.push(other),
            None => text.push('\\'),
        }
    }
    Cow::Owned(text)
}

/// The character of the four hex digits after `\u`; U+FFFD when they are not valid.
fn unicode_escape(chars: &mut std::str::Chars<'_>) -> char {
    let hex = chars.as_str().get(..4).unwrap_or_default();
    match u32::from_str_radix(hex, 16).ok().and_then(char::from_u32) {
        Some(c) => {
            chars.nth(3);
            c
        }
        None => char::REPLACEMENT_CHARACTER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair<'a>(key: &'a str, value: &'a str) -> Token<'a> {
        Token::Pair(Cow::Borrowed(key), Cow::Borrowed(value))
    }

    #[test]
    fn bare_and_quoted_pairs() {
        let line =
            r#"level=info msg="Reconcile done" "reconciler kind"="RayJob" empty= url=http://x?a=b"#;
        assert_eq!(
            tokens(line).collect::<Vec<_>>(),
            vec![
                pair("level", "info"),
                pair("msg", "Reconcile done"),
                pair("reconciler kind", "RayJob"),
                pair("empty", ""),
                pair("url", "http://x?a=b"),
            ]
        );
    }

    #[test]
    fn words_without_values() {
        assert_eq!(
            tokens("worker count=1").collect::<Vec<_>>(),
            vec![Token::Word(Cow::Borrowed("worker")), pair("count", "1")]
        );
    }

    #[test]
    fn escapes_inside_quotes() {
        let (text, rest) = read_quoted(r#"a \"b\" c\\d\ne\u00e9\u12 f" tail"#);
        assert_eq!(text, "a \"b\" c\\d\neé\u{fffd}12 f");
        assert_eq!(rest, " tail");
    }

    #[test]
    fn unterminated_quote_runs_to_the_end() {
        assert_eq!(read_quoted("abc\\"), (Cow::Borrowed("abc\\"), ""));
        assert_eq!(
            tokens(r#"msg="never closed"#).collect::<Vec<_>>(),
            vec![pair("msg", "never closed")]
        );
    }
}
