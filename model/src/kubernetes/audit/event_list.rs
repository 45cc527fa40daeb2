//! The webhook's payload: an `audit.k8s.io` `EventList`, split into its events, each
//! kept as its own JSON text with the few fields the receiver reads.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::decodable::{may_escape_surrogate, may_overflow_number};
use super::{API_VERSION_PREFIX, event_time};

const EVENT_LIST: &str = "EventList";

/// A batch as the API server posts it; the items are left unparsed until read.
pub struct EventList<'a> {
    api_version: String,
    items: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListDocument<'a> {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    /// The API server writes an empty list as `null`. Split into items only once
    /// their number is known to be within the limit.
    #[serde(borrow, default)]
    items: Option<&'a RawValue>,
}

/// Why a batch is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListError {
    /// Not an audit `EventList`: a bad request.
    Invalid(String),
    /// More events than the receiver takes in one batch.
    TooManyEvents { limit: usize },
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(reason) => f.write_str(reason),
            Self::TooManyEvents { limit } => write!(
                f,
                "the batch holds more than max_events_per_request {limit} events"
            ),
        }
    }
}

/// What the receiver reads of one event, borrowed from its text where no escape
/// needs decoding; the rest of it is carried in the body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EventHeader<'a> {
    /// Absent on the items of a list.
    #[serde(borrow, deserialize_with = "optional_text")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, deserialize_with = "optional_text")]
    pub api_version: Option<Cow<'a, str>>,
    #[serde(rename = "auditID", borrow)]
    pub audit_id: Cow<'a, str>,
    #[serde(borrow)]
    pub stage: Cow<'a, str>,
    #[serde(borrow)]
    pub verb: Cow<'a, str>,
    #[serde(borrow)]
    pub user: UserInfo<'a>,
    #[serde(borrow)]
    pub object_ref: Option<ObjectReference<'a>>,
    #[serde(borrow, deserialize_with = "optional_text")]
    pub stage_timestamp: Option<Cow<'a, str>>,
    #[serde(borrow, deserialize_with = "optional_text")]
    pub request_received_timestamp: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UserInfo<'a> {
    #[serde(borrow)]
    pub username: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectReference<'a> {
    #[serde(borrow)]
    pub resource: Cow<'a, str>,
    #[serde(borrow)]
    pub api_group: Cow<'a, str>,
}

/// An optional string, borrowed as a `Cow` field is (serde borrows a `Cow` only
/// when it is not inside an `Option`).
fn optional_text<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text<'de>>::deserialize(deserializer)?.map(|text| text.0))
}

impl EventHeader<'_> {
    /// The resource as `resource` (core group) or `resource.group`; empty for
    /// requests to non-resource URLs.
    pub fn qualified_resource(&self) -> Cow<'_, str> {
        match &self.object_ref {
            Some(object) if !object.api_group.is_empty() => {
                Cow::Owned(format!("{}.{}", object.resource, object.api_group))
            }
            Some(object) => Cow::Borrowed(&object.resource),
            None => Cow::Borrowed(""),
        }
    }
}

/// One event of a batch: its header and its JSON text.
pub struct AuditEvent<'a> {
    pub header: EventHeader<'a>,
    raw: &'a str,
    list_api_version: &'a str,
}

impl<'a> EventList<'a> {
    /// Reads a batch of at most `max_events` events; the reason says what is wrong
    /// with one that is not an `audit.k8s.io` `EventList`.
    pub fn parse(body: &'a [u8], max_events: usize) -> Result<Self, ListError> {
        let invalid =
            |e: serde_json::Error| ListError::Invalid(format!("not an audit EventList: {e}"));
        let document: ListDocument<'a> = serde_json::from_slice(body).map_err(invalid)?;
        if document.kind != EVENT_LIST || !document.api_version.starts_with(API_VERSION_PREFIX) {
            return Err(ListError::Invalid(format!(
                "expected kind EventList of apiVersion audit.k8s.io/v1, got kind {:?} apiVersion {:?}",
                document.kind, document.api_version
            )));
        }
        let items = match document.items {
            Some(items) => {
                let mut items = serde_json::Deserializer::from_str(items.get());
                let bounded = BoundedItems { max_events };
                items
                    .deserialize_option(bounded)
                    .map_err(|e| match e.to_string() {
                        reason if reason.starts_with(TOO_MANY) => {
                            ListError::TooManyEvents { limit: max_events }
                        }
                        _ => invalid(e),
                    })?
            }
            None => Vec::new(),
        };
        Ok(Self {
            api_version: document.api_version,
            items,
        })
    }

