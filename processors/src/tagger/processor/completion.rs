//! What a record leaves out of its object, taken from the records before it (and
//! the batch after it): the Kind, the namespace, a 409's namespace, a log-told deletion.

use opscope_model::attributes::{get_str, set_str};
use opscope_model::kubernetes::kinds::{is_short_for, plural_of_kind, singular_of_resource};
use opscope_model::semconv::API_NAMESPACE;
use opscope_proto::otlp::common::v1::KeyValue;

use super::{OperatorTagger, write_conflict};
use crate::tagger::conflict::{Conflict, namespace_in};
use crate::tagger::controller_memory::guess_from_controller;
use crate::tagger::formats::{DeletionNote, LogFacts, namespace_phrase};

/// The parts of a record's object, borrowed from its facts for completion.
pub(super) struct PartialObject<'a> {
    kind: &'a mut Option<String>,
    namespace: &'a mut Option<String>,
    name: &'a str,
    message: &'a str,
}

impl OperatorTagger {
    /// Fills in what a record leaves out from the other records of its controller:
    /// the Kind of an object named without one (from a 409 about the same name, the
    /// records that named the same object whole, what the controller's other records
    /// name, or the controller's own name), the namespace of an object named without
    /// one, and the id that ties a start line to its end line.
    pub(super) fn complete_from_controller(
        &self,
        facts: &mut LogFacts,
        conflict: Option<&Conflict>,
        time: u64,
    ) {
        let says_something = facts.kind.is_some()
            || facts.name.is_some()
            || facts.outcome.is_some()
            || facts.starts_reconcile;
        if !says_something {
            self.take_loggers_object(facts, time);
            return;
        }
        // Borrowed field by field, so that the Kind can be set while the names are read.
        let controller = facts
            .controller
            .as_deref()
            .or(facts.logger.as_deref())
            .unwrap_or_default();
        let mut memory = self.controllers();
        // The Kind a controller reconciles is the one its reconcile lines name; its
        // other lines also name the children it writes.
        if let Some(kind) = &facts.kind
            && !controller.is_empty()
            && (facts.outcome.is_some() || facts.starts_reconcile || facts.reconcile_id.is_some())
        {
            memory.remember_kind(controller, kind);
        }
        // A Kind that only begins with the resource a 409 about the same object names
        // is a controller's name (cert-manager's `CertificateReadiness`).
        if let (Some(kind), Some(conflict)) = (
            &facts.kind,
            conflict.filter(|conflict| facts.name.as_ref() == Some(&conflict.name)),
        ) {
            let singular = singular_of_resource(&conflict.resource);
            if kind.len() > singular.len() && kind.to_ascii_lowercase().starts_with(&singular) {
                facts.kind = Some(singular);
            }
        }
        if facts.name.is_some() {
            let guessed = guess_from_controller(controller);
            // A short Kind (`cluster` of `clusterName`) the controller's CamelCase Kind
            // ends with (`controllers.NifiCluster`).
            if let Some(short) = facts.kind.as_deref().filter(|kind| is_abbreviation(kind))
                && let Some((Some(full), _)) = guessed
                && is_short_for(full, short)
            {
                facts.kind = Some(full.to_string());
            }
            // What the controller says, for an object named without a Kind.
            let controller_kind = facts.kind.is_none().then(|| {
                memory
                    .kind_of(controller)
                    .map(str::to_string)
                    .or_else(|| match guessed? {
                        // A logger's lowercase word is a package (`manifestival`,
                        // `kopf.objects`), where a controller's is its Kind.
                        (Some(kind), _)
                            if facts.controller.is_some()
                                || kind.starts_with(|c: char| c.is_ascii_uppercase())
                                || names_a_controller(controller) =>
                        {
                            Some(kind.to_string())
                        }
                        (Some(_), _) => None,
                        (None, resource) => resource.map(singular_of_resource),
                    })
            });
            if let Some(name) = &facts.name {
                let object = PartialObject {
                    kind: &mut facts.kind,
                    namespace: &mut facts.namespace,
                    name,
                    message: &facts.message,
                };
                self.complete_object(object, conflict, controller_kind.flatten());
            }
        }
        drop(memory);
        self.pair_start_and_end(facts, time);
    }

    /// A line that names no object (`CR status updated`), of a logger whose start or
    /// end line named one a moment before: about that object.
    fn take_loggers_object(&self, facts: &mut LogFacts, time: u64) {
        let Some(logger) = facts.controller.as_deref().or(facts.logger.as_deref()) else {
            return;
        };
        if let Some([kind, namespace, name]) = self.reconciles().logger_object(logger, time) {
            facts.kind = Some(kind.to_string());
            facts.namespace = (!namespace.is_empty()).then(|| namespace.to_string());
            facts.name = Some(name.to_string());
        }
    }

