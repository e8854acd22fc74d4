//! Counters that several processes share through the store: the operator's quotas (per
//! tenant, per plan, the planners') must hold across every weft process of a deployment and
//! across restarts, yet a call is charged on the engine's hot path, which must not wait for
//! the store. So each process counts here, in memory, on top of the totals the store last
//! reported, and a task at the assembly point (`weft_node`) takes what was counted since,
//! adds it to the store's counters in one transaction and puts the totals back.
//!
//! A check sees `base + in_flight + pending`: the store's total as of the last sync (which
//! includes this process's earlier deltas), the delta being written now, and what was counted
//! since. So one process alone is exact; several processes together can pass a quota by at
//! most what the others charge between two syncs; a process killed without its last sync
//! forgets what it counted since (a graceful stop syncs first). Each counter belongs to a
//! period (its index since the epoch) and starts again at zero in the next.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::Usage;

/// The counter of `tenant`'s quota (`[budget] tenant`).
pub fn tenant_key(tenant: &str) -> String {
    format!("tenant/{tenant}")
}

/// The counter of the quota of `tenant`'s plan `plan` (`[budget] plan`).
pub fn plan_key(tenant: &str, plan: &str) -> String {
    format!("plan/{tenant}/{plan}")
}

/// The counter of `tenant`'s planner calls (`[budget.planner]`).
pub fn planner_key(tenant: &str) -> String {
    format!("planner/{tenant}")
}

/// The period of `len_ms` (aligned on the epoch) that `now_ms` is in: its index and when it
/// ends (epoch ms).
pub fn period_of(len_ms: u64, now_ms: i64) -> (u64, i64) {
    let len = len_ms.max(1);
    let index = u64::try_from(now_ms).unwrap_or(0) / len;
    let ends = index.saturating_add(1).saturating_mul(len);
    (index, i64::try_from(ends).unwrap_or(i64::MAX))
}

/// One counter's state.
#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    period: u64,
    /// When the period ends (epoch ms), so the store can forget the row after.
    ends_ms: i64,
    /// The store's total at the last sync.
    base: Usage,
    /// Taken by the sync under way, not yet in `base`.
    in_flight: Usage,
    /// Counted since it was taken.
    pending: Usage,
}

impl Entry {
    fn total(&self) -> Usage {
        self.base.plus(self.in_flight).plus(self.pending)
    }
}

/// What one sync adds to one counter (a zero `add` reads it).
#[derive(Debug, Clone, PartialEq)]
pub struct Delta {
    /// The counter's key (`tenant/acme`, `plan/acme/etl`, ...).
    pub key: Arc<str>,
    /// The period it counts.
    pub period: u64,
    /// When that period ends (epoch ms).
    pub ends_ms: i64,
    /// What this process counted since the last sync.
    pub add: Usage,
}

/// The shared counters of one process (see the module docs).
#[derive(Debug, Default)]
pub struct SharedCounts {
    entries: Mutex<HashMap<Arc<str>, Entry>>,
}

/// The counters, locked: check several and add to them as one step.
pub struct Counting<'a> {
    entries: MutexGuard<'a, HashMap<Arc<str>, Entry>>,
}

impl Counting<'_> {
    /// What `key` counts in `period` (zero when it counted an earlier one, or nothing yet).
    pub fn total(&self, key: &str, period: u64) -> Usage {
        self.entries
            .get(key)
            .filter(|e| e.period == period)
            .map_or(Usage::default(), Entry::total)
    }

    /// Counts `add` to `key` in `period`, which ends at `ends_ms` (a later period starts
    /// the counter again).
    pub fn add(&mut self, key: &str, period: u64, ends_ms: i64, add: Usage) {
        let fresh = Entry {
            period,
            ends_ms,
            ..Entry::default()
        };
        let e = match self.entries.get_mut(key) {
            Some(e) => e,
            None => self.entries.entry(Arc::from(key)).or_insert(fresh),
        };
        if e.period != period {
            *e = fresh;
        }
        e.pending = e.pending.plus(add);
    }
}

impl SharedCounts {
    /// No counters.
    pub fn new() -> SharedCounts {
        SharedCounts::default()
    }

