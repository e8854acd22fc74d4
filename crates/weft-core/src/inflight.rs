//! The in-flight firings of one instance, keyed by firing id: [`InFlightMap`].
//!
//! Firing ids only grow and an instance has few firings in flight at once (one in a chain,
//! ten in a ten-way fan-out), so a sorted queue beats a `BTreeMap` on the hot path: a new
//! firing is appended, the oldest one (the usual outcome) is popped from the front, and
//! anything else is found by binary search. It keeps the `BTreeMap` API its users call
//! (`get`, `get_mut`, `insert`, `remove`, `iter`, `keys`, `len`, …) and the `BTreeMap`'s
//! serialized form exactly (a map from firing id to record, ascending), so a snapshot reads
//! the same whichever of the two wrote it.

use std::collections::VecDeque;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::instance::InFlight;
use crate::token::FiringId;

/// Firing id → in-flight record, ascending by id.
#[derive(Clone, Default, PartialEq)]
pub struct InFlightMap {
    entries: VecDeque<(FiringId, InFlight)>,
}

impl InFlightMap {
    /// An empty map (no allocation).
    pub const fn new() -> Self {
        InFlightMap {
            entries: VecDeque::new(),
        }
    }

    /// Makes room for `n` more firings.
    pub fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
    }

    /// Number of firings in flight.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Is nothing in flight?
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where `firing` is (`Ok`) or would go (`Err`). The front is checked first: outcomes
    /// mostly arrive oldest first.
    fn find(&self, firing: FiringId) -> Result<usize, usize> {
        match self.entries.front() {
            None => Err(0),
            Some((f, _)) if *f == firing => Ok(0),
            Some((f, _)) if *f > firing => Err(0),
            Some(_) => self.entries.binary_search_by_key(&firing, |(f, _)| *f),
        }
    }

    /// The record of `firing`.
    pub fn get(&self, firing: &FiringId) -> Option<&InFlight> {
        let i = self.find(*firing).ok()?;
        self.entries.get(i).map(|(_, v)| v)
    }

    /// The record of `firing`, mutable.
    pub fn get_mut(&mut self, firing: &FiringId) -> Option<&mut InFlight> {
        let i = self.find(*firing).ok()?;
        self.entries.get_mut(i).map(|(_, v)| v)
    }

    /// Is `firing` in flight?
    pub fn contains_key(&self, firing: &FiringId) -> bool {
        self.find(*firing).is_ok()
    }

    /// Records `firing` (appended when it is the newest, as new firings always are);
    /// returns the record it replaced, if any.
    #[inline]
    pub fn insert(&mut self, firing: FiringId, record: InFlight) -> Option<InFlight> {
        if self.entries.back().is_none_or(|(f, _)| *f < firing) {
            self.entries.push_back((firing, record));
            return None;
        }
        match self.find(firing) {
            Ok(i) => self
                .entries
                .get_mut(i)
                .map(|(_, v)| std::mem::replace(v, record)),
            Err(i) => {
                self.entries.insert(i, (firing, record));
                None
            }
        }
    }

    /// Removes and returns the record of `firing`.
    #[inline]
    pub fn remove(&mut self, firing: &FiringId) -> Option<InFlight> {
        let i = self.find(*firing).ok()?;
        let e = if i == 0 {
            self.entries.pop_front()
        } else {
            self.entries.remove(i)
        };
        e.map(|(_, v)| v)
    }

    /// `(firing, record)`, ascending by firing.
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&FiringId, &InFlight)> + ExactSizeIterator {
        self.entries.iter().map(|(f, v)| (f, v))
    }

    /// `(firing, record)` with mutable records, ascending by firing.
    pub fn iter_mut(
        &mut self,
    ) -> impl DoubleEndedIterator<Item = (&FiringId, &mut InFlight)> + ExactSizeIterator {
        self.entries.iter_mut().map(|(f, v)| (&*f, v))
    }

    /// Firing ids, ascending.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &FiringId> + ExactSizeIterator {
        self.entries.iter().map(|(f, _)| f)
    }

    /// Records, ascending by firing.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &InFlight> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    /// Removes every record.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

