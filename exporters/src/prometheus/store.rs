//! The series store: every family and series an exporter currently exposes, bounded
//! in count, expired when idle, and updated in two steps (resolve a batch's changes
//! into new values, then commit them) so that a push can send first and keep after.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::model::{Change, FamilyDesc, Kind, Labels, Value};

/// How much the store holds and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesLimits {
    /// Series beyond this are refused (and counted).
    pub max_series: usize,
    /// Series of expiring families not updated for this long are dropped.
    pub expiration: Duration,
}

/// Changes the store did not take, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    /// New series beyond `max_series`.
    pub series_limit: u64,
    /// A family whose names clash with another family's (same name, other type).
    pub name_conflict: u64,
    /// Data that has no Prometheus form (exponential histograms, unknown temporality,
    /// malformed points) or signals beyond the tracked limit.
    pub unsupported: u64,
}

impl Refusals {
    pub fn total(&self) -> u64 {
        self.series_limit + self.name_conflict + self.unsupported
    }

    pub fn add(&mut self, other: &Refusals) {
        self.series_limit += other.series_limit;
        self.name_conflict += other.name_conflict;
        self.unsupported += other.unsupported;
    }
}

/// What one series looks like after a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Set(Value),
    /// Removed; its last value, so a push can mark each of its samples stale.
    Removed(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub family: Arc<FamilyDesc>,
    pub labels: Labels,
    pub outcome: Outcome,
}

/// A batch's changes resolved against the store, not yet committed.
#[derive(Debug, Default)]
pub struct Resolution {
    /// Series the batch touched, in first-touch order.
    pub updates: Vec<Update>,
    pub refused: Refusals,
}

struct Series {
    value: Value,
    updated: Instant,
}

struct Family {
    desc: Arc<FamilyDesc>,
    series: BTreeMap<Labels, Series>,
}

pub struct SeriesStore {
    families: BTreeMap<String, Family>,
    /// Every name an exposed family uses, with the family using it.
    claims: HashMap<String, String>,
    series: usize,
    limits: SeriesLimits,
    refused: Refusals,
}

/// Families a batch brings that the store does not hold yet.
#[derive(Default)]
struct NewFamilies {
    kinds: HashMap<String, Kind>,
    claims: HashSet<String>,
}

/// A series touched while resolving: its value before the batch and after.
struct Pending {
    family: Arc<FamilyDesc>,
    labels: Labels,
    before: Option<Value>,
    after: Option<Value>,
}

impl SeriesStore {
    pub fn new(limits: SeriesLimits) -> Self {
        Self {
            families: BTreeMap::new(),
            claims: HashMap::new(),
            series: 0,
            limits,
            refused: Refusals::default(),
        }
    }

    /// Series held now.
    pub fn len(&self) -> usize {
        self.series
    }

    /// Everything refused since the store was made.
    pub fn refused(&self) -> Refusals {
        self.refused
    }

    /// Families in name order, each with its series in label order.
    pub fn families(
        &self,
    ) -> impl Iterator<Item = (&FamilyDesc, impl Iterator<Item = (&Labels, &Value)>)> {
        self.families.values().map(|family| {
            let series = family.series.iter().map(|(l, s)| (l, &s.value));
            (family.desc.as_ref(), series)
        })
    }

    /// The values the changes lead to, without changing the store.
    pub fn resolve(&self, changes: &[Change]) -> Resolution {
        let mut pending: Vec<Pending> = Vec::new();
        let mut index: HashMap<(&str, &Labels), usize> = HashMap::new();
        let mut new_families = NewFamilies::default();
        let mut new_series = 0usize;
        let mut refused = Refusals::default();
        for change in changes {
            if !self.accepts(&change.family, &mut new_families) {
                refused.name_conflict += 1;
                continue;
            }
            let key = (change.family.name.as_str(), &change.labels);
            let slot = index.get(&key).and_then(|i| pending.get_mut(*i));
            if let Some(slot) = slot {
                slot.after = change.op.apply(slot.after.as_ref());
                continue;
            }
            let before = self.value(&change.family.name, &change.labels).cloned();
            let after = change.op.apply(before.as_ref());
            if before.is_none() && after.is_some() {
                if self.series + new_series >= self.limits.max_series {
                    refused.series_limit += 1;
                    continue;
                }
                new_series += 1;
            }
            index.insert(key, pending.len());
            pending.push(Pending {
                family: Arc::clone(&change.family),
                labels: change.labels.clone(),
                before,
                after,
            });
        }
        let updates = pending
            .into_iter()
            .filter_map(Pending::into_update)
            .collect();
        Resolution { updates, refused }
    }