    /// How many events the batch holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the batch holds no event (the API server posts none, but a client may).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The events with their headers read; an item that is not an event fails the
    /// whole batch, so that a batch is taken whole or not at all.
    pub fn events(&self) -> Result<Vec<AuditEvent<'_>>, String> {
        self.items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let header: EventHeader<'_> = serde_json::from_str(item.get())
                    .map_err(|e| format!("items[{index}]: not an audit event: {e}"))?;
                // The header skips what it does not name; the records carry the whole
                // event on, so what skipping lets through is checked whole.
                if may_escape_surrogate(item.get()) || may_overflow_number(item.get()) {
                    serde_json::from_str::<serde_json::Value>(item.get())
                        .map_err(|e| format!("items[{index}]: undecodable JSON text: {e}"))?;
                }
                Ok(AuditEvent {
                    header,
                    raw: item.get(),
                    list_api_version: &self.api_version,
                })
            })
            .collect()
    }
}

const TOO_MANY: &str = "more events than allowed";

/// The items of a list, each left as its JSON text, refused beyond `max_events`
/// before more are kept: a batch of millions of `{}` stays a few bytes each until
/// then.
struct BoundedItems {
    max_events: usize,
}

impl<'de> Visitor<'de> for BoundedItems {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a list of audit events")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, items: D) -> Result<Self::Value, D::Error> {
        items.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            if items.len() == self.max_events {
                return Err(serde::de::Error::custom(TOO_MANY));
            }
            items.push(item);
        }
        Ok(items)
    }
}

