//! Karp–Miller coverability: decides which places are unbounded when plain reachability
//! cannot finish (state limit, or a count past 65 535).
//!
//! Nodes carry ω-markings (`OMEGA`); when a new marking strictly covers one of its ancestors on
//! the spanning-tree path, the places that grew become ω. Identical ω-markings are merged.
//! The ancestor and the path to it give a pumping witness: fire `prefix`, then repeat `cycle`.

use std::collections::HashMap;
use std::collections::VecDeque;

use crate::explore::Bounds;
use crate::net::PtNet;

/// ω: arbitrarily many tokens.
pub const OMEGA: u32 = u32::MAX;

/// A witness that a place is unbounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pump {
    /// The unbounded place.
    pub place: u32,
    /// Transitions fired from the initial marking to the start of the pumping sequence.
    pub prefix: Vec<u32>,
    /// Transitions whose repetition adds tokens to `place` each time.
    pub cycle: Vec<u32>,
}

/// Result of a coverability exploration.
#[derive(Debug, Clone)]
pub struct Coverability {
    /// False when the node limit stopped it: then "no ω" does not mean bounded.
    pub complete: bool,
    /// Nodes built.
    pub nodes: usize,
    /// One pumping witness per unbounded place, in place order.
    pub pumps: Vec<Pump>,
}

struct Node {
    m: Vec<u32>,
    parent: u32,
    via: u32,
}

fn path(nodes: &[Node], mut n: u32) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some(node) = nodes.get(n as usize) {
        if node.parent == u32::MAX {
            break;
        }
        out.push(node.via);
        n = node.parent;
    }
    out.reverse();
    out
}

/// Builds the Karp–Miller coverability graph of `net` with at most `max_nodes` nodes.
pub fn karp_miller(net: &PtNet, max_nodes: usize) -> Coverability {
    karp_miller_within(net, &Bounds::states(max_nodes))
}

/// [`karp_miller`] within `bounds` (`max_states` counts nodes; bytes; the caller's
/// interrupt). Stopped by any of them, the graph is not `complete`.
pub fn karp_miller_within(net: &PtNet, bounds: &Bounds) -> Coverability {
    let width = net.places.len();
    let mut guard = bounds.guard();
    // A node: its marking twice (the node and the index key), two vector headers, its links
    // and an index entry.
    let per_node = 2 * (width * 4 + 24) + 8 + 12;
    let mut nodes = vec![Node {
        m: net.initial.clone(),
        parent: u32::MAX,
        via: u32::MAX,
    }];
    let mut seen: HashMap<Vec<u32>, u32> = HashMap::new();
    seen.insert(net.initial.clone(), 0);
    let mut first_pump: Vec<Option<Pump>> = vec![None; width];
    let mut queue = VecDeque::from([0u32]);
    let mut complete = true;

    let mut popped = 0u32;
    'outer: while let Some(n) = queue.pop_front() {
        // Accelerating walks the whole tree path: a node can cost much more than storing it.
        popped = popped.wrapping_add(1);
        if popped.is_multiple_of(256) && bounds.interrupted() {
            complete = false;
            break;
        }
        for (ti, t) in net.transitions.iter().enumerate() {
            let m = &nodes[n as usize].m;
            if !t
                .pre
                .iter()
                .all(|&(p, w)| m[p as usize] == OMEGA || m[p as usize] >= w)
            {
                continue;
            }
            let mut next = m.clone();
            for &(p, w) in &t.pre {
                if next[p as usize] != OMEGA {
                    next[p as usize] -= w;
                }
            }
            for &(p, w) in &t.post {
                let v = &mut next[p as usize];
                if *v != OMEGA {
                    *v = v.checked_add(w).filter(|&x| x != OMEGA).unwrap_or(OMEGA);
                }
            }
            // Accelerate against every ancestor on the tree path (including `n`).
            let mut a = n;
            loop {
                let anc = &nodes[a as usize].m;
                let covers = anc
                    .iter()
                    .zip(&next)
                    .all(|(&x, &y)| y == OMEGA || (x != OMEGA && x <= y));
                if covers && anc != &next {
                    for p in 0..width {
                        if next[p] != OMEGA && anc[p] < next[p] {
                            next[p] = OMEGA;
                            if first_pump[p].is_none() {
                                let prefix = path(&nodes, a);
                                let mut cycle = path(&nodes, n);
                                cycle.drain(..prefix.len().min(cycle.len()));
                                cycle.push(ti as u32);
                                first_pump[p] = Some(Pump {
                                    place: p as u32,
                                    prefix,
                                    cycle,
                                });
                            }
                        }
                    }
                }
                let parent = nodes[a as usize].parent;
                if parent == u32::MAX {
                    break;
                }
                a = parent;
            }
            if seen.contains_key(&next) {
                continue;
            }
            if guard.admit(nodes.len(), nodes.len() * per_node).is_err() {
                complete = false;
                break 'outer;
            }
            let id = nodes.len() as u32;
            seen.insert(next.clone(), id);
            nodes.push(Node {
                m: next,
                parent: n,
                via: ti as u32,
            });
            queue.push_back(id);
        }
    }
    Coverability {
        complete,
        nodes: nodes.len(),
        pumps: first_pump.into_iter().flatten().collect(),
    }
}