impl std::fmt::Debug for InFlightMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a InFlightMap {
    type Item = (&'a FiringId, &'a InFlight);
    type IntoIter = std::iter::Map<
        std::collections::vec_deque::Iter<'a, (FiringId, InFlight)>,
        fn(&'a (FiringId, InFlight)) -> (&'a FiringId, &'a InFlight),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(f, v)| (f, v))
    }
}

impl IntoIterator for InFlightMap {
    type Item = (FiringId, InFlight);
    type IntoIter = std::collections::vec_deque::IntoIter<(FiringId, InFlight)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl FromIterator<(FiringId, InFlight)> for InFlightMap {
    fn from_iter<I: IntoIterator<Item = (FiringId, InFlight)>>(iter: I) -> Self {
        let mut m = InFlightMap::new();
        for (f, v) in iter {
            m.insert(f, v);
        }
        m
    }
}

impl Extend<(FiringId, InFlight)> for InFlightMap {
    fn extend<I: IntoIterator<Item = (FiringId, InFlight)>>(&mut self, iter: I) {
        for (f, v) in iter {
            self.insert(f, v);
        }
    }
}

/// As `BTreeMap<FiringId, InFlight>`: a map, ascending by firing.
impl Serialize for InFlightMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(Some(self.entries.len()))?;
        for (f, v) in &self.entries {
            m.serialize_entry(f, v)?;
        }
        m.end()
    }
}

/// As `BTreeMap<FiringId, InFlight>`: any key order; a repeated key keeps its last record.
impl<'de> Deserialize<'de> for InFlightMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = InFlightMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InFlightMap, A::Error> {
                let mut m = InFlightMap::new();
                while let Some((f, v)) = map.next_entry::<FiringId, InFlight>()? {
                    m.insert(f, v);
                }
                Ok(m)
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::*;

    fn rec(step: u32) -> InFlight {
        InFlight {
            step,
            tokens: Vec::new(),
            attempt: 1,
            args: Value::Null,
            correlation: None,
        }
    }

    #[test]
    fn behaves_like_a_btreemap() {
        let mut m = InFlightMap::new();
        let mut b = BTreeMap::new();
        // Appends, out-of-order inserts, replacements, removals front / middle / back.
        let ops: &[(bool, u64)] = &[
            (true, 3),
            (true, 5),
            (true, 9),
            (true, 1),
            (true, 7),
            (true, 5),
            (false, 1),
            (false, 7),
            (false, 8),
            (true, 12),
            (false, 12),
            (true, 0),
            (false, 3),
        ];
        for (k, &(ins, f)) in ops.iter().enumerate() {
            if ins {
                assert_eq!(m.insert(f, rec(k as u32)), b.insert(f, rec(k as u32)));
            } else {
                assert_eq!(m.remove(&f), b.remove(&f));
            }
            assert_eq!(m.len(), b.len());
            assert!(m.iter().eq(b.iter()));
            for probe in 0..14 {
                assert_eq!(m.get(&probe), b.get(&probe));
                assert_eq!(m.contains_key(&probe), b.contains_key(&probe));
            }
        }
        assert_eq!(format!("{m:?}"), format!("{b:?}"));
    }

    #[test]
    fn serialized_form_is_the_btreemaps() {
        let b: BTreeMap<FiringId, InFlight> = [(4, rec(1)), (17, rec(2)), (2, rec(3))].into();
        let m: InFlightMap = b.clone().into_iter().rev().collect();
        let old = serde_json::to_value(&b).expect("ser");
        assert_eq!(serde_json::to_value(&m).expect("ser"), old);
        assert_eq!(
            serde_json::to_string(&m).expect("ser"),
            serde_json::to_string(&b).expect("ser")
        );
        // A snapshot written with the BTreeMap reads back the same, in any key order.
        let back: InFlightMap = serde_json::from_value(old.clone()).expect("de");
        assert!(back.iter().eq(b.iter()));
        let shuffled = json!({
            "17": {"step": 2, "tokens": [], "attempt": 1, "args": null},
            "2": {"step": 3, "tokens": [], "attempt": 1, "args": null},
            "4": {"step": 1, "tokens": [], "attempt": 1, "args": null},
        });
        let back: InFlightMap = serde_json::from_value(shuffled).expect("de");
        assert!(back.iter().eq(b.iter()));
        assert!(serde_json::from_value::<InFlightMap>(json!({"x": {}})).is_err());
        assert!(serde_json::from_value::<InFlightMap>(json!([])).is_err());
    }
}
