//! What the correlator keeps about one object: who it is, its recent reconciles, the
//! state of each object detector and their signals. Events go in, signals come out.

use super::evidence::LazyReference;
use super::overlap::Run;
use super::recent_reconciles::{RecentReconciles, ReconcileNote};
use super::writers::Writer;
use crate::correlator::compact::{bound_operator, bounded, hash_text};
use crate::correlator::config::CorrelatorConfig;
use crate::correlator::detectors::finalizer_leak::{self, FinalizerState};
use crate::correlator::detectors::reconcile_loop::{self, LoopState};
use crate::correlator::detectors::write_conflict::{self, ConflictState};
use crate::correlator::intake::events::{
    ObjectEvent, ObjectEventKind, ObjectState, Outcome, Reconcile, RecordPlace, Write,
};
use crate::correlator::lifecycle::signal::{SignalTrack, Subject, step};
use crate::correlator::window::nanos;
use opscope_model::kubernetes::{Name, ObjectKey, ObjectRef, OperatorRef};
use opscope_model::signal::{Signal, SignalType};
use opscope_model::timestamp::Nanos;

/// Verbs whose success changes an object in place.
const CHANGING_VERBS: &[&str] = &["update", "patch", "apply"];
/// Verbs whose success, by the operator, stands for a reconcile when no reconcile
/// records are seen.
const RECONCILING_VERBS: &[&str] = &["create", "update", "patch", "apply"];

/// What an evaluation concluded about keeping the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settlement {
    /// When to look again whatever happens.
    pub(crate) due: Option<Nanos>,
    /// Keep it even when idle: something fires, or a deadline runs.
    pub(crate) retained: bool,
}

/// The signals of one object, one per detector at most.
#[derive(Debug, Clone, Default)]
struct ObjectSignals {
    reconcile_loop: Option<SignalTrack>,
    write_conflict: Option<SignalTrack>,
    finalizer_leak: Option<SignalTrack>,
}