    /// The counters, locked.
    pub fn lock(&self) -> Counting<'_> {
        Counting {
            entries: self.entries.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Takes what was counted since the last sync, one delta per live counter (a zero one
    /// too, to read the others' counts), and forgets counters whose period ended by `now_ms`.
    /// A delta not settled by [`SharedCounts::settle`] is given back by the next call
    /// (or [`SharedCounts::failed`]).
    pub fn take(&self, now_ms: i64) -> Vec<Delta> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, e| e.ends_ms > now_ms);
        entries
            .iter_mut()
            .map(|(key, e)| {
                e.in_flight = e.in_flight.plus(e.pending);
                e.pending = Usage::default();
                Delta {
                    key: Arc::clone(key),
                    period: e.period,
                    ends_ms: e.ends_ms,
                    add: e.in_flight,
                }
            })
            .collect()
    }

    /// The store took the deltas of the last [`SharedCounts::take`]: `totals` are its
    /// counters after them (key, period, total), in any order; counters it did not
    /// report keep theirs.
    pub fn settle(&self, totals: &[(Arc<str>, u64, Usage)]) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for (key, period, total) in totals {
            if let Some(e) = entries.get_mut(key)
                && e.period == *period
            {
                e.base = *total;
                e.in_flight = Usage::default();
            }
        }
    }

    /// The last sync failed: its deltas are counted again with the next.
    pub fn failed(&self) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for e in entries.values_mut() {
            e.pending = e.pending.plus(e.in_flight);
            e.in_flight = Usage::default();
        }
    }

    /// Every counter counting `period` (key, total), by key.
    pub fn totals(&self, period: u64) -> Vec<(Arc<str>, Usage)> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = entries
            .iter()
            .filter(|(_, e)| e.period == period)
            .map(|(k, e)| (Arc::clone(k), e.total()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Starts from totals the store holds (key, period, ends_ms, total), at startup: a
    /// counter this process already counted keeps its own count.
    pub fn seed(&self, totals: impl IntoIterator<Item = (Arc<str>, u64, i64, Usage)>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for (key, period, ends_ms, base) in totals {
            let e = entries.entry(key).or_insert(Entry {
                period,
                ends_ms,
                ..Entry::default()
            });
            if e.period == period && e.base == Usage::default() {
                e.base = base;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(n: u64) -> Usage {
        Usage {
            tool_calls: n,
            ..Usage::default()
        }
    }

    #[test]
    fn a_check_sees_the_store_total_the_delta_in_flight_and_what_came_since() {
        let s = SharedCounts::new();
        s.lock().add("t", 7, 1_000, calls(2));
        let taken = s.take(0);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].add, calls(2));
        // Counted while the sync is under way.
        s.lock().add("t", 7, 1_000, calls(1));
        assert_eq!(s.lock().total("t", 7), calls(3));
        // The store adds another process's 5 calls to ours.
        s.settle(&[(Arc::from("t"), 7, calls(7))]);
        assert_eq!(s.lock().total("t", 7), calls(8));
        // The next sync sends only the one call since.
        assert_eq!(s.take(0)[0].add, calls(1));
        s.failed();
        assert_eq!(s.lock().total("t", 7), calls(8));
        assert_eq!(s.take(0)[0].add, calls(1), "a failed delta is sent again");
        // Another period starts at zero; an ended one is forgotten.
        assert_eq!(s.lock().total("t", 8), Usage::default());
        assert!(s.take(1_000).is_empty());
    }

    #[test]
    fn the_first_period_since_the_epoch_is_a_period_like_any() {
        let s = SharedCounts::new();
        s.lock().add("t", 0, 1_000, calls(1));
        assert_eq!(s.take(10)[0].add, calls(1));
    }

    #[test]
    fn seeding_keeps_what_was_counted_and_settling_another_period_changes_nothing() {
        let s = SharedCounts::new();
        s.lock().add("a", 1, 10, calls(1));
        s.seed([
            (Arc::from("a"), 1, 10, calls(40)),
            (Arc::from("b"), 1, 10, calls(3)),
        ]);
        assert_eq!(s.lock().total("a", 1), calls(41));
        assert_eq!(s.lock().total("b", 1), calls(3));
        s.take(0);
        s.settle(&[(Arc::from("a"), 0, calls(99))]);
        assert_eq!(s.lock().total("a", 1), calls(41));
    }
}
