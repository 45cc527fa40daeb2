//! What the exporter remembers between sends: the alerts firing now, to re-send them,
//! and when recent signals resolved, so that a late or retried firing update cannot revive them.

use std::collections::HashMap;

use opscope_model::timestamp::Nanos;

use opscope_model::signal::{Signal, SignalState};

use super::alert::Alert;

/// Ended alerts kept per firing signal for the label sets it had earlier.
const MAX_SUPERSEDED: usize = 4;

/// One firing signal as Alertmanager sees it.
struct FiringSignal {
    alert: Alert,
    last_seen: Nanos,
    /// The signal's alerts under label sets it left during this episode (another
    /// cause or severity), ended when it left them. They go out with the signal
    /// until it resolves, so that a lost post does not leave them active.
    superseded: Vec<Alert>,
}

impl FiringSignal {
    fn alerts(&self) -> impl Iterator<Item = &Alert> {
        std::iter::once(&self.alert).chain(&self.superseded)
    }

    /// Takes a newer firing update: when its labels differ, the alert under the
    /// old labels ends now.
    fn update(&mut self, alert: Alert, last_seen: Nanos) {
        if alert.labels != self.alert.labels {
            let left = std::mem::replace(&mut self.alert, alert).ended_at(last_seen);
            let current = &self.alert.labels;
            self.superseded
                .retain(|old| old.labels != *current && old.labels != left.labels);
            self.superseded.push(left);
            if self.superseded.len() > MAX_SUPERSEDED {
                self.superseded.remove(0);
            }
        } else {
            self.alert = alert;
        }
        self.last_seen = last_seen;
    }

    /// The alerts to end along with `resolved`: those under other label sets.
    fn end_besides(self, resolved: &Alert, at: Nanos) -> Vec<Alert> {
        std::iter::once(self.alert.ended_at(at))
            .chain(self.superseded)
            .filter(|alert| alert.labels != resolved.labels)
            .collect()
    }
}

/// Firing alerts by signal id, and when recently resolved signals ended; both
/// bounded by `capacity`, the oldest forgotten first.
pub struct FiringAlerts {
    exporter: String,
    capacity: usize,
    firing: HashMap<String, FiringSignal>,
    resolved: HashMap<String, Nanos>,
    evicted: u64,
}

impl FiringAlerts {
    pub fn new(exporter: &str, capacity: usize) -> Self {
        Self {
            exporter: exporter.to_string(),
            capacity: capacity.max(1),
            firing: HashMap::new(),
            resolved: HashMap::new(),
            evicted: 0,
        }
    }

    /// Takes one signal change and its alert; returns the alerts to post for it:
    /// none when the change is older than what is known of the signal (a retry or
    /// a batch overtaken by a later one).
    pub fn apply(&mut self, signal: &Signal, alert: Alert) -> Vec<Alert> {
        match signal.state {
            SignalState::Firing => self.fire(&signal.id, signal.last_seen, alert),
            SignalState::Resolved => self.resolve(&signal.id, signal.last_seen, alert),
            SignalState::HandedOver => {
                // Not ended: Alertmanager keeps the alert while its new owner sends
                // it, and ends it after its `resolve_timeout` if none does.
                self.firing.remove(&signal.id);
                Vec::new()
            }
        }
    }

    /// Every alert to send again: the firing ones and the ended alerts of their
    /// earlier label sets.
    pub fn to_resend(&self) -> Vec<Alert> {
        self.firing
            .values()
            .flat_map(FiringSignal::alerts)
            .cloned()
            .collect()
    }

    fn fire(&mut self, id: &str, last_seen: Nanos, alert: Alert) -> Vec<Alert> {
        if self
            .resolved
            .get(id)
            .is_some_and(|&ended| ended >= last_seen)
        {
            return Vec::new();
        }
        if let Some(firing) = self.firing.get_mut(id) {
            if firing.last_seen > last_seen {
                return Vec::new();
            }
            firing.update(alert, last_seen);
            return firing.alerts().cloned().collect();
        }
        self.resolved.remove(id);
        self.make_room_for_firing();
        let sent = vec![alert.clone()];
        let firing = FiringSignal {
            alert,
            last_seen,
            superseded: Vec::new(),
        };
        self.firing.insert(id.to_string(), firing);
        sent
    }

    fn resolve(&mut self, id: &str, last_seen: Nanos, alert: Alert) -> Vec<Alert> {
        if self.firing.get(id).is_some_and(|f| f.last_seen > last_seen) {
            return Vec::new();
        }
        let ended = self
            .firing
            .remove(id)
            .map(|firing| firing.end_besides(&alert, last_seen))
            .unwrap_or_default();
        self.remember_resolved(id, last_seen);
        std::iter::once(alert).chain(ended).collect()
    }

    /// Forgets the firing signal seen longest ago when full. Alertmanager ends its
    /// alert after its `resolve_timeout`, as it is no longer re-sent.
    fn make_room_for_firing(&mut self) {
        if self.firing.len() < self.capacity {
            return;
        }
        let oldest = self
            .firing
            .iter()
            .min_by_key(|(_, firing)| firing.last_seen)
            .map(|(id, _)| id.clone());
        if let Some(id) = oldest {
            self.firing.remove(&id);
            self.evicted += 1;
            tracing::warn!(exporter = %self.exporter, signal = %id, capacity = self.capacity,
                evicted_total = self.evicted,
                "too many firing alerts: the oldest is no longer re-sent");
        }
    }

