//! The engine's routing index: for each tenant and input event name, the live instances that
//! accept the event ([`crate::Engine::ingest`] without a target reaches them).
//!
//! An instance is added when it first settles and removed when it ends, so an instance per
//! request (a one-step plan calling a tool) adds and removes itself once per call. A set
//! that empties is therefore kept for the next instance of the same tenant and event rather
//! than freed with its tenant's table and made again: adding and removing an instance ran 112
//! of the ~790 lines of code of the engine's path to and from a tool call when both tables
//! were made and freed each time, 56 with the set kept (`docs/performance.md`, tool sources).
//! Kept sets are swept once they outnumber both the sets in use and [`KEEP`], so what the
//! index holds stays within twice what it needs, and the sweep's cost is shared by at least
//! as many removals; a set that held many instances is shrunk as it empties.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The hasher of the index's maps (keys are ids and names weft made or checked).
type Fast = foldhash::fast::RandomState;

/// How many emptied sets are always kept without a sweep.
const KEEP: usize = 64;

/// The most room a kept set keeps (a set that held more instances gives the rest back).
const ROOM: usize = 8;

/// One tenant's part: input event name → the live instances (ids) that accept it.
type ByEvent = HashMap<Arc<str>, HashSet<u64, Fast>, Fast>;

/// Tenant → input event name → the live instances (ids) that accept it.
#[derive(Default)]
pub(crate) struct Routes {
    by_tenant: HashMap<Arc<str>, ByEvent, Fast>,
    /// Sets holding at least one instance.
    used: usize,
    /// Sets kept empty.
    kept: usize,
}

impl Routes {
    /// Adds instance `id` of `tenant` under each of `events`.
    pub(crate) fn insert(&mut self, tenant: &Arc<str>, events: &[Arc<str>], id: u64) {
        if events.is_empty() {
            return;
        }
        let by_event = match self.by_tenant.get_mut(&**tenant) {
            Some(m) => m,
            None => self.by_tenant.entry(Arc::clone(tenant)).or_default(),
        };
        for name in events {
            match by_event.get_mut(&**name) {
                Some(set) => {
                    if set.is_empty() {
                        self.kept -= 1;
                        self.used += 1;
                    }
                    set.insert(id);
                }
                None => {
                    let mut set = HashSet::with_capacity_and_hasher(1, Fast::default());
                    set.insert(id);
                    by_event.insert(Arc::clone(name), set);
                    self.used += 1;
                }
            }
        }
    }

    /// Removes instance `id` of `tenant` from each of `events` (what it was added under).
    pub(crate) fn remove(&mut self, tenant: &str, events: &[Arc<str>], id: u64) {
        let Some(by_event) = self.by_tenant.get_mut(tenant) else {
            return;
        };
        for name in events {
            if let Some(set) = by_event.get_mut(&**name)
                && set.remove(&id)
                && set.is_empty()
            {
                if set.capacity() > ROOM {
                    set.shrink_to(ROOM);
                }
                self.used -= 1;
                self.kept += 1;
            }
        }
        if self.kept > KEEP.max(self.used) {
            self.sweep();
        }
    }

    /// The instances of `tenant` that accept `event`, in no order.
    pub(crate) fn get(&self, tenant: &str, event: &str) -> Vec<u64> {
        self.by_tenant
            .get(tenant)
            .and_then(|m| m.get(event))
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Frees every empty set and every tenant left without a set.
    fn sweep(&mut self) {
        self.by_tenant.retain(|_, by_event| {
            by_event.retain(|_, set| !set.is_empty());
            !by_event.is_empty()
        });
        self.kept = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<Arc<str>> {
        n.iter().map(|&s| Arc::from(s)).collect()
    }

    /// How many sets the index holds, empty or not.
    fn sets(r: &Routes) -> usize {
        r.by_tenant.values().map(HashMap::len).sum()
    }

    #[test]
    fn an_instance_is_found_under_each_of_its_events_until_it_is_removed() {
        let mut r = Routes::default();
        let t: Arc<str> = Arc::from("t");
        let ev = names(&["a", "b"]);
        r.insert(&t, &ev, 1);
        r.insert(&t, &ev[..1], 2);
        let mut a = r.get("t", "a");
        a.sort_unstable();
        assert_eq!(a, vec![1, 2]);
        assert_eq!(r.get("t", "b"), vec![1]);
        assert!(r.get("u", "a").is_empty());
        r.remove("t", &ev, 1);
        assert_eq!(r.get("t", "a"), vec![2]);
        assert!(r.get("t", "b").is_empty());
        r.remove("t", &ev[..1], 2);
        assert!(r.get("t", "a").is_empty());
        // Both sets are kept (fewer than `KEEP`), and found again by the next instance.
        assert_eq!((sets(&r), r.used, r.kept), (2, 0, 2));
        r.insert(&t, &ev, 3);
        assert_eq!((r.get("t", "a"), r.get("t", "b")), (vec![3], vec![3]));
        assert_eq!((sets(&r), r.used, r.kept), (2, 2, 0));
    }

    #[test]
    fn emptied_sets_are_swept_once_they_outnumber_the_sets_in_use() {
        let mut r = Routes::default();
        let ev = names(&["start"]);
        // A live instance in each of 10 tenants, then 10,000 tenants that come and go.
        for k in 0..10u64 {
            r.insert(&Arc::from(format!("live{k}")), &ev, k);
        }
        for k in 0..10_000u64 {
            let t: Arc<str> = Arc::from(format!("gone{k}"));
            r.insert(&t, &ev, 100 + k);
            r.remove(&t, &ev, 100 + k);
            assert!(r.kept <= KEEP, "{} sets kept after tenant {k}", r.kept);
            assert_eq!(sets(&r), r.used + r.kept);
        }
        assert_eq!(r.used, 10);
        assert!(
            r.by_tenant.len() <= 10 + KEEP,
            "{} tenants",
            r.by_tenant.len()
        );
        for k in 0..10u64 {
            assert_eq!(r.get(&format!("live{k}"), "start"), vec![k]);
        }
    }

    #[test]
    fn a_set_that_held_many_instances_is_shrunk_as_it_empties() {
        let mut r = Routes::default();
        let t: Arc<str> = Arc::from("t");
        let ev = names(&["a"]);
        for id in 0..10_000 {
            r.insert(&t, &ev, id);
        }
        for id in 0..10_000 {
            r.remove("t", &ev, id);
        }
        let cap = r.by_tenant["t"]["a"].capacity();
        assert!(cap <= 2 * ROOM, "a kept set keeps room for {cap}");
        r.insert(&t, &ev, 1);
        assert_eq!(r.get("t", "a"), vec![1]);
    }

    #[test]
    fn removing_what_was_never_added_changes_nothing() {
        let mut r = Routes::default();
        let t: Arc<str> = Arc::from("t");
        let ev = names(&["a"]);
        r.remove("t", &ev, 1);
        r.insert(&t, &ev, 1);
        r.remove("t", &ev, 2);
        r.remove("t", &names(&["b"]), 1);
        assert_eq!(r.get("t", "a"), vec![1]);
        assert_eq!((r.used, r.kept), (1, 0));
    }
}