    /// Makes a resolution the store's state.
    pub fn commit(&mut self, resolution: Resolution, now: Instant) {
        for update in resolution.updates {
            match update.outcome {
                Outcome::Set(value) => self.set(update.family, update.labels, value, now),
                Outcome::Removed(_) => self.remove(&update.family.name, &update.labels),
            }
        }
        self.refused.add(&resolution.refused);
    }

    /// Drops the series of expiring families not updated since `now - expiration`;
    /// returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let expiration = self.limits.expiration;
        let mut expired = 0;
        for family in self.families.values_mut().filter(|f| f.desc.expires) {
            let before = family.series.len();
            family
                .series
                .retain(|_, series| now.saturating_duration_since(series.updated) < expiration);
            expired += before - family.series.len();
        }
        self.series -= expired;
        if expired > 0 {
            self.drop_empty_families();
        }
        expired
    }

    fn value(&self, family: &str, labels: &Labels) -> Option<&Value> {
        let series = self.families.get(family)?.series.get(labels)?;
        Some(&series.value)
    }

    /// Whether the store can hold series of this family: it is the family already
    /// there, or its names are free (also of families new in this batch).
    fn accepts(&self, desc: &FamilyDesc, new: &mut NewFamilies) -> bool {
        if let Some(existing) = self.families.get(&desc.name) {
            return existing.desc.kind == desc.kind;
        }
        if let Some(kind) = new.kinds.get(&desc.name) {
            return *kind == desc.kind;
        }
        let names = desc.exposed_names();
        let free = |name: &String| !self.claims.contains_key(name) && !new.claims.contains(name);
        if !names.iter().all(free) {
            return false;
        }
        new.kinds.insert(desc.name.clone(), desc.kind);
        new.claims.extend(names);
        true
    }

    fn set(&mut self, desc: Arc<FamilyDesc>, labels: Labels, value: Value, now: Instant) {
        if !self.families.contains_key(&desc.name) {
            for name in desc.exposed_names() {
                self.claims.insert(name, desc.name.clone());
            }
        }
        let family = self
            .families
            .entry(desc.name.clone())
            .or_insert_with(|| Family {
                desc,
                series: BTreeMap::new(),
            });
        let series = Series {
            value,
            updated: now,
        };
        if family.series.insert(labels, series).is_none() {
            self.series += 1;
        }
    }

    fn remove(&mut self, family: &str, labels: &Labels) {
        let Some(entry) = self.families.get_mut(family) else {
            return;
        };
        if entry.series.remove(labels).is_some() {
            self.series -= 1;
        }
        if entry.series.is_empty() {
            self.drop_empty_families();
        }
    }

    fn drop_empty_families(&mut self) {
        let claims = &mut self.claims;
        self.families.retain(|_, family| {
            if family.series.is_empty() {
                for name in family.desc.exposed_names() {
                    claims.remove(&name);
                }
            }
            !family.series.is_empty()
        });
    }
}