impl ObjectSignals {
    fn iter(&self) -> impl Iterator<Item = &SignalTrack> {
        [
            &self.reconcile_loop,
            &self.write_conflict,
            &self.finalizer_leak,
        ]
        .into_iter()
        .flatten()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct TrackedObject {
    object: ObjectRef,
    operator: OperatorRef,
    controller: Name,
    reconciles: RecentReconciles,
    /// Reconcile records were seen; writes no longer stand for reconciles.
    reconciles_reported: bool,
    reconcile_loop: LoopState,
    conflict: ConflictState,
    finalizer: FinalizerState,
    signals: ObjectSignals,
}

impl TrackedObject {
    pub(crate) fn new(config: &CorrelatorConfig, object: &ObjectRef) -> Self {
        Self {
            object: object.clone(),
            operator: OperatorRef::default(),
            controller: Name::default(),
            reconciles: RecentReconciles::default(),
            reconciles_reported: false,
            reconcile_loop: LoopState::new(&config.reconcile_loop),
            conflict: ConflictState::new(&config.write_conflict),
            finalizer: FinalizerState::default(),
            signals: ObjectSignals::default(),
        }
    }

    /// Takes one event about the object (its names already bounded).
    pub(crate) fn apply(&mut self, event: &mut ObjectEvent, config: &CorrelatorConfig) {
        self.object.merge(&event.object);
        bound_operator(&mut event.operator);
        let operator = &event.operator;
        let time = event.time;
        let place = &event.place;
        match &event.kind {
            ObjectEventKind::Reconcile(reconcile) => {
                self.apply_reconcile(time, reconcile, operator, place, config)
            }
            ObjectEventKind::Write(write) => self.apply_write(time, write, operator, place, config),
            ObjectEventKind::State(state) => self.apply_state(time, state),
            ObjectEventKind::Gone => self.finalizer.record_gone(time),
        }
        let reconciled = matches!(event.kind, ObjectEventKind::Reconcile(_));
        if self.owned_by(operator, reconciled) {
            self.operator.clone_from(operator);
        }
    }

    /// Whether `operator` becomes the object's operator: the one that reconciles it,
    /// or, until one is seen reconciling, the latest that wrote it.
    fn owned_by(&self, operator: &OperatorRef, reconciled: bool) -> bool {
        let candidate = reconciled || !self.reconciles_reported || self.operator.name.is_empty();
        candidate && !operator.name.is_empty() && *operator != self.operator
    }

    fn apply_reconcile(
        &mut self,
        time: Nanos,
        reconcile: &Reconcile,
        operator: &OperatorRef,
        place: &RecordPlace,
        config: &CorrelatorConfig,
    ) {
        self.reconciles_reported = true;
        if !reconcile.controller.is_empty() && self.controller != reconcile.controller {
            self.controller = bounded(&reconcile.controller);
        }
        self.reconcile_loop
            .record_generation(time, reconcile.generation);
        let outcome_known = reconcile.outcome != Outcome::Unknown;
        let note = self
            .reconciles
            .note(&reconcile.reconcile_id, time, outcome_known);
        let reference = LazyReference::new(place, &reconcile.trace_id, &reconcile.reconcile_id);
        let firing = self.signals.reconcile_loop.is_some();
        self.reconcile_loop.record_reconcile(
            note,
            &reconcile.outcome,
            &config.reconcile_loop,
            &reference,
            firing,
        );
        self.finalizer
            .record_reconcile(note, &reconcile.outcome, &reference);
        if let Some(run) = run_of(time, reconcile, operator) {
            self.conflict.record_run(run, &reference);
        }
    }

    fn apply_write(
        &mut self,
        time: Nanos,
        write: &Write,
        operator: &OperatorRef,
        place: &RecordPlace,
        config: &CorrelatorConfig,
    ) {
        let succeeded = (200..300).contains(&write.code);
        let reference = LazyReference::new(place, "", &write.reconcile_id);
        self.reconcile_loop
            .record_generation(time, write.generation);
        if let Some((note, outcome)) = self.reconcile_of_write(time, write, succeeded, operator) {
            let loop_config = &config.reconcile_loop;
            let firing = self.signals.reconcile_loop.is_some();
            self.reconcile_loop
                .record_reconcile(note, &outcome, loop_config, &reference, firing);
            self.finalizer.record_reconcile(note, &outcome, &reference);
        }
        let writer = writer_of(write, operator);
        if succeeded {
            self.record_change(time, write, writer.actor, &reference, config);
        }
        self.conflict
            .record_write(time, write.code, &write.reconcile_id, writer, &reference);
    }

    /// The reconcile a write shows: the one named by its reconcile id, or, from sources
    /// without reconcile records, the successful write of the operator itself.
    fn reconcile_of_write(
        &mut self,
        time: Nanos,
        write: &Write,
        succeeded: bool,
        operator: &OperatorRef,
    ) -> Option<(ReconcileNote, Outcome)> {
        if !write.reconcile_id.is_empty() {
            let note = self.reconciles.note(&write.reconcile_id, time, false);
            return Some((note, Outcome::Unknown));
        }
        let stands_for_reconcile = succeeded
            && !operator.name.is_empty()
            && !self.reconciles_reported
            && RECONCILING_VERBS.contains(&write.verb.as_str());
        stands_for_reconcile.then(|| (ReconcileNote::single(time, true), Outcome::Ok))
    }

    /// A successful write: of the status, or of the spec.
    fn record_change(
        &mut self,
        time: Nanos,
        write: &Write,
        actor: u64,
        reference: &LazyReference,
        config: &CorrelatorConfig,
    ) {
        if !write.status_digest.is_empty() {
            let firing = self.signals.reconcile_loop.is_some();
            self.reconcile_loop.record_status_digest(
                time,
                &write.status_digest,
                &config.reconcile_loop,
                reference,
                firing,
            );
        }
        if write.subresource == "status" {
            self.reconcile_loop.record_status_write(time);
        } else if write.subresource.is_empty() && CHANGING_VERBS.contains(&write.verb.as_str()) {
            self.reconcile_loop.record_spec_write(time, actor);
        }
    }

    fn apply_state(&mut self, time: Nanos, state: &ObjectState) {
        self.reconcile_loop
            .record_generation(time, state.generation);
        self.finalizer.record_state(time, state);
    }

    /// Runs the detectors at `now`, adds the signals to send to `out`, and says when
    /// to look again.
    pub(crate) fn evaluate(
        &mut self,
        key: &ObjectKey,
        config: &CorrelatorConfig,
        now: Nanos,
        out: &mut Vec<Signal>,
    ) -> Settlement {
        let signals = &mut self.signals;
        let found_loop = reconcile_loop::evaluate(
            &self.reconcile_loop,
            &config.reconcile_loop,
            now,
            signals.reconcile_loop.is_some(),
        );
        let found_conflict = write_conflict::evaluate(
            &self.conflict,
            &config.write_conflict,
            now,
            signals.write_conflict.is_some(),
        );
        let found_leak = finalizer_leak::evaluate(&self.finalizer, &config.finalizer_leak, now);
        let interval = nanos(config.update_interval);
        let subject = |signal| Subject {
            signal,
            key,
            object: &self.object,
            operator: &self.operator,
            controller: &self.controller,
        };
        let steps = [
            (
                &mut signals.reconcile_loop,
                found_loop,
                SignalType::ReconcileLoop,
            ),
            (
                &mut signals.write_conflict,
                found_conflict,
                SignalType::WriteConflict,
            ),
            (
                &mut signals.finalizer_leak,
                found_leak,
                SignalType::FinalizerLeak,
            ),
        ];
        for (track, finding, signal) in steps {
            out.extend(step(track, finding, &subject(signal), now, interval));
        }
        self.settlement(config, now)
    }

    fn settlement(&self, config: &CorrelatorConfig, now: Nanos) -> Settlement {
        let signals = &self.signals;
        let recheck = [
            signals
                .reconcile_loop
                .is_some()
                .then(|| self.reconcile_loop.recheck_interval()),
            signals
                .write_conflict
                .is_some()
                .then(|| self.conflict.recheck_interval()),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|interval| now.saturating_add(interval));
        let deadline = self.finalizer.next_check(
            &config.finalizer_leak,
            signals.finalizer_leak.as_ref(),
            now,
            nanos(config.update_interval),
        );
        Settlement {
            due: [recheck, deadline].into_iter().flatten().min(),
            retained: signals.iter().next().is_some() || self.finalizer.pending(),
        }
    }

    /// The signals firing now.
    pub(crate) fn active(&self) -> impl Iterator<Item = &Signal> {
        self.signals.iter().map(SignalTrack::signal)
    }

    /// Resolves every firing signal at `now`: the object is no longer tracked.
    pub(crate) fn resolve_all(self, now: Nanos) -> impl Iterator<Item = Signal> {
        let signals = self.signals;
        [
            signals.reconcile_loop,
            signals.write_conflict,
            signals.finalizer_leak,
        ]
        .into_iter()
        .flatten()
        .map(move |track| track.resolve(now))
    }

    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        let names = [
            &self.object.group,
            &self.object.kind,
            &self.object.resource,
            &self.object.namespace,
            &self.object.name,
            &self.operator.name,
            &self.operator.namespace,
            &self.controller,
        ];
        // A name of up to 24 bytes is held inline, in the struct's own size.
        let heap = |name: &&Name| {
            if name.is_heap_allocated() {
                name.capacity()
            } else {
                0
            }
        };
        std::mem::size_of::<Self>()
            + names.iter().map(heap).sum::<usize>()
            + self.reconciles.footprint()
            + self.reconcile_loop.footprint()
            + self.conflict.footprint()
            + self.finalizer.footprint()
    }
}

/// Where to look for a record: its own reference, else its trace or reconcile.
/// Who wrote: the actor, else the operator, else the instance.
fn writer_of(write: &Write, operator: &OperatorRef) -> Writer {
    let actor = [
        write.actor.as_str(),
        operator.name.as_str(),
        write.instance.as_str(),
    ]
    .into_iter()
    .find(|name| !name.is_empty())
    .unwrap_or_default();
    Writer {
        actor: hash_text(actor),
        instance: (!write.instance.is_empty()).then(|| hash_text(&write.instance)),
    }
}

/// The span of a reconcile on its instance, when the record shows its duration.
fn run_of(time: Nanos, reconcile: &Reconcile, operator: &OperatorRef) -> Option<Run> {
    let duration = nanos(reconcile.duration?);
    if reconcile.instance.is_empty() {
        return None;
    }
    let start = reconcile.start.unwrap_or(time.saturating_sub(duration));
    Some(Run {
        operator: hash_text(&operator.name),
        instance: hash_text(&reconcile.instance),
        start,
        end: start.saturating_add(duration),
    })
}
