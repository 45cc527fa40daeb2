//! A `.json` file that holds one JSON document (an audit `EventList` as the webhook
//! posts it, an OTLP/JSON export request, pretty-printed), read without building it:
//! a first pass counts its values and items and keeps nothing, then a Kubernetes
//! list's items (a `kind` and `items`) or an OTLP request's resources are given one
//! by one, each as a one-line document of its own, and any other document whole.
//! A document is refused, before anything of it is read, beyond
//! [`MAX_DOCUMENT_BYTES`], [`MAX_DOCUMENT_ITEMS`] or [`MAX_VALUES_AT_ONCE`].

mod survey;

use std::fmt;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::Deserialize as _;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::files::{Bounded, open, read_error};
use survey::{List, Survey, survey};

/// Largest document read; larger ones are refused.
pub const MAX_DOCUMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Most items of one document's list: a document of [`MAX_DOCUMENT_BYTES`] holds
/// this many items of 64 bytes, and an audit event or an OTLP resource is larger.
pub const MAX_DOCUMENT_ITEMS: u64 = 1_000_000;
/// Most JSON values read at once (the whole document, or one item of its list): as
/// many as a line of [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES) holds (`0,` each).
pub const MAX_VALUES_AT_ONCE: u64 = super::MAX_LINE_BYTES as u64 / 2;

/// The lists of an OTLP/JSON export request, read resource by resource.
const OTLP_LISTS: [&str; 3] = ["resourceSpans", "resourceLogs", "resourceMetrics"];
/// The list of a Kubernetes list (`EventList`, `List`), read item by item.
const ITEMS: &str = "items";

/// Reads `path` as one JSON document, giving `each` its lines (an item's number,
/// from 1, and its text). `Ok(false)`: the file is not one JSON object (JSON lines,
/// or not JSON), to be read line by line. `Err` says why it is not read.
pub fn read_document(path: &Path, each: &mut dyn FnMut(usize, &str)) -> Result<bool, String> {
    let Some(survey) = survey_of(path)? else {
        return Ok(false);
    };
    match plan(&survey)? {
        Plan::Whole => {
            let mut reader = document_reader(path)?;
            let mut deserializer = serde_json::Deserializer::from_reader(&mut reader);
            let document = Box::<RawValue>::deserialize(&mut deserializer).map_err(not_read)?;
            each(1, &compact(document.get()));
        }
        Plan::Items { list, wrap } => {
            let mut reader = document_reader(path)?;
            let mut deserializer = serde_json::Deserializer::from_reader(&mut reader);
            let items = Items {
                list,
                wrap: &wrap,
                each,
            };
            deserializer.deserialize_map(items).map_err(not_read)?;
        }
    }
    Ok(true)
}

/// Why a document was not read, or not to its end.
fn not_read(err: serde_json::Error) -> String {
    if err.is_io() {
        read_error(&std::io::Error::from(err))
    } else {
        format!("read failed: {err}")
    }
}

fn document_reader(path: &Path) -> Result<BufReader<Bounded<Box<dyn Read>>>, String> {
    Ok(BufReader::new(Bounded::new(
        open(path)?,
        MAX_DOCUMENT_BYTES,
        "a JSON document longer than",
    )))
}

/// The survey of a file that is one JSON object; `None` for one that is not.
fn survey_of(path: &Path) -> Result<Option<Survey>, String> {
    survey(document_reader(path)?).map_err(not_read)
}

/// How a surveyed document is read.
enum Plan {
    Whole,
    /// The items of `list`, each given as `wrap` puts it.
    Items {
        list: &'static str,
        wrap: Wrap,
    },
}

/// A one-item document of the same shape: `{<head>[<item>]}`.
struct Wrap {
    head: String,
}

impl Wrap {
    fn line(&self, item: &str) -> String {
        let item = compact(item);
        let mut line = String::with_capacity(self.head.len() + item.len() + 3);
        line.push('{');
        line.push_str(&self.head);
        line.push('[');
        line.push_str(&item);
        line.push_str("]}");
        line
    }
}

