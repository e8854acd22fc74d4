//! The marking: the tokens of one instance, laid out in slots (see [`crate::net::SlotInfo`]).
//!
//! Slots are FIFO queues ordered by token id, so the oldest matching token is always the one
//! taken. Slots that equality guards look into keep a hash index from the guarded payload
//! field to the tokens carrying that value, so channel passing finds a request's partner
//! without scanning every pair.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::net::{Net, SlotId};
use crate::queue::TokenQueue;
use crate::token::{Token, TokenId};

/// Tokens waiting on one slot.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Slot {
    /// Tokens, oldest first (ids increase); the first one is stored in place.
    pub tokens: TokenQueue,
    /// One index per path in `SlotInfo::index_paths`: key → token ids, oldest first.
    #[serde(skip)]
    indexes: Vec<HashMap<String, VecDeque<TokenId>>>,
}

/// The canonical index key of the value at `path` inside `payload`, if present.
pub fn key_at(payload: &Value, path: &[String]) -> Option<String> {
    let mut v = payload;
    for p in path {
        v = v.get(p)?;
    }
    Some(match v {
        Value::String(s) => format!("s{s}"),
        other => format!("j{other}"),
    })
}

impl Slot {
    /// A slot with no tokens and no index.
    const EMPTY: Slot = Slot {
        tokens: TokenQueue::new(),
        indexes: Vec::new(),
    };
}

/// All tokens of an instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Marking {
    /// One per slot of the net.
    pub slots: Vec<Slot>,
}

/// Slots that never held a buffer (most of a finished instance's) are let go without
/// running their drop glue, which costs more than the check (an instance of a long chain
/// has a slot per event).
impl Drop for Marking {
    fn drop(&mut self) {
        for s in std::mem::take(&mut self.slots) {
            if s.tokens.is_bare() && s.indexes.capacity() == 0 {
                // Nothing on the heap: forgetting it leaks nothing.
                std::mem::forget(s);
            }
        }
    }
}

impl Marking {
    /// An empty marking for `net`.
    pub fn new(net: &Net) -> Self {
        let mut slots = Vec::with_capacity(net.slots.len());
        for s in &net.slots {
            if s.index_paths.is_empty() {
                // A constant: written in place, not staged on the stack and copied.
                slots.push(Slot::EMPTY);
            } else {
                slots.push(Slot {
                    tokens: TokenQueue::new(),
                    // One per index (no hasher state is made for a slot without one).
                    indexes: s.index_paths.iter().map(|_| HashMap::new()).collect(),
                });
            }
        }
        Marking { slots }
    }

    /// Rebuilds the equality indexes (after deserialising a snapshot).
    pub fn reindex(&mut self, net: &Net) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let paths = &net.slots[i].index_paths;
            slot.indexes = vec![HashMap::new(); paths.len()];
            for t in &slot.tokens {
                for (k, path) in paths.iter().enumerate() {
                    if let Some(key) = key_at(&t.payload, path) {
                        slot.indexes[k].entry(key).or_default().push_back(t.id);
                    }
                }
            }
        }
    }

    /// Appends a token to a slot.
    #[inline]
    pub fn push(&mut self, net: &Net, slot: SlotId, token: Token) {
        let s = &mut self.slots[slot as usize];
        for (k, path) in net.slots[slot as usize].index_paths.iter().enumerate() {
            if let Some(key) = key_at(&token.payload, path) {
                s.indexes[k].entry(key).or_default().push_back(token.id);
            }
        }
        s.tokens.push_back(token);
    }

    /// Puts a token back into a slot at its place by age (a firing rolled back for a
    /// repair), keeping the queue and its indexes ordered by token id.
    pub fn restore(&mut self, net: &Net, slot: SlotId, token: Token) {
        let s = &mut self.slots[slot as usize];
        for (k, path) in net.slots[slot as usize].index_paths.iter().enumerate() {
            if let Some(key) = key_at(&token.payload, path) {
                let ids = s.indexes[k].entry(key).or_default();
                let at = ids.partition_point(|&i| i < token.id);
                ids.insert(at, token.id);
            }
        }
        let at = s.tokens.partition_point(|t| t.id < token.id);
        s.tokens.insert(at, token);
    }

    /// Position of a token in a slot (binary search: ids increase along the queue).
    pub fn position(&self, slot: SlotId, id: TokenId) -> Option<usize> {
        self.slots[slot as usize].tokens.position(id)
    }

    /// Removes the token at `pos` from a slot and returns it.
    pub fn take(&mut self, net: &Net, slot: SlotId, pos: usize) -> Option<Token> {
        let t = self.slots[slot as usize].tokens.remove(pos)?;
        self.unindex(net, slot, &t);
        Some(t)
    }

    /// [`Marking::take`] straight onto the end of `out` (the firing's token vector): the
    /// token is moved once instead of through a chain of `Option` returns, each of which
    /// would stage its 64 bytes on the stack (`perf annotate` shows store-forwarding stalls
    /// on such copies).
    /// Returns whether a token was there.
    #[inline]
    pub fn take_into(&mut self, net: &Net, slot: SlotId, pos: usize, out: &mut Vec<Token>) -> bool {
        let q = &mut self.slots[slot as usize].tokens;
        if !q.remove_into(pos, out) {
            return false;
        }
        if !net.slots[slot as usize].index_paths.is_empty()
            && let Some(t) = out.last()
        {
            self.unindex(net, slot, t);
        }
        true
    }

    /// Drops a taken token from its slot's equality indexes.
    fn unindex(&mut self, net: &Net, slot: SlotId, t: &Token) {
        let s = &mut self.slots[slot as usize];
        for (k, path) in net.slots[slot as usize].index_paths.iter().enumerate() {
            if let Some(key) = key_at(&t.payload, path)
                && let Some(ids) = s.indexes[k].get_mut(&key)
            {
                if let Some(p) = ids.iter().position(|&i| i == t.id) {
                    ids.remove(p);
                }
                if ids.is_empty() {
                    s.indexes[k].remove(&key);
                }
            }
        }
    }

    /// Token ids in a slot whose indexed field (index `k`) has `key`, oldest first.
    pub fn lookup(&self, slot: SlotId, k: usize, key: &str) -> Option<&VecDeque<TokenId>> {
        self.slots[slot as usize].indexes.get(k)?.get(key)
    }

    /// Number of tokens in a slot.
    pub fn len(&self, slot: SlotId) -> usize {
        self.slots[slot as usize].tokens.len()
    }

    /// Total number of tokens.
    pub fn total(&self) -> usize {
        self.slots.iter().map(|s| s.tokens.len()).sum()
    }

    /// Is the marking empty?
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(|s| s.tokens.is_empty())
    }

    /// Token counts per event name (broadcast copies count once per event: the maximum over
    /// its slots), for display.
    pub fn counts_by_event(&self, net: &Net) -> Vec<(String, usize)> {
        let mut per_event = vec![0usize; net.events.len()];
        for (i, s) in self.slots.iter().enumerate() {
            let e = net.slots[i].event as usize;
            per_event[e] = per_event[e].max(s.tokens.len());
        }
        net.events
            .iter()
            .zip(per_event)
            .map(|(e, n)| (e.name.clone(), n))
            .collect()
    }
}
