//! A JSON log line read into borrowed fields: keys and strings point into the line
//! unless they hold escapes. A `serde_json::Map` would copy every key and value and
//! insert each into a B-tree, most of the cost of recognising a zap JSON line.
//!
//! The fields come out as a `serde_json::Map` would give them (sorted by key, the
//! last of a repeated key kept), so the first-match rules read them the same.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value as the recognisers read it.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonValue<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    Float(f64),
    Bool(bool),
    Object(JsonObject<'a>),
    Array(Vec<JsonValue<'a>>),
    Null,
}

/// The fields of a JSON object, sorted by key, each key once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JsonObject<'a> {
    fields: Vec<(Cow<'a, str>, JsonValue<'a>)>,
}

impl<'a> JsonObject<'a> {
    /// The object a line holds, if it is one JSON object.
    pub fn parse(line: &'a str) -> Option<Self> {
        let mut deserializer = serde_json::Deserializer::from_str(line);
        let object = JsonObject::deserialize(&mut deserializer).ok()?;
        deserializer.end().ok()?;
        Some(object)
    }

    /// The object a line starts with when a few words follow it, as a hard-wrapped
    /// paste leaves the next line's prefix after it (`{…}   manager`).
    pub fn parse_before_words(line: &'a str) -> Option<Self> {
        /// Trailing text longer than this is more than a wrapped prefix.
        const MAX_TRAILING: usize = 64;
        let mut stream = serde_json::Deserializer::from_str(line).into_iter::<JsonObject>();
        let object = stream.next()?.ok()?;
        let rest = line.get(stream.byte_offset()..)?.trim();
        (rest.len() <= MAX_TRAILING && !rest.contains(['{', '"'])).then_some(object)
    }

    pub fn get(&self, key: &str) -> Option<&JsonValue<'a>> {
        self.fields
            .binary_search_by(|(name, _)| name.as_ref().cmp(key))
            .ok()
            .and_then(|at| self.fields.get(at))
            .map(|(_, value)| value)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &JsonValue<'a>)> {
        self.fields.iter().map(|(key, value)| (key.as_ref(), value))
    }

    fn from_fields(mut fields: Vec<(Cow<'a, str>, JsonValue<'a>)>) -> Self {
        // Stable: of a repeated key, the last one ends up last, and is the one kept.
        fields.sort_by(|(a, _), (b, _)| a.cmp(b));
        let mut unique: Vec<(Cow<'a, str>, JsonValue<'a>)> = Vec::with_capacity(fields.len());
        for (key, value) in fields {
            match unique.last_mut() {
                Some(last) if last.0 == key => last.1 = value,
                _ => unique.push((key, value)),
            }
        }
        Self { fields: unique }
    }
}

impl<'a> JsonValue<'a> {
    pub fn as_object(&self) -> Option<&JsonObject<'a>> {
        match self {
            JsonValue::Object(object) => Some(object),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[JsonValue<'a>]> {
        match self {
            JsonValue::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn is_object(&self) -> bool {
        matches!(self, JsonValue::Object(_))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for JsonObject<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match JsonValue::deserialize(deserializer)? {
            JsonValue::Object(object) => Ok(object),
            _ => Err(de::Error::custom("not a JSON object")),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for JsonValue<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

/// A key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Key(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Key(Cow::Owned(text.to_string())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(Key(Cow::Owned(text)))
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = JsonValue<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Self::Value, E> {
        Ok(JsonValue::Bool(flag))
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<Self::Value, E> {
        Ok(JsonValue::Int(number))
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<Self::Value, E> {
        // As serde_json's `as_i64`: beyond i64, the number is read as a float.
        Ok(i64::try_from(number).map_or(JsonValue::Float(number as f64), JsonValue::Int))
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<Self::Value, E> {
        Ok(JsonValue::Float(number))
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(JsonValue::Str(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(JsonValue::Str(Cow::Owned(text.to_string())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(JsonValue::Str(Cow::Owned(text)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(JsonValue::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(JsonValue::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self::Value, A::Error> {
        let mut values = Vec::new();
        while let Some(value) = items.next_element()? {
            values.push(value);
        }
        Ok(JsonValue::Array(values))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::new();
        while let Some(Key(key)) = entries.next_key()? {
            fields.push((key, entries.next_value()?));
        }
        Ok(JsonValue::Object(JsonObject::from_fields(fields)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrows_plain_strings_and_owns_escaped_ones() {
        let object = JsonObject::parse(r#"{"msg":"plain","error":"a \"quoted\" name"}"#).unwrap();
        assert!(matches!(
            object.get("msg"),
            Some(JsonValue::Str(Cow::Borrowed("plain")))
        ));
        assert_eq!(
            object.get("error"),
            Some(&JsonValue::Str(Cow::Owned("a \"quoted\" name".into())))
        );
    }

    #[test]
    fn reads_fields_as_a_serde_json_map_gives_them() {
        let line = r#"{"z":1,"a":{"n":"x","b":[1,"two",null]},"m":2.5,"a2":true,"z":-3,"big":18446744073709551615}"#;
        let object = JsonObject::parse(line).unwrap();
        let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(line).unwrap();
        let keys: Vec<&str> = object.iter().map(|(key, _)| key).collect();
        let map_keys: Vec<&str> = map.keys().map(String::as_str).collect();
        assert_eq!(keys, map_keys, "sorted, each key once");
        assert_eq!(
            object.get("z"),
            Some(&JsonValue::Int(-3)),
            "the last of a repeated key"
        );
        assert_eq!(object.get("big"), Some(&JsonValue::Float(u64::MAX as f64)));
        let nested = object.get("a").and_then(JsonValue::as_object).unwrap();
        assert_eq!(
            nested
                .get("b")
                .and_then(JsonValue::as_array)
                .map(<[_]>::len),
            Some(3)
        );
        assert!(object.get("nope").is_none());
    }

    #[test]
    fn only_one_object_is_a_json_line() {
        assert!(JsonObject::parse("[1, 2]").is_none());
        assert!(JsonObject::parse(r#"{"a":1} trailing"#).is_none());
        assert!(JsonObject::parse(r#"{"a":"#).is_none());
        assert!(JsonObject::parse("{}").is_some());
    }
}
