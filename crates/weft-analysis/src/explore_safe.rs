//! The fast path of reachability for safe nets (at most one token per place) with at most 63
//! places, which is what most plans compile to.
//!
//! A marking is one `u64` bitset, so firing is three bit operations and the hash table stores
//! markings inline (open addressing, linear probing): looking up a successor costs one cache
//! line instead of a table probe plus an arena read. As soon as a place would get a second
//! token (or an arc weight is above one on an enabled transition), this gives up and the
//! general `u8`/`u16` exploration runs instead.

use crate::explore::{Bounds, Cells, Graph, Stop, mix};
use crate::net::PtNet;

/// Never a marking: markings use at most 63 bits.
const EMPTY: u64 = u64::MAX;

/// Open-addressing set of markings with (when edges are recorded) the state index of each.
struct Table {
    slots: Vec<u64>,
    /// Empty unless successor lists are recorded: saves a cache miss per new state.
    index: Vec<u32>,
    len: usize,
}

impl Table {
    fn with_capacity(cap: usize, indexed: bool) -> Table {
        let cap = cap.next_power_of_two().max(1024);
        Table {
            slots: vec![EMPTY; cap],
            index: if indexed { vec![0; cap] } else { Vec::new() },
            len: 0,
        }
    }

    /// The slot holding `m` (hash `h = mix(m)`), or `Err(slot)` where it would go.
    #[inline(always)]
    fn find(&self, m: u64, h: u64) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let mut s = h as usize & mask;
        loop {
            let v = self.slots[s];
            if v == m {
                return Ok(s);
            }
            if v == EMPTY {
                return Err(s);
            }
            s = (s + 1) & mask;
        }
    }

    #[inline(always)]
    fn put(&mut self, slot: usize, m: u64, idx: u32) {
        self.slots[slot] = m;
        if let Some(i) = self.index.get_mut(slot) {
            *i = idx;
        }
        self.len += 1;
    }

    /// Doubles the table when it is half full (rebuilt from the states in order).
    fn grow_if_needed(&mut self, states: &[u64]) {
        if self.len * 2 < self.slots.len() {
            return;
        }
        let mut bigger = Table::with_capacity(self.slots.len() * 2, !self.index.is_empty());
        for (i, &m) in states.iter().enumerate() {
            if let Err(slot) = bigger.find(m, mix(m)) {
                bigger.put(slot, m, i as u32);
            }
        }
        *self = bigger;
    }
}

/// Explores `net` with bitset markings; `None` when the net is not (known to be) safe or has
/// more than 63 places, in which case the caller runs the general exploration.
pub(crate) fn run(net: &PtNet, bounds: &Bounds, record_edges: bool) -> Option<Graph> {
    let width = net.places.len();
    if width > 63 || net.initial.iter().any(|&m| m > 1) {
        return None;
    }
    let nt = net.transitions.len();
    let mut pre = Vec::with_capacity(nt);
    let mut post = Vec::with_capacity(nt);
    // Transitions needing two tokens on a place can never fire in a safe marking.
    let mut usable = Vec::with_capacity(nt);
    for t in &net.transitions {
        pre.push(t.pre.iter().fold(0u64, |a, &(p, _)| a | 1 << p));
        post.push(t.post.iter().fold(0u64, |a, &(p, _)| a | 1 << p));
        usable.push(t.pre.iter().all(|&(_, w)| w == 1));
        if t.post.iter().any(|&(_, w)| w > 1) && t.pre.iter().all(|&(_, w)| w == 1) {
            // Enabled or not, it is simplest to let the general path handle it.
            return None;
        }
    }
    let live: Vec<usize> = (0..nt).filter(|&t| usable[t]).collect();

    let m0 = net
        .initial
        .iter()
        .enumerate()
        .fold(0u64, |a, (p, &m)| a | (u64::from(m) << p));
    let mut states = vec![m0];
    let mut parent = vec![u32::MAX];
    let mut via = vec![u32::MAX];
    let mut dead = Vec::new();
    let mut enabled_ever = vec![false; nt];
    let mut succ_off = vec![0u32];
    let mut succ = Vec::new();
    let mut edges = 0usize;
    let mut stop = Stop::None;
    let mut guard = bounds.guard();
    let mut table = Table::with_capacity(1024, record_edges);
    if let Err(slot) = table.find(m0, mix(m0)) {
        table.put(slot, m0, 0);
    }

    // Successors of the current state: (marking, its hash, transition).
    let mut cand: Vec<(u64, u64, u32)> = Vec::with_capacity(live.len());
    let mut i = 0usize;
    'states: while i < states.len() {
        let m = states[i];
        cand.clear();
        for &t in &live {
            let (pre_t, post_t) = (pre[t], post[t]);
            if m & pre_t != pre_t {
                continue;
            }
            enabled_ever[t] = true;
            let rest = m & !pre_t;
            if rest & post_t != 0 {
                return None; // a second token: not safe
            }
            let next = rest | post_t;
            cand.push((next, mix(next), t as u32));
        }
        let any = !cand.is_empty();
        edges += cand.len();
        // Touch every successor's slot first: the loads are independent, so their cache
        // misses overlap instead of being paid one after another in the probing loop below.
        let mask = table.slots.len() - 1;
        let touched = cand
            .iter()
            .fold(0u64, |a, c| a ^ table.slots[c.1 as usize & mask]);
        std::hint::black_box(touched);
        for &(next, h, t) in &cand {
            let j = match table.find(next, h) {
                Ok(slot) => {
                    if record_edges {
                        succ.push(table.index[slot]);
                    }
                    continue;
                }
                Err(slot) => {
                    let n = states.len();
                    let bytes = n * (8 + 4 + 4)
                        + table.slots.len() * 8
                        + table.index.len() * 4
                        + (succ.len() + succ_off.len()) * 4;
                    if let Err(s) = guard.admit(n, bytes) {
                        stop = s;
                        break 'states;
                    }
                    table.put(slot, next, n as u32);
                    states.push(next);
                    parent.push(i as u32);
                    via.push(t);
                    table.grow_if_needed(&states);
                    n as u32
                }
            };
            if record_edges {
                succ.push(j);
            }
        }
        if !any {
            dead.push(i as u32);
        }
        if record_edges {
            succ_off.push(succ.len() as u32);
        }
        i += 1;
    }
    Some(Graph {
        width,
        cells: Cells::Bits(states),
        parent,
        via,
        dead,
        enabled_ever,
        stop,
        edges,
        succ_off,
        succ,
    })
}
