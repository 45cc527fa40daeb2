//! The census of an OTLP/JSON request: serde_json's parser drives a visitor over the
//! fields the schema names and builds nothing but the census (keys are borrowed from
//! the body unless escaped; other values are skipped).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize as _;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::schema::{FieldKind, Message};
use super::{Census, CensusError};

/// The census of `body` read as `message`.
pub fn census(message: &'static Message, body: &[u8]) -> Result<Census, CensusError> {
    let mut census = Census::default();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    Walk {
        kind: FieldKind::Inline(message),
        census: &mut census,
    }
    .deserialize(&mut deserializer)
    .and_then(|()| deserializer.end())
    .map_err(|err| CensusError::new(err.to_string()))?;
    Ok(census)
}

/// One JSON value read as a field of `kind`. A value of a type the field cannot
/// have is skipped: the decoder refuses the request afterwards, with its reason.
struct Walk<'c> {
    kind: FieldKind,
    census: &'c mut Census,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an OTLP/JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let message = match self.kind {
            FieldKind::Inline(message) | FieldKind::Repeated(message) => message,
            _ => {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(());
            }
        };
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match message.json_field(&key.0) {
                Some(kind) => map.next_value_seed(Walk {
                    kind,
                    census: &mut *self.census,
                })?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(Element {
                kind: self.kind,
                census: &mut *self.census,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<(), E> {
        if let FieldKind::Text = self.kind {
            self.census.text(text.len());
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// One element of a JSON array that is the value of a field of `kind`.
struct Element<'c> {
    kind: FieldKind,
    census: &'c mut Census,
}

impl<'de> DeserializeSeed<'de> for Element<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.kind {
            FieldKind::Repeated(message) => {
                self.census.element(message);
                Walk {
                    kind: self.kind,
                    census: self.census,
                }
                .deserialize(deserializer)
            }
            FieldKind::RepeatedText => {
                let text = Key::deserialize(deserializer)?;
                self.census.repeated_text(text.0.len());
                Ok(())
            }
            FieldKind::Numbers { .. } => {
                self.census.numbers(1);
                IgnoredAny::deserialize(deserializer).map(drop)
            }
            FieldKind::Inline(_) | FieldKind::Text => {
                IgnoredAny::deserialize(deserializer).map(drop)
            }
        }
    }
}

/// A string, borrowed from the body when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(text)))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(text.to_owned())))
            }
        }

        deserializer.deserialize_str(KeyVisitor)
    }
}
