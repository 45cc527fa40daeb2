//! Reconciles read from log lines that carry no reconcile id: a start line
//! (`Reconciling …`) and the end line that follows it for the same object (the
//! operator's `Reconciled`, or controller-runtime's own `Reconciler error`) are one
//! reconcile, so both get one id, made here from the start's time. Operators log starts, ends or both, and
//! controller-runtime logs only the failed ends: paired this way, each reconcile
//! counts once whatever the operator logs. It also keeps, per logger, the object its
//! last start or end line named, for the lines in between that name none (`CR status
//! updated`). Bounded: past [`MAX_OPEN`] objects with a start waiting for its end,
//! new starts are not remembered (their ends then count as reconciles of their own),
//! and past as many loggers, new loggers are not.

use foldhash::HashMap;

/// Objects with a start line waiting for its end, at most.
pub const MAX_OPEN: usize = 16_384;
/// An end line this long after the start is a reconcile of its own.
const MAX_RECONCILE_NANOS: u64 = 10 * 60 * 1_000_000_000;
/// A line naming no object is taken for one about the object of its logger's last
/// start or end line within this long.
const LOGGER_OBJECT_NANOS: u64 = 5 * 1_000_000_000;

/// The object a logger's last start or end line named.
#[derive(Debug)]
struct LastObject {
    kind: Box<str>,
    namespace: Box<str>,
    name: Box<str>,
    time: u64,
}

/// The id of the reconcile that started at `time` (Unix nanoseconds): the same for
/// every agent and every replay of the same lines.
fn id(time: u64) -> String {
    format!("log-{time}")
}

#[derive(Debug, Default)]
pub struct ReconcilePairing {
    /// Per object (`resource/namespace/name`): when its open reconcile started.
    open: HashMap<Box<str>, u64>,
    /// Per logger (or controller): the object of its last start or end line.
    last_of_logger: HashMap<Box<str>, LastObject>,
}

impl ReconcilePairing {
    /// A start line of `object` at `time`: the id of the reconcile it opens. A start
    /// while another is open ends that one without an end line.
    pub fn start(&mut self, object: &str, time: u64) -> String {
        if let Some(open) = self.open.get_mut(object) {
            *open = time;
        } else if self.open.len() < MAX_OPEN {
            self.open.insert(object.into(), time);
        }
        id(time)
    }

    /// Notes the object a start or end line of `logger` named.
    pub fn note_logger_object(
        &mut self,
        logger: &str,
        [kind, namespace, name]: [&str; 3],
        time: u64,
    ) {
        if let Some(known) = self.last_of_logger.get_mut(logger)
            && (&*known.kind, &*known.namespace, &*known.name) == (kind, namespace, name)
        {
            // The same object again, as most lines of a logger are: no copies made.
            known.time = time;
            return;
        }
        let last = LastObject {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            time,
        };
        if let Some(known) = self.last_of_logger.get_mut(logger) {
            *known = last;
        } else if self.last_of_logger.len() < MAX_OPEN {
            self.last_of_logger.insert(logger.into(), last);
        }
    }

    /// The object (Kind, namespace, name) of `logger`'s last start or end line, if it
    /// was logged shortly before `time`.
    pub fn logger_object(&self, logger: &str, time: u64) -> Option<[&str; 3]> {
        let last = self.last_of_logger.get(logger)?;
        (time >= last.time && time - last.time <= LOGGER_OBJECT_NANOS).then_some([
            &*last.kind,
            &*last.namespace,
            &*last.name,
        ])
    }

    /// An end line of `object` at `time`: the id of the reconcile its start opened, if
    /// one is open and recent.
    pub fn end(&mut self, object: &str, time: u64) -> Option<String> {
        let started = self.open.remove(object)?;
        (time.saturating_sub(started) <= MAX_RECONCILE_NANOS).then(|| id(started))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_start_and_its_end_are_one_reconcile() {
        let mut pairing = ReconcilePairing::default();
        let id = pairing.start("widgets/ns/a", SECOND);
        assert_eq!(id, "log-1000000000");
        assert_eq!(pairing.end("widgets/ns/a", 2 * SECOND), Some(id.clone()));
        assert_eq!(pairing.end("widgets/ns/a", 3 * SECOND), None);
        let next = pairing.start("widgets/ns/a", 4 * SECOND);
        assert_ne!(next, id);
        assert_eq!(pairing.end("widgets/ns/b", 4 * SECOND), None);
    }

    #[test]
    fn an_end_long_after_its_start_is_a_reconcile_of_its_own() {
        let mut pairing = ReconcilePairing::default();
        pairing.start("widgets/ns/a", 0);
        assert_eq!(pairing.end("widgets/ns/a", MAX_RECONCILE_NANOS + 1), None);
    }

    #[test]
    fn a_line_naming_nothing_is_about_its_loggers_last_object_for_a_while() {
        let mut pairing = ReconcilePairing::default();
        pairing.note_logger_object(
            "controllers.NifiCluster",
            ["NifiCluster", "default", "a"],
            SECOND,
        );
        assert_eq!(
            pairing.logger_object("controllers.NifiCluster", 2 * SECOND),
            Some(["NifiCluster", "default", "a"])
        );
        assert_eq!(
            pairing.logger_object("controllers.NifiCluster", 10 * SECOND),
            None
        );
        assert_eq!(pairing.logger_object("controllers.NifiCluster", 0), None);
        assert_eq!(pairing.logger_object("other", 2 * SECOND), None);
    }

    #[test]
    fn the_open_starts_are_bounded() {
        let mut pairing = ReconcilePairing::default();
        for index in 0..MAX_OPEN + 10 {
            pairing.start(&format!("widgets/ns/{index}"), 0);
        }
        assert_eq!(pairing.open.len(), MAX_OPEN);
        assert_eq!(
            pairing.end(&format!("widgets/ns/{}", MAX_OPEN + 5), 1),
            None
        );
    }
}
