//! Compiles a plan into a [`PtNet`] following the rules in the crate documentation.
//!
//! The compilation is total: an invalid plan (unknown events, duplicate inputs) still gives a
//! net, so analysis never panics on what validation would reject; undeclared events become
//! plain internal places.

use std::collections::{HashMap, HashSet};

use weft_core::finding::{event_ptr, step_ptr};
use weft_core::{Consume, EventKind, OnFail, Plan};

use crate::fold::{Truth, truth};
use crate::net::{NetKind, Place, PtNet, Role, Transition};

/// Conditional emits per step enumerated as transition variants; more are deferred.
pub const MAX_ENUMERATED_WHENS: usize = 6;

/// How to compile a plan into a net.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    /// How many tokens the environment may put on each non-initial `kind: input` event.
    pub env_tokens: u32,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { env_tokens: 1 }
    }
}

/// Keeps net names unique (a plan event may well be called `env:x`).
#[derive(Default)]
struct Names(HashSet<String>);

impl Names {
    fn fresh(&mut self, base: String) -> String {
        let mut name = base.clone();
        let mut n = 2;
        while self.0.contains(&name) {
            name = format!("{base}#{n}");
            n += 1;
        }
        self.0.insert(name.clone());
        name
    }
}

impl PtNet {
    /// Compiles `plan` into a P/T net (see the crate documentation for the rules).
    pub fn from_plan(plan: &Plan, opts: &CompileOptions) -> PtNet {
        let kind = match plan.graph_type {
            weft_core::GraphType::Acyclic => NetKind::Acyclic,
            weft_core::GraphType::Reactive => NetKind::Reactive,
        };
        let mut net = PtNet::new(plan.plan_name.clone(), kind);
        let mut place_names = Names::default();
        let mut trans_names = Names::default();

        // Every event name the plan mentions, declared ones first.
        let mut events: Vec<&str> = plan.events.keys().map(String::as_str).collect();
        let mut known: HashSet<&str> = events.iter().copied().collect();
        let mut referenced: Vec<&str> = plan.initial_events();
        for step in plan.steps.values() {
            referenced.extend(step.on.iter().map(String::as_str));
            referenced.extend(step.emits.iter().map(|e| e.event()));
            if let Some(OnFail::Emit(e)) = &step.on_fail {
                referenced.push(e);
            }
        }
        for e in referenced {
            if known.insert(e) {
                events.push(e);
            }
        }

        // Consumers of each event, in step order, each step once.
        let mut consumers: HashMap<&str, Vec<&str>> = HashMap::new();
        for (name, step) in &plan.steps {
            let mut seen = HashSet::new();
            for e in &step.on {
                if seen.insert(e.as_str()) {
                    consumers.entry(e.as_str()).or_default().push(name.as_str());
                }
            }
        }

        // Places: one per event, or one per consumer for broadcast events with ≥2 consumers.
        // Outputs: declared ones if the plan declares any, else events no step consumes.
        let declares_outputs = plan
            .events
            .values()
            .any(|d| d.kind == Some(EventKind::Output));
        let mut places_of: HashMap<&str, Vec<u32>> = HashMap::new();
        let mut copy_of: HashMap<(&str, &str), u32> = HashMap::new();
        for &e in &events {
            let def = plan.events.get(e);
            let ev_kind = def.and_then(|d| d.kind);
            let exclusive = def.is_some_and(|d| d.consume == Consume::Exclusive);
            let cons = consumers.get(e).map(Vec::as_slice).unwrap_or(&[]);
            let template = Place {
                name: String::new(),
                is_output: ev_kind == Some(EventKind::Output)
                    || (cons.is_empty() && !declares_outputs),
                is_input: ev_kind == Some(EventKind::Input),
                is_env: false,
                event: Some(e.to_string()),
            };
            if exclusive || cons.len() <= 1 {
                let name = place_names.fresh(e.to_string());
                let p = net.add_place(Place { name, ..template });
                places_of.insert(e, vec![p]);
                for &s in cons {
                    copy_of.insert((e, s), p);
                }
            } else {
                let mut ps = Vec::new();
                for &s in cons {
                    let name = place_names.fresh(format!("{e}[{s}]"));
                    let p = net.add_place(Place {
                        name,
                        ..template.clone()
                    });
                    copy_of.insert((e, s), p);
                    ps.push(p);
                }
                places_of.insert(e, ps);
            }
        }
        let emit_arcs = |e: &str| -> Vec<(u32, u32)> {
            places_of
                .get(e)
                .map(|ps| ps.iter().map(|&p| (p, 1)).collect())
                .unwrap_or_default()
        };

        // Initial marking, and budgeted environment transitions for other input events.
        let initial: Vec<&str> = plan.initial_events();
        for e in &initial {
            for &(p, _) in &emit_arcs(e) {
                net.initial[p as usize] += 1;
            }
        }
        for &e in &events {
            let is_input = plan.events.get(e).and_then(|d| d.kind) == Some(EventKind::Input);
            if !is_input || initial.contains(&e) {
                continue;
            }
            let budget = net.add_place(Place {
                name: place_names.fresh(format!("env:{e}")),
                is_output: false,
                is_input: true,
                is_env: true,
                event: Some(e.to_string()),
            });
            net.initial[budget as usize] = opts.env_tokens;
            net.add_transition(Transition {
                name: trans_names.fresh(format!("env:{e}")),
                step: None,
                pointer: event_ptr(e),
                guarded: false,
                role: Role::Environment,
                pre: vec![(budget, 1)],
                post: emit_arcs(e),
            });
            net.notes.push(format!(
                "input event `{e}`: the environment may put up to {} token(s) on it (transition `env:{e}`), so the analysis covers at most that many arrivals",
                opts.env_tokens
            ));
        }

        // Steps.
        for (sname, step) in &plan.steps {
            let mut pre = Vec::new();
            let mut seen = HashSet::new();
            for e in &step.on {
                if seen.insert(e.as_str())
                    && let Some(&p) = copy_of.get(&(e.as_str(), sname.as_str()))
                {
                    pre.push((p, 1));
                }
            }
            let pointer = step_ptr(sname, "");
            // Constant conditions decide instead of being over-approximated.
            let guard = step.guard.as_deref().map_or(Truth::Always, truth);
            let has_guard = guard == Truth::Maybe;
            if guard == Truth::Never {
                // Never enabled: an input place nothing produces keeps every variant dead.
                let never = net.add_place(Place {
                    name: place_names.fresh(format!("{sname}.guard=false")),
                    is_output: false,
                    is_input: false,
                    is_env: false,
                    event: None,
                });
                pre.push((never, 1));
                net.notes.push(format!(
                    "step `{sname}`: its guard is constant and never true, so the step can never fire"
                ));
            }
            let mut unconditional = Vec::new();
            let mut conditional = Vec::new();
            for emit in &step.emits {
                match emit.when().map(truth) {
                    None | Some(Truth::Always) => unconditional.extend(emit_arcs(emit.event())),
                    Some(Truth::Maybe) => conditional.push(emit.event()),
                    Some(Truth::Never) => net.notes.push(format!(
                        "step `{sname}`: the `when` of its emit of `{}` is constant and never true, so it never emits it",
                        emit.event()
                    )),
                }
            }
            let base = Transition {
                name: String::new(),
                step: Some(sname.clone()),
                pointer: pointer.clone(),
                guarded: has_guard || !conditional.is_empty(),
                role: Role::Step,
                pre: pre.clone(),
                post: Vec::new(),
            };
            if conditional.len() <= MAX_ENUMERATED_WHENS {
                for mask in 0u32..(1 << conditional.len()) {
                    let mut post = unconditional.clone();
                    let mut label = Vec::new();
                    for (i, e) in conditional.iter().enumerate() {
                        if mask & (1 << i) != 0 {
                            post.extend(emit_arcs(e));
                            label.push(format!("+{e}"));
                        } else {
                            label.push(format!("-{e}"));
                        }
                    }
                    let name = if conditional.is_empty() {
                        sname.clone()
                    } else {
                        format!("{sname}[{}]", label.join(","))
                    };
                    net.add_transition(Transition {
                        name: trans_names.fresh(name),
                        post,
                        ..base.clone()
                    });
                }
            } else {
                // Too many to enumerate: each conditional emit becomes a pending token that a
                // separate transition either delivers or drops, later and in any order.
                let mut post = unconditional.clone();
                for (i, e) in conditional.iter().enumerate() {
                    let pending = net.add_place(Place {
                        name: place_names.fresh(format!("{sname}.when[{i}]")),
                        is_output: false,
                        is_input: false,
                        is_env: false,
                        event: None,
                    });
                    post.push((pending, 1));
                    for (verb, arcs) in [("emit", emit_arcs(e)), ("skip", Vec::new())] {
                        net.add_transition(Transition {
                            name: trans_names.fresh(format!("{sname}/{verb}:{e}")),
                            step: Some(sname.clone()),
                            pointer: pointer.clone(),
                            guarded: true,
                            role: Role::DeferredEmit,
                            pre: vec![(pending, 1)],
                            post: arcs,
                        });
                    }
                }
                net.add_transition(Transition {
                    name: trans_names.fresh(sname.clone()),
                    post,
                    ..base.clone()
                });
                net.notes.push(format!(
                    "step `{sname}` has {} conditional emits (more than {MAX_ENUMERATED_WHENS}): each is delivered or dropped by its own transition after the step fires, which over-approximates the interleavings",
                    conditional.len()
                ));
            }

            // Failure handled by the plan: `<step>.failed` listener, else `emit:X`, else continue.
            let failed = format!("{sname}.failed");
            let target: Option<Option<&str>> = if consumers.contains_key(failed.as_str()) {
                Some(Some(failed.as_str()))
            } else {
                match &step.on_fail {
                    Some(OnFail::Emit(x)) => Some(Some(x.as_str())),
                    Some(OnFail::Continue) => Some(None),
                    _ => None,
                }
            };
            if let Some(target) = target {
                net.add_transition(Transition {
                    name: trans_names.fresh(format!("{sname}[failed]")),
                    guarded: has_guard,
                    role: Role::Failure,
                    post: target.map(emit_arcs).unwrap_or_default(),
                    ..base.clone()
                });
            }
            // A denial (policy or person) goes to a `<step>.denied` listener first.
            let denied = format!("{sname}.denied");
            if consumers.contains_key(denied.as_str()) {
                net.add_transition(Transition {
                    name: trans_names.fresh(format!("{sname}[denied]")),
                    guarded: has_guard,
                    role: Role::Denial,
                    post: emit_arcs(denied.as_str()),
                    ..base.clone()
                });
            }
        }
        net
    }
}
