//! Breadth-first reachability graph exploration, built for speed.
//!
//! Markings live in one flat arena of `u8` cells (retried with `u16` cells when a count passes
//! 255; past 65 535 the successor is dropped and the exploration marked incomplete). Each
//! state keeps a linear hash `Σ m[p]·r[p]`, so a successor's hash is the parent's plus a
//! per-transition constant; a `hashbrown::HashTable<u32>` of state indices, probed with a
//! mixed form of that hash, deduplicates. Parent pointers give shortest (BFS) witnesses.
//! Safe nets with at most 63 places take the faster bitset path in `explore_safe.rs`.

use hashbrown::HashTable;

use crate::net::PtNet;

/// Why an exploration stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// It did not: every reachable marking was visited.
    None,
    /// `max_states` markings were stored and another was found.
    StateLimit,
    /// A place would have held more than 65 535 tokens (index of the first such place).
    Overflow(u32),
    /// The stored markings reached [`Bounds::max_bytes`].
    MemoryLimit,
    /// The caller's interrupt (its deadline) said stop.
    Interrupted,
}

/// What may stop one exploration: a number of markings, the bytes they take, the caller's
/// interrupt.
#[derive(Clone)]
pub struct Bounds {
    /// Markings stored at most.
    pub max_states: usize,
    /// Bytes the stored markings (with their hashes, links, edges and index) may take.
    pub max_bytes: usize,
    /// Consulted every [`CHECK_EVERY`] new markings (and at the first); true means stop.
    pub interrupt: Option<crate::report::Interrupt>,
}

/// New markings between two consultations of the interrupt.
pub const CHECK_EVERY: u32 = 4096;

impl Bounds {
    /// Only a number of markings.
    pub fn states(max_states: usize) -> Self {
        Bounds {
            max_states,
            max_bytes: usize::MAX,
            interrupt: None,
        }
    }

    /// A guard over these bounds for one exploration.
    pub(crate) fn guard(&self) -> Guard<'_> {
        Guard {
            bounds: self,
            max_states: self.max_states.clamp(1, u32::MAX as usize - 1),
            since: CHECK_EVERY - 1,
        }
    }

    /// Has the interrupt fired?
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|i| i())
    }
}

/// Decides, marking by marking, whether an exploration may store one more.
pub(crate) struct Guard<'a> {
    bounds: &'a Bounds,
    /// `max_states`, kept below `u32::MAX` (states are `u32` indices).
    max_states: usize,
    since: u32,
}

impl Guard<'_> {
    /// May a new marking be stored, given `states` stored so far taking `bytes`?
    #[inline]
    pub(crate) fn admit(&mut self, states: usize, bytes: usize) -> Result<(), Stop> {
        if states >= self.max_states {
            return Err(Stop::StateLimit);
        }
        if bytes > self.bounds.max_bytes {
            return Err(Stop::MemoryLimit);
        }
        self.since += 1;
        if self.since >= CHECK_EVERY {
            self.since = 0;
            if self.bounds.interrupted() {
                return Err(Stop::Interrupted);
            }
        }
        Ok(())
    }
}

/// Marking storage of one width.
#[derive(Debug, Clone)]
pub(crate) enum Cells {
    /// One bit per place (safe nets with at most 63 places), one `u64` per state.
    Bits(Vec<u64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
}

/// The explored part of the reachability graph.
#[derive(Debug, Clone)]
pub struct Graph {
    pub(crate) width: usize,
    pub(crate) cells: Cells,
    /// Predecessor on a shortest path from the initial marking (`u32::MAX` for the root).
    pub parent: Vec<u32>,
    /// Transition fired from `parent` to reach the state.
    pub via: Vec<u32>,
    /// States where no transition is enabled, in BFS order.
    pub dead: Vec<u32>,
    /// Transitions enabled in at least one explored state.
    pub enabled_ever: Vec<bool>,
    /// Why exploration stopped (`Stop::None` when complete).
    pub stop: Stop,
    /// Number of firings explored (edges, including those to known states).
    pub edges: usize,
    /// With `record_edges`: successors of state `i` are `succ[succ_off[i]..succ_off[i+1]]`.
    pub succ_off: Vec<u32>,
    /// Successor state indices (see `succ_off`).
    pub succ: Vec<u32>,
}

impl Graph {
    /// Number of stored states.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// Whether no state was stored (only when the initial marking itself overflows).
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The marking of state `i`.
    pub fn marking(&self, i: u32) -> Vec<u32> {
        let r = i as usize * self.width..(i as usize + 1) * self.width;
        match &self.cells {
            Cells::Bits(v) => (0..self.width)
                .map(|p| ((v[i as usize] >> p) & 1) as u32)
                .collect(),
            Cells::U8(v) => v[r].iter().map(|&c| u32::from(c)).collect(),
            Cells::U16(v) => v[r].iter().map(|&c| u32::from(c)).collect(),
        }
    }

