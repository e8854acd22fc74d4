//! The place/transition net that every analysis runs on.
//!
//! A plan is compiled into a `PtNet` (see `compile.rs`), and PNML files from other Petri-net
//! tools are imported into one (see `pnml.rs`), so the analyses and exports never look at the
//! plan model directly. Arcs are sparse `(place index, weight)` lists sorted by place.

use serde::Serialize;

/// Where a net came from; decides which final markings count as proper and which findings
/// are errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetKind {
    /// Compiled from an acyclic plan: soundness applies, deadlocks are errors.
    Acyclic,
    /// Compiled from a reactive plan: soundness does not apply, findings are warnings.
    Reactive,
    /// Imported from PNML: deadlocks are errors; classical soundness against the final
    /// marking (or the sink of a workflow net), cycles allowed.
    Imported,
}

/// What a transition stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A step firing normally (one variant per subset of conditional emits).
    Step,
    /// A step whose action failed, handled by `<step>.failed`, `on_fail: emit:X` or `continue`.
    Failure,
    /// A step whose call was denied (by a policy or a person) before it ran, handled by a
    /// `<step>.denied` listener.
    Denial,
    /// The environment putting a token on a `kind: input` event (budgeted).
    Environment,
    /// A deferred conditional emit of a step with too many conditional emits to enumerate.
    DeferredEmit,
    /// A transition of an imported net.
    Plain,
}

/// A place: an event, or one consumer's copy of a broadcast event, or an environment budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Place {
    /// Unique name in the net (the event name, `event[step]` for broadcast copies).
    pub name: String,
    /// A final result: declared `kind: output`, or consumed by no step.
    pub is_output: bool,
    /// The event is `kind: input` (tokens arrive from outside).
    pub is_input: bool,
    /// A budget place of an environment transition, not an event.
    pub is_env: bool,
    /// The plan event this place stands for, if any.
    pub event: Option<String>,
}

/// A transition: a step variant, an environment transition, or an imported transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    /// Unique name in the net.
    pub name: String,
    /// The plan step this transition models, if any.
    pub step: Option<String>,
    /// JSON pointer into the plan (`/steps/<name>`, `/events/<name>`), or the PNML id.
    pub pointer: String,
    /// Its behaviour was over-approximated (a guard assumed "may hold", or a `when` chosen).
    pub guarded: bool,
    /// What the transition stands for.
    pub role: Role,
    /// Input arcs: `(place index, weight)`, sorted by place, weights ≥ 1.
    pub pre: Vec<(u32, u32)>,
    /// Output arcs: `(place index, weight)`, sorted by place, weights ≥ 1.
    pub post: Vec<(u32, u32)>,
}

/// A place/transition net with an initial marking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PtNet {
    /// Name of the plan or net.
    pub name: String,
    /// Where the net came from.
    pub kind: NetKind,
    /// Places, indexed by position.
    pub places: Vec<Place>,
    /// Transitions, indexed by position.
    pub transitions: Vec<Transition>,
    /// Tokens per place in the initial marking (same length as `places`).
    pub initial: Vec<u32>,
    /// The marking that counts as completion, when the net defines one: a PNML file's
    /// `<finalmarkings>`, or `[sink]` of a workflow net. `None` for plan nets, which complete
    /// on their outputs (see the crate documentation).
    pub final_marking: Option<Vec<u32>>,
    /// What the compilation over-approximated or added (environment budgets, caps), in words.
    pub notes: Vec<String>,
}

impl PtNet {
    /// An empty net of the given kind.
    pub fn new(name: impl Into<String>, kind: NetKind) -> Self {
        PtNet {
            name: name.into(),
            kind,
            places: Vec::new(),
            transitions: Vec::new(),
            initial: Vec::new(),
            final_marking: None,
            notes: Vec::new(),
        }
    }

    /// Adds a place with no initial tokens and returns its index.
    pub fn add_place(&mut self, place: Place) -> u32 {
        self.places.push(place);
        self.initial.push(0);
        (self.places.len() - 1) as u32
    }

    /// Adds a transition, normalising its arcs (merged per place, sorted, zero weights dropped).
    pub fn add_transition(&mut self, mut t: Transition) -> u32 {
        t.pre = normalize_arcs(std::mem::take(&mut t.pre));
        t.post = normalize_arcs(std::mem::take(&mut t.post));
        self.transitions.push(t);
        (self.transitions.len() - 1) as u32
    }

    /// Is transition `t` enabled in `marking`?
    pub fn enabled(&self, t: usize, marking: &[u32]) -> bool {
        self.transitions[t]
            .pre
            .iter()
            .all(|&(p, w)| marking.get(p as usize).is_some_and(|&m| m >= w))
    }

    /// Fires transition `t` in `marking`; `None` when it is not enabled or a count overflows.
    pub fn fire(&self, t: usize, marking: &[u32]) -> Option<Vec<u32>> {
        if !self.enabled(t, marking) {
            return None;
        }
        let mut next = marking.to_vec();
        for &(p, w) in &self.transitions[t].pre {
            next[p as usize] -= w;
        }
        for &(p, w) in &self.transitions[t].post {
            let slot = next.get_mut(p as usize)?;
            *slot = slot.checked_add(w)?;
        }
        Some(next)
    }