impl Pending {
    /// `None` for a removal of a series that was not there.
    fn into_update(self) -> Option<Update> {
        let outcome = match (self.after, self.before) {
            (Some(value), _) => Outcome::Set(value),
            (None, Some(last)) => Outcome::Removed(last),
            (None, None) => return None,
        };
        Some(Update {
            family: self.family,
            labels: self.labels,
            outcome,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::model::Op;

    fn family(name: &str, kind: Kind, expires: bool) -> Arc<FamilyDesc> {
        Arc::new(FamilyDesc {
            name: name.into(),
            help: String::new(),
            unit: String::new(),
            kind,
            expires,
        })
    }

    fn change(family: &Arc<FamilyDesc>, series: &str, op: Op) -> Change {
        Change {
            family: Arc::clone(family),
            labels: vec![("s".into(), series.into())],
            op,
        }
    }

    fn store(max_series: usize) -> SeriesStore {
        SeriesStore::new(SeriesLimits {
            max_series,
            expiration: Duration::from_secs(60),
        })
    }

    fn apply(store: &mut SeriesStore, changes: &[Change], now: Instant) {
        let resolution = store.resolve(changes);
        store.commit(resolution, now);
    }

    #[test]
    fn resolving_leaves_the_store_as_it_was() {
        let mut store = store(10);
        let counter = family("c", Kind::Counter, true);
        let add = [change(&counter, "a", Op::Add(Value::Number(1.0)))];
        let first = store.resolve(&add);
        assert_eq!(first.updates.len(), 1);
        assert_eq!(store.len(), 0);
        apply(&mut store, &add, Instant::now());
        apply(&mut store, &add, Instant::now());
        let (_, series) = store.families().next().expect("one family");
        let values: Vec<_> = series.map(|(_, v)| v.clone()).collect();
        assert_eq!(values, vec![Value::Number(2.0)]);
    }

    #[test]
    fn series_beyond_the_limit_are_refused_and_counted() {
        let mut store = store(2);
        let gauge = family("g", Kind::Gauge, true);
        let changes: Vec<_> = ["a", "b", "c", "a"]
            .iter()
            .map(|s| change(&gauge, s, Op::Set(Value::Number(1.0))))
            .collect();
        apply(&mut store, &changes, Instant::now());
        assert_eq!(store.len(), 2);
        assert_eq!(store.refused().series_limit, 1);
    }

    #[test]
    fn clashing_families_are_refused() {
        let mut store = store(10);
        let counter = family("requests", Kind::Counter, true);
        let gauge_total = family("requests_total", Kind::Gauge, true);
        let gauge_same = family("requests", Kind::Gauge, true);
        let changes = [
            change(&counter, "a", Op::Add(Value::Number(1.0))),
            change(&gauge_total, "a", Op::Set(Value::Number(1.0))),
            change(&gauge_same, "b", Op::Set(Value::Number(1.0))),
        ];
        apply(&mut store, &changes, Instant::now());
        assert_eq!(store.len(), 1);
        assert_eq!(store.refused().name_conflict, 2);
        let removal = [change(&counter, "a", Op::Remove)];
        apply(&mut store, &removal, Instant::now());
        apply(&mut store, &changes[1..2], Instant::now());
        assert_eq!(store.len(), 1, "the name is free once its family is gone");
    }

    #[test]
    fn removals_carry_the_last_value_and_missing_ones_are_ignored() {
        let mut store = store(10);
        let gauge = family("g", Kind::Gauge, false);
        apply(
            &mut store,
            &[change(&gauge, "a", Op::Set(Value::Number(1.0)))],
            Instant::now(),
        );
        let resolution = store.resolve(&[
            change(&gauge, "a", Op::Remove),
            change(&gauge, "never", Op::Remove),
        ]);
        let outcomes: Vec<_> = resolution.updates.iter().map(|u| &u.outcome).collect();
        assert_eq!(outcomes, vec![&Outcome::Removed(Value::Number(1.0))]);
        store.commit(resolution, Instant::now());
        assert_eq!(store.len(), 0);
        assert_eq!(store.families().count(), 0);
    }

    #[test]
    fn idle_series_of_expiring_families_expire() {
        let mut store = store(10);
        let expiring = family("e", Kind::Gauge, true);
        let lasting = family("l", Kind::Gauge, false);
        let start = Instant::now();
        let set = |f| change(f, "a", Op::Set(Value::Number(1.0)));
        apply(&mut store, &[set(&expiring), set(&lasting)], start);
        assert_eq!(store.expire(start + Duration::from_secs(59)), 0);
        assert_eq!(store.expire(start + Duration::from_secs(61)), 1);
        let names: Vec<_> = store.families().map(|(d, _)| d.name.clone()).collect();
        assert_eq!(names, vec!["l".to_string()]);
    }
}