fn plan(survey: &Survey) -> Result<Plan, String> {
    let array = |name: &str| {
        survey
            .lists
            .iter()
            .find(|list| list.name == name && list.is_array)
    };
    let otlp: Vec<&List> = OTLP_LISTS.iter().filter_map(|name| array(name)).collect();
    let (list, head) = match (&survey.kind, array(ITEMS), otlp.as_slice()) {
        (Some(kind), Some(items), _) => {
            let mut head = format!(r#""kind":{}"#, json_text(kind));
            if let Some(api_version) = &survey.api_version {
                head.push_str(&format!(r#","apiVersion":{}"#, json_text(api_version)));
            }
            head.push_str(r#","items":"#);
            (items, head)
        }
        (_, _, [resources]) => (*resources, format!("{}:", json_text(resources.name))),
        _ => {
            if survey.values > MAX_VALUES_AT_ONCE {
                return Err(format!(
                    "a JSON document of {} values, more than the {MAX_VALUES_AT_ONCE} read at once \
                     (only a Kubernetes list's items and an OTLP request's resources are read one by one)",
                    survey.values
                ));
            }
            return Ok(Plan::Whole);
        }
    };
    if list.items > MAX_DOCUMENT_ITEMS {
        return Err(format!(
            "a JSON document of {} {}, more than the {MAX_DOCUMENT_ITEMS} read from one document",
            list.items, list.name
        ));
    }
    if list.largest > MAX_VALUES_AT_ONCE {
        return Err(format!(
            "{}[{}] of the JSON document holds {} values, more than the {MAX_VALUES_AT_ONCE} read at once",
            list.name, list.largest_at, list.largest
        ));
    }
    Ok(Plan::Items {
        list: list.name,
        wrap: Wrap { head },
    })
}

fn json_text(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// JSON text without the whitespace between its tokens (what strings hold is kept).
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// The second pass: the items of `list` given one by one, the rest skipped.
struct Items<'a> {
    list: &'static str,
    wrap: &'a Wrap,
    each: &'a mut dyn FnMut(usize, &str),
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut number = 0;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.list {
                map.next_value_seed(ItemsOf {
                    wrap: self.wrap,
                    each: &mut *self.each,
                    number: &mut number,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The items of the list, each given as soon as it is read.
struct ItemsOf<'a> {
    wrap: &'a Wrap,
    each: &'a mut dyn FnMut(usize, &str),
    number: &'a mut usize,
}

impl<'de> DeserializeSeed<'de> for ItemsOf<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsOf<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<Box<RawValue>>()? {
            *self.number += 1;
            (self.each)(*self.number, &self.wrap.line(item.get()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn lines_of(name: &str, content: &[u8]) -> Result<Option<Vec<(usize, String)>>, String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        std::fs::write(&path, content).expect("write");
        let mut lines = Vec::new();
        let document = read_document(&path, &mut |number, text| {
            lines.push((number, text.to_string()))
        })?;
        Ok(document.then_some(lines))
    }

    #[test]
    fn an_event_list_is_read_item_by_item_whatever_the_order_of_its_members() {
        let list = br#"{
          "apiVersion": "audit.k8s.io/v1",
          "items": [ {"auditID": "a", "verb": "get"}, {"auditID": "b \"q\" ", "n": [1, 2]} ],
          "kind": "EventList",
          "metadata": {}
        }"#;
        let lines = lines_of("batch.json", list)
            .expect("read")
            .expect("a document");
        assert_eq!(
            lines,
            [
                (1, r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"auditID":"a","verb":"get"}]}"#.to_string()),
                (2, r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"auditID":"b \"q\" ","n":[1,2]}]}"#.to_string()),
            ]
        );
    }

    #[test]
    fn an_otlp_request_is_read_resource_by_resource() {
        let request = br#"{ "resourceSpans": [ {"resource": {}}, {"scopeSpans": []} ] }"#;
        let lines = lines_of("spans.json", request)
            .expect("read")
            .expect("a document");
        assert_eq!(
            lines,
            [
                (1, r#"{"resourceSpans":[{"resource":{}}]}"#.to_string()),
                (2, r#"{"resourceSpans":[{"scopeSpans":[]}]}"#.to_string()),
            ]
        );
    }

    #[test]
    fn another_document_is_one_line_and_json_lines_are_not_a_document() {
        let lines = lines_of(
            "event.json",
            b"{\n  \"kind\": \"Event\",\n  \"a\": [1, \"x y\"]\n}\n",
        )
        .expect("read")
        .expect("a document");
        assert_eq!(
            lines,
            [(1, r#"{"kind":"Event","a":[1,"x y"]}"#.to_string())]
        );
        assert_eq!(lines_of("lines.json", b"{\"a\":1}\n{\"a\":2}\n"), Ok(None));
        assert_eq!(lines_of("list.json", b"[{\"a\":1}]"), Ok(None));
        assert_eq!(lines_of("broken.json", b"{\"a\":"), Ok(None));
    }

    #[test]
    fn documents_past_a_bound_are_refused_before_any_item_is_given() {
        let mut many = br#"{"kind":"EventList","items":["#.to_vec();
        many.extend(b"{},".repeat(MAX_DOCUMENT_ITEMS as usize));
        many.extend(b"{}]}");
        let err = lines_of("many.json", &many).expect_err("refused");
        assert_eq!(
            err,
            "a JSON document of 1000001 items, more than the 1000000 read from one document"
        );

        let values = MAX_VALUES_AT_ONCE as usize;
        let big_item = format!(
            r#"{{"kind":"List","items":[{{}},[{}0]]}}"#,
            "0,".repeat(values)
        );
        let err = lines_of("big.json", big_item.as_bytes()).expect_err("refused");
        assert_eq!(
            err,
            format!(
                "items[1] of the JSON document holds {} values, more than the {values} read at once",
                values + 2
            )
        );

        let flat = format!(r#"{{"a":[{}0]}}"#, "0,".repeat(values));
        let err = lines_of("flat.json", flat.as_bytes()).expect_err("refused");
        assert!(
            err.starts_with(&format!("a JSON document of {} values", values + 3)),
            "{err}"
        );
    }

    #[test]
    fn a_gzipped_document_longer_than_the_bound_is_refused() {
        // Gzip members one after another inflate to their contents one after another.
        let gzip = |content: &[u8]| {
            let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gzip.write_all(content).expect("gzip");
            gzip.finish().expect("gzip")
        };
        let piece = b"{},".repeat(1 << 18);
        let member = gzip(&piece);
        let mut bytes = gzip(br#"{"kind":"List","items":["#);
        for _ in 0..=(MAX_DOCUMENT_BYTES / piece.len() as u64) {
            bytes.extend(&member);
        }
        bytes.extend(gzip(b"{}]}"));
        let err = lines_of("big.json.gz", &bytes).expect_err("refused");
        assert_eq!(err, "a JSON document longer than 64 MiB");
    }
}