    /// Index of the transition with this name.
    pub fn transition_index(&self, name: &str) -> Option<usize> {
        self.transitions.iter().position(|t| t.name == name)
    }

    /// Index of the place with this name.
    pub fn place_index(&self, name: &str) -> Option<usize> {
        self.places.iter().position(|p| p.name == name)
    }

    /// The name a witness uses for transition `t`: its step, else its own name.
    pub fn witness_label(&self, t: usize) -> String {
        let tr = &self.transitions[t];
        match (tr.role, &tr.step) {
            (Role::Step | Role::Failure | Role::Denial, Some(s)) => s.clone(),
            _ => tr.name.clone(),
        }
    }

    /// Is this a workflow net (exactly one source place, one sink place, every node on a path
    /// from the source to the sink)? `Ok((source, sink))`, or what breaks the definition.
    pub fn workflow_shape(&self) -> Result<(usize, usize), NotWorkflow> {
        let np = self.places.len();
        let mut has_in = vec![false; np];
        let mut has_out = vec![false; np];
        for t in &self.transitions {
            for &(p, _) in &t.pre {
                has_out[p as usize] = true;
            }
            for &(p, _) in &t.post {
                has_in[p as usize] = true;
            }
        }
        let sources: Vec<usize> = (0..np).filter(|&p| !has_in[p]).collect();
        let sinks: Vec<usize> = (0..np).filter(|&p| !has_out[p]).collect();
        let mut off_path = Vec::new();
        if let ([i], [o]) = (sources.as_slice(), sinks.as_slice()) {
            let fwd = self.reach(*i, true);
            let bwd = self.reach(*o, false);
            for (n, (f, b)) in fwd.iter().zip(&bwd).enumerate() {
                if !(f & b) {
                    off_path.push(n);
                }
            }
            if off_path.is_empty() {
                return Ok((*i, *o));
            }
        }
        Err(NotWorkflow {
            sources,
            sinks,
            off_path,
        })
    }

    /// Nodes (places `0..P`, then transitions `P..P+T`) reachable from place `from`, along
    /// the arcs (`forward`) or against them.
    fn reach(&self, from: usize, forward: bool) -> Vec<bool> {
        let np = self.places.len();
        let n = np + self.transitions.len();
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (ti, t) in self.transitions.iter().enumerate() {
            for &(p, _) in &t.pre {
                let (a, b) = (p as usize, np + ti);
                if forward {
                    succ[a].push(b)
                } else {
                    succ[b].push(a)
                }
            }
            for &(p, _) in &t.post {
                let (a, b) = (np + ti, p as usize);
                if forward {
                    succ[a].push(b)
                } else {
                    succ[b].push(a)
                }
            }
        }
        let mut seen = vec![false; n];
        seen[from] = true;
        let mut stack = vec![from];
        while let Some(v) = stack.pop() {
            for &w in &succ[v] {
                if !seen[w] {
                    seen[w] = true;
                    stack.push(w);
                }
            }
        }
        seen
    }

    /// Names of nodes given as indices into places `0..P`, then transitions `P..P+T`.
    pub fn node_name(&self, n: usize) -> &str {
        let np = self.places.len();
        if n < np {
            &self.places[n].name
        } else {
            &self.transitions[n - np].name
        }
    }

    /// Does the net's place/transition graph contain a cycle?
    pub fn has_cycle(&self) -> bool {
        // Nodes: places 0..P, transitions P..P+T. Iterative three-colour DFS.
        let np = self.places.len();
        let n = np + self.transitions.len();
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (ti, t) in self.transitions.iter().enumerate() {
            for &(p, _) in &t.pre {
                succ[p as usize].push(np + ti);
            }
            for &(p, _) in &t.post {
                succ[np + ti].push(p as usize);
            }
        }
        let mut colour = vec![0u8; n];
        for root in 0..n {
            if colour[root] != 0 {
                continue;
            }
            let mut stack = vec![(root, 0usize)];
            colour[root] = 1;
            while let Some(&mut (v, ref mut i)) = stack.last_mut() {
                if let Some(&w) = succ[v].get(*i) {
                    *i += 1;
                    match colour[w] {
                        0 => {
                            colour[w] = 1;
                            stack.push((w, 0));
                        }
                        1 => return true,
                        _ => {}
                    }
                } else {
                    colour[v] = 2;
                    stack.pop();
                }
            }
        }
        false
    }
}

/// Why a net is not a workflow net (see [`PtNet::workflow_shape`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotWorkflow {
    /// Places no transition produces into.
    pub sources: Vec<usize>,
    /// Places no transition consumes from.
    pub sinks: Vec<usize>,
    /// With one source and one sink: nodes (places `0..P`, transitions `P..P+T`) not on a
    /// path from the source to the sink.
    pub off_path: Vec<usize>,
}

fn normalize_arcs(mut arcs: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    arcs.sort_unstable_by_key(|a| a.0);
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(arcs.len());
    for (p, w) in arcs {
        if w == 0 {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.0 == p => last.1 = last.1.saturating_add(w),
            _ => out.push((p, w)),
        }
    }
    out
}