    fn remember_resolved(&mut self, id: &str, ended: Nanos) {
        if !self.resolved.contains_key(id) && self.resolved.len() >= self.capacity {
            let oldest = self
                .resolved
                .iter()
                .min_by_key(|(_, ended)| **ended)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                self.resolved.remove(&oldest);
            }
        }
        let known = self.resolved.entry(id.to_string()).or_insert(ended);
        *known = (*known).max(ended);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_testkit::signals::{conflict_signal, loop_signal, resolved, with_cause};

    fn apply(alerts: &mut FiringAlerts, signal: &Signal) -> Vec<Alert> {
        alerts.apply(signal, Alert::of(signal, None))
    }

    fn cause(alert: &Alert) -> &str {
        alert.labels.get("cause").map_or("", String::as_str)
    }

    #[test]
    fn firing_alerts_are_resent_until_resolved() {
        let mut alerts = FiringAlerts::new("alertmanager", 10);
        let firing = loop_signal();
        assert_eq!(apply(&mut alerts, &firing).len(), 1);
        assert_eq!(alerts.to_resend(), [Alert::of(&firing, None)]);

        let sent = apply(&mut alerts, &resolved(&firing));
        assert_eq!(sent, [Alert::of(&resolved(&firing), None)]);
        assert!(alerts.to_resend().is_empty());
    }

    /// A signal handed over to another gateway is neither ended nor sent again: its
    /// new owner sends it, and Alertmanager ends it after its `resolve_timeout` if
    /// none does.
    #[test]
    fn a_handed_over_alert_is_not_ended_and_not_sent_again() {
        let mut alerts = FiringAlerts::new("alertmanager", 10);
        let firing = loop_signal();
        apply(&mut alerts, &firing);
        let handed_over = Signal {
            state: SignalState::HandedOver,
            ..firing
        };
        assert!(apply(&mut alerts, &handed_over).is_empty());
        assert!(alerts.to_resend().is_empty());
    }

    #[test]
    fn a_firing_update_older_than_the_resolution_is_not_sent() {
        let mut alerts = FiringAlerts::new("alertmanager", 10);
        let firing = loop_signal();
        apply(&mut alerts, &firing);
        apply(&mut alerts, &resolved(&firing));
        assert!(apply(&mut alerts, &firing).is_empty());
        assert!(alerts.to_resend().is_empty());
        assert_eq!(
            apply(&mut alerts, &resolved(&firing)).len(),
            1,
            "a retry is sent again"
        );
    }

    #[test]
    fn a_new_episode_fires_again_and_an_old_resolution_does_not_end_it() {
        let mut alerts = FiringAlerts::new("alertmanager", 10);
        let first = loop_signal();
        apply(&mut alerts, &resolved(&first));
        let again = with_cause(&first, &first.cause, 120);
        assert_eq!(apply(&mut alerts, &again).len(), 1);
        assert!(apply(&mut alerts, &resolved(&first)).is_empty());
        assert_eq!(alerts.to_resend().len(), 1);
    }

    #[test]
    fn a_changed_cause_ends_the_alert_under_the_old_one() {
        let mut alerts = FiringAlerts::new("alertmanager", 10);
        let first = loop_signal();
        apply(&mut alerts, &first);
        let changed = with_cause(&first, "field_churn:status.lastSyncTime", 30);
        let sent = apply(&mut alerts, &changed);
        assert_eq!(sent.len(), 2);
        assert_eq!(cause(&sent[0]), "field_churn:status.lastSyncTime");
        assert_eq!(sent[0].ends_at, None);
        assert_eq!(cause(&sent[1]), first.cause);
        assert_eq!(sent[1].ends_at, Some(changed.last_seen));
        assert_eq!(
            alerts.to_resend(),
            sent,
            "the ended alert goes out with each re-send"
        );

        let back = with_cause(&changed, &first.cause, 30);
        let sent = apply(&mut alerts, &back);
        let causes: Vec<&str> = sent.iter().map(cause).collect();
        assert_eq!(
            causes,
            [first.cause.as_str(), "field_churn:status.lastSyncTime"]
        );
        assert_eq!(sent[0].ends_at, None, "the first cause fires again");

        let sent = apply(&mut alerts, &resolved(&back));
        assert_eq!(sent.len(), 2);
        assert!(sent.iter().all(|alert| alert.ends_at.is_some()));
    }

    #[test]
    fn the_oldest_firing_signal_is_forgotten_when_full() {
        let mut alerts = FiringAlerts::new("alertmanager", 1);
        apply(&mut alerts, &loop_signal());
        apply(&mut alerts, &conflict_signal());
        let resent = alerts.to_resend();
        assert_eq!(resent.len(), 1);
        assert_eq!(
            resent[0].labels.get("alertname").map(String::as_str),
            Some("OperatorWriteConflict")
        );
    }
}