    /// A reconcile read from lines without an id: a start line and the end line that
    /// follows it for the same object get one id (see `ReconcilePairing`).
    fn pair_start_and_end(&self, facts: &mut LogFacts, time: u64) {
        if !(facts.starts_reconcile || facts.outcome.is_some()) {
            return;
        }
        let (Some(kind), Some(name)) = (&facts.kind, &facts.name) else {
            return;
        };
        if time == 0 {
            return;
        }
        let namespace = facts.namespace.as_deref().unwrap_or_default();
        let mut pairing = self.reconciles();
        if let Some(logger) = facts.controller.as_deref().or(facts.logger.as_deref()) {
            pairing.note_logger_object(logger, [kind, namespace, name], time);
        }
        if facts.reconcile_id.is_some() {
            return;
        }
        let object = format!("{}/{namespace}/{name}", plural_of_kind(kind));
        facts.reconcile_id = if facts.starts_reconcile {
            Some(pairing.start(&object, time))
        } else {
            pairing.end(&object, time)
        };
    }

    /// Writes the 409 a log record reports, with the namespace of the object it names
    /// when the call did not give it: from the record's text (`ns/name`, `in namespace
    /// ns`) or from earlier records about the same object, which are told of it in turn.
    pub(super) fn write_record_conflict(
        &self,
        attributes: &mut Vec<KeyValue>,
        conflict: &Conflict,
        body: Option<&str>,
        message: &str,
    ) {
        let kind = singular_of_resource(&conflict.resource);
        let mut objects = self.objects();
        let namespace = get_str(attributes, API_NAMESPACE)
            .or_else(|| body.and_then(|text| namespace_in(text, &conflict.name)))
            .or_else(|| namespace_in(message, &conflict.name))
            .or_else(|| namespace_phrase(message))
            .or_else(|| objects.namespace_of(&kind, &conflict.name))
            .map(str::to_string);
        objects.remember(Some(&kind), namespace.as_deref(), &conflict.name);
        drop(objects);
        if let Some(namespace) = namespace {
            set_str(attributes, API_NAMESPACE, &namespace);
        }
        write_conflict(attributes, conflict);
    }

    /// Completes the object a record names in part from what earlier records said of
    /// it: a Kind written as its initials, the Kind (from a 409 about the same name,
    /// the records that named it whole, else what its controller says), the namespace.
    /// What the record states, and what it learned from 409s and other records, is
    /// remembered for the records after it.
    pub(super) fn complete_object(
        &self,
        object: PartialObject<'_>,
        conflict: Option<&Conflict>,
        controller_kind: Option<String>,
    ) {
        let PartialObject {
            kind,
            namespace,
            name,
            message,
        } = object;
        let mut objects = self.objects();
        if let Some(short) = kind.as_deref().filter(|kind| is_abbreviation(kind))
            && let Some(full) = kind_with_initials(message, short)
                .or_else(|| objects.kind_abbreviated(namespace.as_deref(), name, short))
        {
            *kind = Some(full.to_string());
        }
        objects.remember(kind.as_deref(), namespace.as_deref(), name);
        let mut learned = false;
        if kind.is_none() {
            let from_others = conflict
                .filter(|conflict| conflict.name == name)
                .map(|conflict| singular_of_resource(&conflict.resource))
                .or_else(|| {
                    objects
                        .kind_of(namespace.as_deref(), name, message)
                        .map(str::to_string)
                });
            learned = from_others.is_some();
            *kind = from_others.or(controller_kind);
        }
        if namespace.is_none()
            && let Some(kind) = kind.as_deref()
            && let Some(known) = objects.namespace_of(kind, name)
        {
            *namespace = Some(known.to_string());
            learned = true;
        }
        if learned {
            objects.remember(kind.as_deref(), namespace.as_deref(), name);
        }
    }

    /// The deletion a record's words tell of: a deletion timestamp (the first time
    /// the logs said so) with a finalizer holding the object, or no finalizer left.
    /// Logs do not name the finalizer: it is written as `unknown`.
    pub(super) fn deletion_state(
        &self,
        facts: &LogFacts,
        time: u64,
    ) -> Option<(Option<u64>, Vec<String>)> {
        let note = facts.deletion?;
        let (kind, name) = (facts.kind.as_deref()?, facts.name.as_deref()?);
        if time == 0 {
            return None;
        }
        let object = format!(
            "{}/{}/{name}",
            plural_of_kind(kind),
            facts.namespace.as_deref().unwrap_or_default()
        );
        let mut memory = self.controllers();
        match note {
            DeletionNote::InProgress => {
                let first = memory.deletion_seen(&object, time)?;
                Some((Some(first), vec!["unknown".to_string()]))
            }
            DeletionNote::FinalizerRemoved => {
                memory.deletion_done(&object);
                Some((None, Vec::new()))
            }
        }
    }
}

/// A Kind written short: in lowercase letters, as its initials (`dspa_name`) or its
/// last word (Strimzi's `topic` for `KafkaTopic`).
pub(super) fn is_abbreviation(kind: &str) -> bool {
    kind.len() >= 2 && kind.bytes().all(|b| b.is_ascii_lowercase())
}

/// The CamelCase word of a message that `short` stands for
/// (`DataSciencePipelinesApplication` for `dspa`).
pub(super) fn kind_with_initials<'a>(message: &'a str, short: &str) -> Option<&'a str> {
    message
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|word| is_short_for(word, short))
}

/// Whether a logger's name says it is a controller's (`subscription-controller`).
pub(super) fn names_a_controller(logger: &str) -> bool {
    let lower = logger.to_ascii_lowercase();
    lower.contains("controller") || lower.contains("reconciler")
}