impl AuditEvent<'_> {
    /// The event as a complete `Event` document: the items of a list leave out their
    /// `kind` and `apiVersion`, which are put back in front.
    pub fn body(&self) -> String {
        let Some(members) = self.raw.strip_prefix('{') else {
            return self.raw.to_string();
        };
        let mut missing = String::new();
        if self.header.kind.is_none() {
            missing.push_str(r#""kind":"Event","#);
        }
        if self.header.api_version.is_none() {
            let api_version = serde_json::Value::from(self.list_api_version);
            missing.push_str(&format!(r#""apiVersion":{api_version},"#));
        }
        if missing.is_empty() {
            return self.raw.to_string();
        }
        if members.trim_start().starts_with('}') {
            missing.pop();
        }
        format!("{{{missing}{members}")
    }

    /// `stageTimestamp`, else `requestReceivedTimestamp`, in nanoseconds since the
    /// epoch; 0 when neither is a valid time.
    pub fn time_unix_nano(&self) -> u64 {
        event_time(
            self.header.stage_timestamp.as_deref(),
            self.header.request_received_timestamp.as_deref(),
        )
        .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENT_LIST: &str =
        include_str!("../../../../processors/tests/fixtures/audit/event_list.json");

    #[test]
    fn a_batch_gives_its_events_as_complete_documents() {
        let list = EventList::parse(EVENT_LIST.as_bytes(), 100).unwrap();
        let events = list.events().unwrap();
        assert_eq!(events.len(), 3);
        let patch = &events[1];
        assert_eq!(patch.header.stage, "ResponseComplete");
        assert_eq!(
            patch.header.audit_id,
            "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"
        );
        assert_eq!(
            patch.header.user.username,
            "system:serviceaccount:ray-system:kuberay-operator"
        );
        assert_eq!(patch.header.qualified_resource(), "rayjobs.ray.io");
        assert_eq!(patch.time_unix_nano(), 1_714_564_805_006_250_000);

        let body: serde_json::Value = serde_json::from_str(&patch.body()).unwrap();
        assert_eq!(body["kind"], "Event");
        assert_eq!(body["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(body["verb"], "patch");
        assert_eq!(body["requestObject"]["status"]["jobStatus"], "RUNNING");
    }

    #[test]
    fn a_header_borrows_what_needs_no_decoding_from_the_event_text() {
        let list = EventList::parse(EVENT_LIST.as_bytes(), 100).unwrap();
        let events = list.events().unwrap();
        let header = &events[1].header;
        for text in [
            &header.audit_id,
            &header.stage,
            &header.verb,
            &header.user.username,
        ] {
            assert!(matches!(text, Cow::Borrowed(_)), "{text}");
        }
        assert!(matches!(header.stage_timestamp, Some(Cow::Borrowed(_))));
        assert!(matches!(header.qualified_resource(), Cow::Owned(_)));

        let escaped = br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[
            {"verb":"p\u0061tch","stageTimestamp":"2024-05-01T12:00:00\u005a","objectRef":{"resource":"pods"}}]}"#;
        let list = EventList::parse(escaped, 100).unwrap();
        let events = list.events().unwrap();
        let header = &events[0].header;
        assert_eq!(header.verb, "patch");
        assert_eq!(
            header.stage_timestamp.as_deref(),
            Some("2024-05-01T12:00:00Z")
        );
        assert!(matches!(header.qualified_resource(), Cow::Borrowed("pods")));
    }

    #[test]
    fn complete_events_and_empty_items_are_kept_valid() {
        let list = br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[
            {"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"a","stage":"ResponseComplete"},
            { },
            {"objectRef":{"resource":"pods"},"requestReceivedTimestamp":"2024-05-01T12:00:00Z","stageTimestamp":"soon"}]}"#;
        let list = EventList::parse(list, 100).unwrap();
        let events = list.events().unwrap();
        assert!(
            events[0]
                .body()
                .starts_with(r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID""#)
        );
        let empty: serde_json::Value = serde_json::from_str(&events[1].body()).unwrap();
        assert_eq!(
            empty,
            serde_json::json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1"})
        );
        for event in &events {
            serde_json::from_str::<serde_json::Value>(&event.body()).unwrap();
        }
        assert_eq!(events[1].time_unix_nano(), 0);
        assert_eq!(events[1].header.qualified_resource(), "");
        assert_eq!(events[2].header.qualified_resource(), "pods");
        assert_eq!(events[2].time_unix_nano(), 1_714_564_800_000_000_000);
    }

    /// The list is read but its item `index` is refused as undecodable.
    #[track_caller]
    fn assert_undecodable(list: &str, index: usize) {
        let refused = EventList::parse(list.as_bytes(), 100)
            .unwrap()
            .events()
            .err();
        let expected = format!("items[{index}]: undecodable JSON text");
        assert!(
            refused
                .as_deref()
                .is_some_and(|reason| reason.starts_with(&expected)),
            "{refused:?}"
        );
    }

    #[test]
    fn an_event_with_a_number_no_reader_takes_is_refused() {
        // The input the audit_json fuzz target found, cut to the field that matters.
        let list = |code: &str| {
            format!(
                r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{{"auditID":"a","responseStatus":{{"metadata":{{}},"code":{code}}}}}]}}"#
            )
        };
        assert_undecodable(&list("2003033333e+303"), 0);
        let long = list(&"9".repeat(400));
        assert!(
            EventList::parse(long.as_bytes(), 100)
                .unwrap()
                .events()
                .is_err()
        );
        for fine in ["409", "1e100", "2.5e-300"] {
            let list = list(fine);
            let parsed = EventList::parse(list.as_bytes(), 100).unwrap();
            assert!(parsed.events().is_ok(), "{fine}");
        }
    }

    #[test]
    fn an_event_no_reader_could_decode_is_refused_and_a_surrogate_pair_kept() {
        let list = |uid: &str| {
            format!(
                r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{{"auditID":"a"}},{{"auditID":"b","objectRef":{{"uid":"{uid}"}}}}]}}"#
            )
        };
        assert_undecodable(&list(r"\ud800b3f1"), 1);
        let pair = list(r"\ud83d\ude00");
        let parsed = EventList::parse(pair.as_bytes(), 100).unwrap();
        let events = parsed.events().unwrap();
        let body: serde_json::Value = serde_json::from_str(&events[1].body()).unwrap();
        assert_eq!(body["objectRef"]["uid"], "\u{1f600}");
    }

    #[test]
    fn other_documents_are_refused_with_a_reason() {
        let reason = |body: &str| match EventList::parse(body.as_bytes(), 100) {
            Ok(list) => list.events().map(|_| String::new()).unwrap_or_else(|e| e),
            Err(reason) => reason.to_string(),
        };
        assert!(reason("{not json").starts_with("not an audit EventList"));
        assert!(reason("").starts_with("not an audit EventList"));
        assert!(
            reason(r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1"}"#)
                .contains("got kind \"Event\"")
        );
        assert!(
            reason(r#"{"kind":"EventList","apiVersion":"v1","items":[]}"#)
                .contains("apiVersion \"v1\"")
        );
        assert!(
            reason(r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":{}}"#)
                .starts_with("not an audit EventList")
        );
        assert!(
            reason(r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{},"x"]}"#)
                .starts_with("items[1]: not an audit event")
        );
        assert!(
            reason(r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"stage":7}]}"#)
                .starts_with("items[0]")
        );
        let empty = EventList::parse(
            br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":null}"#,
            100,
        )
        .unwrap();
        assert!(empty.events().unwrap().is_empty());
    }

    #[test]
    fn a_batch_of_more_events_than_the_limit_is_refused_before_they_are_read() {
        let list = |items: usize| {
            let items = vec!["{}"; items].join(",");
            format!(r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{items}]}}"#)
        };
        assert_eq!(
            EventList::parse(list(3).as_bytes(), 3).map(|l| l.len()),
            Ok(3)
        );
        let refused = EventList::parse(list(5_500_000).as_bytes(), 3).err();
        assert_eq!(refused, Some(ListError::TooManyEvents { limit: 3 }));
        assert_eq!(
            refused.map(|e| e.to_string()).as_deref(),
            Some("the batch holds more than max_events_per_request 3 events")
        );
        let not_a_list = br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":7}"#;
        assert!(matches!(
            EventList::parse(not_a_list, 3),
            Err(ListError::Invalid(reason)) if reason.starts_with("not an audit EventList")
        ));
    }
}
