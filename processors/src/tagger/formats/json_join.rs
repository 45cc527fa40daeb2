//! A JSON object cut across lines, as it is pasted or pretty-printed: the lines that
//! follow a line whose object is still open are joined to it until the object closes.
//! An object that never closes (an excerpt cut it) keeps its complete members.

use opscope_model::timestamp::parse_timestamp;

/// Lines one object may be joined from at most, and its length.
pub const MAX_JOINED_LINES: usize = 64;
pub const MAX_JOINED_BYTES: usize = 64 * 1024;

/// Where the scan of an open object stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenJson {
    depth: u32,
    in_string: bool,
    escaped: bool,
    lines: usize,
}

impl OpenJson {
    /// The object a line opens and leaves open, if any: from its first `{`.
    pub fn opened_by(line: &str) -> Option<OpenJson> {
        let start = line.find('{')?;
        let mut open = OpenJson::default();
        open.scan(line.get(start..)?);
        (open.depth > 0).then_some(open)
    }

    /// Takes the next line; true once the object is closed.
    pub fn feed(&mut self, line: &str) -> bool {
        self.lines += 1;
        self.scan(line);
        self.depth == 0
    }

    /// Whether `line` is another record rather than the rest of the open object: it
    /// starts with a timestamp or a klog header, or the object has grown too long.
    pub fn ends_before(&self, line: &str, joined_len: usize) -> bool {
        if self.lines + 1 >= MAX_JOINED_LINES || joined_len + line.len() > MAX_JOINED_BYTES {
            return true;
        }
        let first = line.split_whitespace().next().unwrap_or_default();
        line.starts_with('{')
            || parse_timestamp(first.trim_matches(|c| c == '"' || c == '[')).is_some()
            || is_klog_header(first)
    }

    fn scan(&mut self, text: &str) {
        for byte in text.bytes() {
            self.step(byte);
            if self.depth == 0 && !self.in_string && byte == b'}' {
                return;
            }
        }
    }

    fn step(&mut self, byte: u8) {
        if self.in_string {
            match byte {
                _ if self.escaped => self.escaped = false,
                b'\\' => self.escaped = true,
                b'"' => self.in_string = false,
                _ => {}
            }
            return;
        }
        match byte {
            b'"' => self.in_string = true,
            b'{' => self.depth = self.depth.saturating_add(1),
            b'}' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }
}

/// Whether the text joined from the lines holds a whole JSON object from its first
/// `{` to its end: only then are the lines one record.
pub fn joined_is_object(joined: &str) -> bool {
    joined
        .find('{')
        .and_then(|start| joined.get(start..))
        .is_some_and(|object| super::json_line::JsonObject::parse(object.trim_end()).is_some())
}

/// The complete top-level members of an object that starts `text` and is cut before
/// it closes, closed into an object of their own (`{"a":"x","b":"y` → `{"a":"x"}`);
/// `None` for an object that closes, or one cut within its first member.
pub fn close_cut_object(text: &str) -> Option<String> {
    if !text.starts_with('{') {
        return None;
    }
    let mut scan = OpenJson::default();
    let mut last_member_end = None;
    for (at, byte) in text.bytes().enumerate() {
        scan.step(byte);
        if !scan.in_string && byte == b',' && scan.depth == 1 {
            last_member_end = Some(at);
        }
        if scan.depth == 0 {
            return None;
        }
    }
    let end = last_member_end?;
    Some(format!("{}}}", text.get(..end)?))
}

/// `I0501`, `E1119`: the start of a klog line.
fn is_klog_header(word: &str) -> bool {
    match word.as_bytes() {
        [b'I' | b'W' | b'E' | b'F', digits @ ..] => {
            digits.len() == 4 && digits.iter().all(u8::is_ascii_digit)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_printed_and_wrapped_objects_close() {
        let mut open = OpenJson::opened_by("{").unwrap();
        assert!(!open.feed(r#"  "msg": "a { in a string","#));
        assert!(open.feed("}"));
        let mut wrapped =
            OpenJson::opened_by(r#"2024-09-06T14:53:43Z	DEBUG	p	m	{"name": "rg-network"#).unwrap();
        assert!(wrapped.feed(r#"-k2rbw", "queueLength": 0}"#));
        assert_eq!(OpenJson::opened_by(r#"{"complete": true}"#), None);
        assert_eq!(OpenJson::opened_by("no braces"), None);
    }

    #[test]
    fn an_object_cut_by_an_excerpt_keeps_its_complete_members() {
        // https://github.com/knative/operator/issues/302 (the paste cut the line)
        let cut = r#"{"level":"info","msg":"Updating","name":"knative-eventing/pingsource-mt-adapter","type":"apps/v1, Kind=Deploy"#;
        assert_eq!(
            close_cut_object(cut).as_deref(),
            Some(
                r#"{"level":"info","msg":"Updating","name":"knative-eventing/pingsource-mt-adapter"}"#
            )
        );
        assert_eq!(
            close_cut_object(r#"{"a": {"b": 1, "c": "x, y"#).as_deref(),
            None
        );
        assert_eq!(
            close_cut_object(r#"{"a": "é", "b": "#).as_deref(),
            Some(r#"{"a": "é"}"#)
        );
        assert_eq!(close_cut_object(r#"{"a": 1}"#), None);
        assert_eq!(close_cut_object("not json"), None);
    }

    #[test]
    fn a_new_record_ends_an_open_object() {
        let open = OpenJson::opened_by("{").unwrap();
        assert!(open.ends_before("2024-05-01T12:00:00Z INFO next", 1));
        assert!(open.ends_before("I0501 12:00:00.000000 1 a.go:1] next", 1));
        assert!(!open.ends_before(r#"  "level": "info","#, 1));
        assert!(open.ends_before("{not json at all}", 1));
        assert!(joined_is_object(r#"ts	INFO	m	{"a": "b"}"#));
        assert!(!joined_is_object(r#"{"level":"info","ts":{not json}"#));
        assert!(open.ends_before("x", MAX_JOINED_BYTES));
    }
}
