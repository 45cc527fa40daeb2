//! The first pass over a JSON document: its `kind` and `apiVersion`, the lists that
//! may be read item by item with their items and the values of the largest, and
//! the values of the whole, counted as the parser reads without keeping anything.

use std::fmt;
use std::io::Read;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{ITEMS, OTLP_LISTS};

/// What the first pass learnt of a document.
#[derive(Debug, Default)]
pub struct Survey {
    pub kind: Option<String>,
    pub api_version: Option<String>,
    pub lists: Vec<List>,
    /// Every value of the document.
    pub values: u64,
}

/// A member that may be a list read item by item.
#[derive(Debug)]
pub struct List {
    pub name: &'static str,
    pub is_array: bool,
    pub items: u64,
    /// The values of its largest item, and that item's index.
    pub largest: u64,
    pub largest_at: u64,
}

impl List {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            is_array: false,
            items: 0,
            largest: 0,
            largest_at: 0,
        }
    }
}

/// The survey of a reader that holds one JSON object and nothing after it; `Ok(None)`
/// for one that does not (not JSON, JSON lines, an array), `Err` when it cannot be
/// read to its end.
pub fn survey(reader: impl Read) -> Result<Option<Survey>, serde_json::Error> {
    let mut survey = Survey::default();
    let mut deserializer = serde_json::Deserializer::from_reader(reader);
    let surveyed = deserializer
        .deserialize_map(Values {
            count: &mut survey.values,
            role: Role::Document(&mut survey.kind, &mut survey.api_version, &mut survey.lists),
        })
        .and_then(|_| deserializer.end());
    match surveyed {
        Ok(()) => Ok(Some(survey)),
        Err(err) if err.is_io() => Err(err),
        Err(_) => Ok(None),
    }
}

/// Counts the values of one JSON value, learning what its role asks for.
struct Values<'c> {
    count: &'c mut u64,
    role: Role<'c>,
}

enum Role<'c> {
    /// Only counted.
    Value,
    /// A string kept (`kind`, `apiVersion`).
    Text(&'c mut Option<String>),
    /// A list read item by item, when it is an array.
    List(&'c mut List),
    /// The document: its `kind`, `apiVersion` and lists.
    Document(
        &'c mut Option<String>,
        &'c mut Option<String>,
        &'c mut Vec<List>,
    ),
}

impl<'c> Values<'c> {
    fn of(count: &'c mut u64) -> Self {
        Self {
            count,
            role: Role::Value,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Values<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Values<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        *self.count += 1;
        let Role::Document(kind, api_version, lists) = self.role else {
            while map.next_key::<IgnoredAny>()?.is_some() {
                map.next_value_seed(Values::of(self.count))?;
            }
            return Ok(());
        };
        while let Some(key) = map.next_key::<String>()? {
            let count = &mut *self.count;
            let mut list = [ITEMS]
                .iter()
                .chain(&OTLP_LISTS)
                .find(|name| **name == key)
                .map(|name| List::new(name));
            let role = match (key.as_str(), list.as_mut()) {
                ("kind", _) => Role::Text(&mut *kind),
                ("apiVersion", _) => Role::Text(&mut *api_version),
                (_, Some(list)) => Role::List(list),
                _ => Role::Value,
            };
            map.next_value_seed(Values { count, role })?;
            lists.extend(list);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        *self.count += 1;
        let Role::List(list) = self.role else {
            while seq.next_element_seed(Values::of(self.count))?.is_some() {}
            return Ok(());
        };
        list.is_array = true;
        loop {
            let mut item = 0;
            if seq.next_element_seed(Values::of(&mut item))?.is_none() {
                return Ok(());
            }
            if item > list.largest {
                list.largest = item;
                list.largest_at = list.items;
            }
            list.items += 1;
            *self.count += item;
        }
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<(), E> {
        *self.count += 1;
        if let Role::Text(kept) = self.role {
            *kept = Some(text.to_string());
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        *self.count += 1;
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        *self.count += 1;
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        *self.count += 1;
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        *self.count += 1;
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        *self.count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_values_are_counted_and_kind_kept() {
        let document = br#"{"items": [{}, {"a": [1, 2]}, "x"], "kind": "List", "apiVersion": 7,
            "resourceSpans": {"not": "a list"}, "other": [true, null, 1.5]}"#;
        let survey = survey(&document[..]).expect("read").expect("one object");
        assert_eq!(survey.kind.as_deref(), Some("List"));
        assert_eq!(survey.api_version, None);
        // {} {a:[1,2]} "x" are 1 + 4 + 1 in a list (1); "List", 7; {"not"} 2; [true, null, 1.5] 4.
        assert_eq!(survey.values, 1 + 1 + 6 + 2 + 2 + 4);
        let items = &survey.lists[0];
        assert_eq!(
            (items.name, items.is_array, items.items),
            ("items", true, 3)
        );
        assert_eq!((items.largest, items.largest_at), (4, 1));
        let spans = &survey.lists[1];
        assert_eq!((spans.name, spans.is_array), ("resourceSpans", false));
    }

    #[test]
    fn anything_but_one_object_is_not_surveyed() {
        for text in [
            "",
            "[{}]",
            "{\"a\":1}\n{\"a\":2}",
            "{\"a\":",
            "\"text\"",
            "not json",
        ] {
            assert!(survey(text.as_bytes()).expect("read").is_none(), "{text}");
        }
        assert!(survey(&b"  {}  \n"[..]).expect("read").is_some());
    }
}
