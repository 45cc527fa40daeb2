//! JSON read member by member the way a JSON pointer reads a parsed document, without
//! parsing what is not read: a member of another type than its reader takes reads as
//! absent, the last of repeated members counts, and members no reader names are
//! skipped undecoded (`decodable` says what skipping lets through).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The members of a JSON object that a type keeps, read by name.
pub(super) trait Members<'de>: Default {
    /// Reads the value of member `key` from `map` when this type keeps it, else
    /// skips it (with [`skip`]).
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// `Some` of an object's kept members; `None` for any other JSON value.
pub(super) struct Object<T>(pub Option<T>);

impl<'de, T: Members<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Json::<T>::deserialize(deserializer)? {
            Json::Object(members) => Object(Some(members)),
            _ => Object(None),
        })
    }
}

/// Skips the value of the member just read.
pub(super) fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

/// The member's value when it is a string (`Value::as_str`).
pub(super) fn optional_text<'de, A: MapAccess<'de>>(
    map: &mut A,
) -> Result<Option<Cow<'de, str>>, A::Error> {
    Ok(match map.next_value::<Json<'de, Skipped>>()? {
        Json::Text(text) => Some(text),
        _ => None,
    })
}

/// The member's value when it is a string, else empty.
pub(super) fn text<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Cow<'de, str>, A::Error> {
    optional_text(map).map(Option::unwrap_or_default)
}

/// The member's value when it is an integer; a float is none (`Value::as_i64`,
/// `Value::as_u64`).
pub(super) fn integer<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<i128>, A::Error> {
    Ok(match map.next_value::<Json<'de, Skipped>>()? {
        Json::Integer(integer) => Some(integer),
        _ => None,
    })
}

/// The member's kept members when it is an object.
pub(super) fn object<'de, T: Members<'de>, A: MapAccess<'de>>(
    map: &mut A,
) -> Result<Option<T>, A::Error> {
    map.next_value::<Object<T>>().map(|object| object.0)
}

/// The member's value, decoded whole.
pub(super) fn value<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Value, A::Error> {
    map.next_value()
}

/// An object none of whose members is kept.
#[derive(Default)]
struct Skipped;

impl<'de> Members<'de> for Skipped {
    fn member<A: MapAccess<'de>>(&mut self, _: &str, map: &mut A) -> Result<(), A::Error> {
        skip(map)
    }
}

/// One JSON value as the readers above take it.
enum Json<'de, T> {
    Object(T),
    Text(Cow<'de, str>),
    Integer(i128),
    /// A float, `true`, `false`, `null` or an array.
    Other,
}

impl<'de, T: Members<'de>> Deserialize<'de> for Json<'de, T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor(PhantomData))
    }
}

struct JsonVisitor<T>(PhantomData<T>);

impl<'de, T: Members<'de>> Visitor<'de> for JsonVisitor<T> {
    type Value = Json<'de, T>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Json::Other)
    }

    fn visit_i64<E>(self, integer: i64) -> Result<Self::Value, E> {
        Ok(Json::Integer(integer.into()))
    }

    fn visit_u64<E>(self, integer: u64) -> Result<Self::Value, E> {
        Ok(Json::Integer(integer.into()))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Json::Other)
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Json::Text(Cow::Borrowed(text)))
    }

    fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Json::Text(Cow::Owned(text.to_string())))
    }

    fn visit_string<E>(self, text: String) -> Result<Self::Value, E> {
        Ok(Json::Text(Cow::Owned(text)))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Json::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self::Value, A::Error> {
        while items.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Json::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = T::default();
        while let Some(key) = map.next_key::<Json<'de, Skipped>>()? {
            match key {
                Json::Text(key) => members.member(&key, &mut map)?,
                _ => skip(&mut map)?,
            }
        }
        Ok(Json::Object(members))
    }
}
