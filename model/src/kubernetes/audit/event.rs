//! An audit `Event` as its facts read it, in one pass over its text: who called,
//! what was called on which object, the response, and the identity, state and status
//! of the request and response objects. Every other member is skipped unread; each
//! member is read as a JSON pointer reads it (see `lenient_json`).

use std::borrow::Cow;

use serde::de::MapAccess;
use serde_json::Value;

use super::lenient_json::{Members, integer, object, optional_text, skip, text, value};

/// A document as read: an `Event`, or an `EventList` with its items.
#[derive(Default)]
pub(super) struct Document<'a> {
    pub kind: Cow<'a, str>,
    pub api_version: Cow<'a, str>,
    /// `Some` when `items` is an array; decoded whole, each item to be an `Event`
    /// of its own.
    pub items: Option<Vec<Value>>,
    /// The members of an `Event` (also read on a list, which has none of them).
    pub event: Event<'a>,
}

impl<'de> Members<'de> for Document<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "kind" => self.kind = text(map)?,
            "apiVersion" => self.api_version = text(map)?,
            "items" => {
                self.items = match value(map)? {
                    Value::Array(items) => Some(items),
                    _ => None,
                }
            }
            _ => self.event.member(key, map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct Event<'a> {
    pub audit_id: Cow<'a, str>,
    pub stage: Cow<'a, str>,
    /// `user.username`.
    pub username: Cow<'a, str>,
    pub verb: Cow<'a, str>,
    pub object_ref: ObjectReference<'a>,
    pub response_status: ResponseStatus<'a>,
    pub stage_timestamp: Option<Cow<'a, str>>,
    pub request_received_timestamp: Option<Cow<'a, str>>,
    /// `None` unless a JSON object.
    pub request_object: Option<Body<'a>>,
    pub response_object: Option<Body<'a>>,
}

impl<'de> Members<'de> for Event<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "auditID" => self.audit_id = text(map)?,
            "stage" => self.stage = text(map)?,
            "user" => {
                let user: Option<User<'de>> = object(map)?;
                self.username = user.map(|user| user.username).unwrap_or_default();
            }
            "verb" => self.verb = text(map)?,
            "objectRef" => self.object_ref = object(map)?.unwrap_or_default(),
            "responseStatus" => self.response_status = object(map)?.unwrap_or_default(),
            "stageTimestamp" => self.stage_timestamp = optional_text(map)?,
            "requestReceivedTimestamp" => self.request_received_timestamp = optional_text(map)?,
            "requestObject" => self.request_object = object(map)?,
            "responseObject" => self.response_object = object(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
struct User<'a> {
    username: Cow<'a, str>,
}

impl<'de> Members<'de> for User<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "username" => self.username = text(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct ObjectReference<'a> {
    pub api_group: Cow<'a, str>,
    pub resource: Cow<'a, str>,
    pub subresource: Cow<'a, str>,
    pub namespace: Cow<'a, str>,
    pub name: Cow<'a, str>,
}

impl<'de> Members<'de> for ObjectReference<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let field = match key {
            "apiGroup" => &mut self.api_group,
            "resource" => &mut self.resource,
            "subresource" => &mut self.subresource,
            "namespace" => &mut self.namespace,
            "name" => &mut self.name,
            _ => return skip(map),
        };
        *field = text(map)?;
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct ResponseStatus<'a> {
    pub code: Option<i128>,
    pub reason: Cow<'a, str>,
    pub message: Cow<'a, str>,
}

impl<'de> Members<'de> for ResponseStatus<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "code" => self.code = integer(map)?,
            "reason" => self.reason = text(map)?,
            "message" => self.message = text(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// A request or response body: an object, a `Status`, `DeleteOptions`, a list, or
/// the body of a subresource.
#[derive(Default)]
pub(super) struct Body<'a> {
    pub kind: Cow<'a, str>,
    pub metadata: Metadata<'a>,
    /// Decoded whole, for its digest; `Some(Value::Null)` for `"status": null`.
    pub status: Option<Value>,
    /// A `Status`'s message.
    pub message: Cow<'a, str>,
}

impl<'de> Members<'de> for Body<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "kind" => self.kind = text(map)?,
            "metadata" => self.metadata = object(map)?.unwrap_or_default(),
            "status" => self.status = Some(value(map)?),
            "message" => self.message = text(map)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct Metadata<'a> {
    pub name: Cow<'a, str>,
    pub generation: Option<i128>,
    pub resource_version: Option<Cow<'a, str>>,
    pub deletion_timestamp: Option<Cow<'a, str>>,
    pub finalizers: Finalizers,
    /// Whether it has a `uid` or a `creationTimestamp`, of whatever value: only a
    /// whole object has.
    pub identifies_object: bool,
}

/// The `finalizers` member as given.
#[derive(Default)]
pub(super) enum Finalizers {
    #[default]
    Absent,
    /// An array: its strings.
    Listed(Vec<String>),
    /// Any other value.
    Unreadable,
}

impl<'de> Members<'de> for Metadata<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = text(map)?,
            "generation" => self.generation = integer(map)?,
            "resourceVersion" => self.resource_version = optional_text(map)?,
            "deletionTimestamp" => self.deletion_timestamp = optional_text(map)?,
            "finalizers" => {
                self.finalizers = match value(map)? {
                    Value::Array(names) => Finalizers::Listed(
                        names
                            .into_iter()
                            .filter_map(|name| match name {
                                Value::String(name) => Some(name),
                                _ => None,
                            })
                            .collect(),
                    ),
                    _ => Finalizers::Unreadable,
                }
            }
            "uid" | "creationTimestamp" => {
                self.identifies_object = true;
                skip(map)?;
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}
