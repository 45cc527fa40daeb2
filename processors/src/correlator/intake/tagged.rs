//! The attributes of a tagged record that extraction reads, found in one pass over
//! its attribute list: a record has a score of attributes and extraction asks for
//! about as many, so looking each up by scanning the list would compare every key
//! with every other.

use opscope_proto::otlp::common::v1::{KeyValue, any_value::Value};

use opscope_model::attributes::as_str;
use opscope_model::semconv::*;

/// Each field is the value of the attribute of that name (the first, as
/// [`get`](opscope_model::attributes::get) finds it).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tagged<'a> {
    pub(crate) record: Option<&'a Value>,
    pub(crate) reconcile_id: Option<&'a Value>,
    pub(crate) result: Option<&'a Value>,
    pub(crate) requeue_after: Option<&'a Value>,
    pub(crate) error: Option<&'a Value>,
    pub(crate) controller: Option<&'a Value>,
    pub(crate) object: [Option<&'a Value>; 5],
    pub(crate) api: [Option<&'a Value>; 5],
    pub(crate) verb: Option<&'a Value>,
    pub(crate) subresource: Option<&'a Value>,
    pub(crate) actor: Option<&'a Value>,
    pub(crate) code: Option<&'a Value>,
    pub(crate) code_old: Option<&'a Value>,
    pub(crate) generation: Option<&'a Value>,
    pub(crate) observed_generation: Option<&'a Value>,
    pub(crate) resource_version: Option<&'a Value>,
    pub(crate) deletion_timestamp: Option<&'a Value>,
    /// Present (even when empty): the record shows the object's finalizers.
    pub(crate) finalizers: Option<Option<&'a Value>>,
    pub(crate) status_digest: Option<&'a Value>,
    pub(crate) gone: Option<&'a Value>,
    pub(crate) log_source: Option<&'a Value>,
}

/// Positions in [`Tagged::object`] and [`Tagged::api`]: group, kind, resource,
/// namespace, name.
const GROUP: usize = 0;
const KIND: usize = 1;
const RESOURCE: usize = 2;
const NAMESPACE: usize = 3;
const NAME: usize = 4;

impl<'a> Tagged<'a> {
    pub(crate) fn read(attributes: &'a [KeyValue]) -> Self {
        let mut tagged = Self::default();
        for kv in attributes {
            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
            let slot = match kv.key.as_str() {
                OPSCOPE_RECORD => &mut tagged.record,
                RECONCILE_ID => &mut tagged.reconcile_id,
                RECONCILE_RESULT => &mut tagged.result,
                RECONCILE_REQUEUE_AFTER => &mut tagged.requeue_after,
                RECONCILE_ERROR => &mut tagged.error,
                CONTROLLER => &mut tagged.controller,
                OBJECT_GROUP => &mut tagged.object[GROUP],
                OBJECT_KIND => &mut tagged.object[KIND],
                OBJECT_RESOURCE => &mut tagged.object[RESOURCE],
                OBJECT_NAMESPACE => &mut tagged.object[NAMESPACE],
                OBJECT_NAME => &mut tagged.object[NAME],
                API_GROUP => &mut tagged.api[GROUP],
                API_KIND => &mut tagged.api[KIND],
                API_RESOURCE => &mut tagged.api[RESOURCE],
                API_NAMESPACE => &mut tagged.api[NAMESPACE],
                API_NAME => &mut tagged.api[NAME],
                API_VERB => &mut tagged.verb,
                API_SUBRESOURCE => &mut tagged.subresource,
                API_ACTOR => &mut tagged.actor,
                HTTP_RESPONSE_STATUS_CODE => &mut tagged.code,
                HTTP_STATUS_CODE_OLD => &mut tagged.code_old,
                OBJECT_GENERATION => &mut tagged.generation,
                OBJECT_OBSERVED_GENERATION => &mut tagged.observed_generation,
                OBJECT_RESOURCE_VERSION => &mut tagged.resource_version,
                OBJECT_DELETION_TIMESTAMP => &mut tagged.deletion_timestamp,
                OBJECT_STATUS_DIGEST => &mut tagged.status_digest,
                OBJECT_GONE => &mut tagged.gone,
                LOG_SOURCE => &mut tagged.log_source,
                OBJECT_FINALIZERS => {
                    tagged.finalizers.get_or_insert(value);
                    continue;
                }
                _ => continue,
            };
            // The first of repeated keys counts, as a lookup by key finds it.
            if slot.is_none() {
                *slot = value;
            }
        }
        tagged
    }

    /// The record's `opscope.record`.
    pub(crate) fn record(&self) -> Option<&'a str> {
        as_str(self.record)
    }

    /// The record shows the object's state: an audit body, or an instrumented
    /// operator's own deletion timestamp, finalizers or observed generation.
    pub(crate) fn shows_state(&self) -> bool {
        self.record() == Some(RECORD_OBJECT_STATE)
            || self.deletion_timestamp.is_some()
            || self.finalizers.is_some()
            || self.observed_generation.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::attributes::{get_str, set_str, string_value};

    #[test]
    fn finds_what_a_lookup_by_key_finds() {
        let mut attributes = Vec::new();
        set_str(&mut attributes, OBJECT_NAME, "train");
        set_str(&mut attributes, API_VERB, "patch");
        set_str(&mut attributes, "unrelated", "x");
        // A repeated key: the first one counts.
        attributes.push(KeyValue {
            key: OBJECT_NAME.into(),
            value: Some(opscope_proto::otlp::common::v1::AnyValue {
                value: Some(string_value("other")),
            }),
            ..Default::default()
        });
        let tagged = Tagged::read(&attributes);
        assert_eq!(
            as_str(tagged.object[NAME]),
            get_str(&attributes, OBJECT_NAME)
        );
        assert_eq!(as_str(tagged.verb), Some("patch"));
        assert!(tagged.object[KIND].is_none() && !tagged.shows_state());
    }

    #[test]
    fn an_empty_finalizer_list_still_shows_state() {
        let mut attributes = Vec::new();
        opscope_model::attributes::set(
            &mut attributes,
            OBJECT_FINALIZERS,
            opscope_model::attributes::array_value(Vec::new()),
        );
        let tagged = Tagged::read(&attributes);
        assert!(tagged.shows_state());
        assert!(opscope_model::attributes::as_strings(tagged.finalizers.flatten()).is_empty());
    }
}