    /// The marking of state `i` into `out` (no allocation once `out` has room).
    pub fn marking_into(&self, i: u32, out: &mut Vec<u32>) {
        out.clear();
        let r = i as usize * self.width..(i as usize + 1) * self.width;
        match &self.cells {
            Cells::Bits(v) => {
                out.extend((0..self.width).map(|p| ((v[i as usize] >> p) & 1) as u32))
            }
            Cells::U8(v) => out.extend(v[r].iter().map(|&c| u32::from(c))),
            Cells::U16(v) => out.extend(v[r].iter().map(|&c| u32::from(c))),
        }
    }

    /// Transitions fired from the initial marking to state `i`, in order.
    pub fn path(&self, i: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut s = i;
        while let Some(&p) = self.parent.get(s as usize) {
            if p == u32::MAX {
                break;
            }
            out.push(self.via[s as usize]);
            s = p;
        }
        out.reverse();
        out
    }
}

/// A marking cell type.
trait Cell: Copy + Eq + Default {
    const MAX: u32;
    fn get(self) -> u32;
    fn make(v: u32) -> Self;
    fn wrap(v: Vec<Self>) -> Cells;
}

impl Cell for u8 {
    const MAX: u32 = u8::MAX as u32;
    #[inline(always)]
    fn get(self) -> u32 {
        u32::from(self)
    }
    #[inline(always)]
    fn make(v: u32) -> Self {
        v as u8
    }
    fn wrap(v: Vec<Self>) -> Cells {
        Cells::U8(v)
    }
}

impl Cell for u16 {
    const MAX: u32 = u16::MAX as u32;
    #[inline(always)]
    fn get(self) -> u32 {
        u32::from(self)
    }
    #[inline(always)]
    fn make(v: u32) -> Self {
        v as u16
    }
    fn wrap(v: Vec<Self>) -> Cells {
        Cells::U16(v)
    }
}

/// Random-looking odd coefficient of place `p` for the linear marking hash (SplitMix64).
pub(crate) fn coefficient(p: usize) -> u64 {
    let mut z = (p as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) | 1
}

/// Finaliser turning the linear hash into a well-mixed table hash (MurmurHash3 fmix64).
#[inline(always)]
pub(crate) fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

/// The net flattened for the hot loop.
struct Flat {
    width: usize,
    pre_off: Vec<usize>,
    pre: Vec<(usize, u32)>,
    post_off: Vec<usize>,
    post: Vec<(usize, u32)>,
    delta: Vec<u64>,
}

impl Flat {
    fn new(net: &PtNet) -> Flat {
        let mut f = Flat {
            width: net.places.len(),
            pre_off: vec![0],
            pre: Vec::new(),
            post_off: vec![0],
            post: Vec::new(),
            delta: Vec::new(),
        };
        for t in &net.transitions {
            let mut d = 0u64;
            for &(p, w) in &t.pre {
                f.pre.push((p as usize, w));
                d = d.wrapping_sub(coefficient(p as usize).wrapping_mul(u64::from(w)));
            }
            for &(p, w) in &t.post {
                f.post.push((p as usize, w));
                d = d.wrapping_add(coefficient(p as usize).wrapping_mul(u64::from(w)));
            }
            f.pre_off.push(f.pre.len());
            f.post_off.push(f.post.len());
            f.delta.push(d);
        }
        f
    }
}

/// Explores the reachability graph of `net` breadth-first, storing at most `max_states`
/// markings. With `record_edges`, the successor lists are kept too.
pub fn explore(net: &PtNet, max_states: usize, record_edges: bool) -> Graph {
    explore_within(net, &Bounds::states(max_states), record_edges)
}

/// [`explore`] within `bounds` (markings, bytes, the caller's interrupt).
pub fn explore_within(net: &PtNet, bounds: &Bounds, record_edges: bool) -> Graph {
    if let Some(g) = crate::explore_safe::run(net, bounds, record_edges) {
        return g;
    }
    let flat = Flat::new(net);
    match run::<u8>(net, &flat, bounds, record_edges, false) {
        Ok(g) => g,
        Err(_) => match run::<u16>(net, &flat, bounds, record_edges, true) {
            Ok(g) => g,
            Err(p) => Graph {
                width: flat.width,
                cells: Cells::U16(Vec::new()),
                parent: Vec::new(),
                via: Vec::new(),
                dead: Vec::new(),
                enabled_ever: vec![false; net.transitions.len()],
                stop: Stop::Overflow(p),
                edges: 0,
                succ_off: vec![0],
                succ: Vec::new(),
            },
        },
    }
}

/// One exploration with cell type `T`. `Err(place)` means a count did not fit and the caller
/// should retry wider; with `skip_overflow` such successors are dropped instead (only the
/// initial marking not fitting is then an error).
fn run<T: Cell>(
    net: &PtNet,
    f: &Flat,
    bounds: &Bounds,
    record_edges: bool,
    skip_overflow: bool,
) -> Result<Graph, u32> {
    let w = f.width;
    let nt = f.delta.len();
    let mut arena: Vec<T> = Vec::new();
    let mut hashes: Vec<u64> = Vec::new();
    let mut parent: Vec<u32> = Vec::new();
    let mut via: Vec<u32> = Vec::new();
    let mut dead = Vec::new();
    let mut enabled_ever = vec![false; nt];
    let mut succ_off = vec![0u32];
    let mut succ = Vec::new();
    let mut stop = Stop::None;
    let mut edges = 0usize;
    let mut table: HashTable<u32> = HashTable::new();

    let mut h0 = 0u64;
    for (p, &m) in net.initial.iter().enumerate() {
        if m > T::MAX {
            return Err(p as u32);
        }
        arena.push(T::make(m));
        h0 = h0.wrapping_add(coefficient(p).wrapping_mul(u64::from(m)));
    }
    hashes.push(h0);
    parent.push(u32::MAX);
    via.push(u32::MAX);
    table.insert_unique(mix(h0), 0, |_| mix(h0));

    let mut guard = bounds.guard();
    let mut cur: Vec<T> = vec![T::default(); w];
    let mut next: Vec<T> = vec![T::default(); w];
    let mut i = 0usize;
    #[allow(clippy::needless_range_loop)] // `t` indexes four parallel arrays
    'states: while i < parent.len() {
        cur.copy_from_slice(&arena[i * w..(i + 1) * w]);
        let h = hashes[i];
        let mut any = false;
        't: for t in 0..nt {
            let pre = &f.pre[f.pre_off[t]..f.pre_off[t + 1]];
            for &(p, wt) in pre {
                if cur[p].get() < wt {
                    continue 't;
                }
            }
            any = true;
            enabled_ever[t] = true;
            edges += 1;
            next.copy_from_slice(&cur);
            for &(p, wt) in pre {
                next[p] = T::make(next[p].get() - wt);
            }
            for &(p, wt) in &f.post[f.post_off[t]..f.post_off[t + 1]] {
                let v = next[p].get() + wt;
                if v > T::MAX {
                    if skip_overflow {
                        if stop == Stop::None {
                            stop = Stop::Overflow(p as u32);
                        }
                        continue 't;
                    }
                    return Err(p as u32);
                }
                next[p] = T::make(v);
            }
            let h2 = h.wrapping_add(f.delta[t]);
            let n = parent.len();
            let table_bytes = table.capacity() * 5;
            let entry = table.entry(
                mix(h2),
                |&j| {
                    hashes[j as usize] == h2
                        && arena[j as usize * w..(j as usize + 1) * w] == next[..]
                },
                |&j| mix(hashes[j as usize]),
            );
            let j = match entry {
                hashbrown::hash_table::Entry::Occupied(o) => *o.get(),
                hashbrown::hash_table::Entry::Vacant(v) => {
                    let bytes = (arena.len() + w) * size_of::<T>()
                        + parent.len() * (8 + 4 + 4)
                        + table_bytes
                        + (succ.len() + succ_off.len()) * 4;
                    if let Err(s) = guard.admit(n, bytes) {
                        stop = s;
                        break 'states;
                    }
                    v.insert(n as u32);
                    arena.extend_from_slice(&next);
                    hashes.push(h2);
                    parent.push(i as u32);
                    via.push(t as u32);
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
    Ok(Graph {
        width: w,
        cells: T::wrap(arena),
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
