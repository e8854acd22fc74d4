//! The behavioural checks, each turning the explored graph into findings: deadlocks, dead
//! steps, option to complete, proper completion and unbounded events.
//!
//! Two notions of completion (see the crate documentation): a net with a final marking (an
//! imported workflow net) completes exactly in that marking, and classical proper completion
//! forbids any reachable marking that covers it with more tokens; a plan net completes in a
//! dead marking with a token on an output event, and proper completion forbids tokens left
//! on other events there.

use std::collections::{BTreeSet, HashSet};

use weft_core::{Code, Finding, Severity};

use crate::cover::Pump;
use crate::describe::{
    marked, place_label, place_pointer, quoted, sequence, uses_guards, waiting, waiting_text,
    witness,
};
use crate::explore::Graph;
use crate::net::{NetKind, PtNet, Role};

/// At most this many distinct deadlocks are reported (one per set of marked places).
const MAX_DEADLOCKS: usize = 5;

const GUARD_NOTE: &str = " This relies on guards and `when` conditions being able to go either way (they were over-approximated).";

/// Does `m` mark an output place?
fn has_output(net: &PtNet, m: &[u32]) -> bool {
    m.iter()
        .enumerate()
        .any(|(p, &k)| k > 0 && net.places[p].is_output)
}

/// Tokens on places that are neither outputs nor environment budgets.
fn has_leftovers(net: &PtNet, m: &[u32]) -> bool {
    m.iter()
        .enumerate()
        .any(|(p, &k)| k > 0 && !net.places[p].is_output && !net.places[p].is_env)
}

/// The final marking, when completion is classical (imported nets that have one).
pub(crate) fn classical_final(net: &PtNet) -> Option<&[u32]> {
    match net.kind {
        NetKind::Imported => net.final_marking.as_deref(),
        NetKind::Acyclic | NetKind::Reactive => None,
    }
}

/// Does `m` cover the final marking `fm` with more tokens?
fn covers_strictly(m: &[u32], fm: &[u32]) -> bool {
    m != fm && m.iter().zip(fm).all(|(a, b)| a >= b)
}

/// A marking that is a proper end: the final marking when the net has one (classical);
/// for reactive plans, nothing left waiting; otherwise some output place holds a token.
pub(crate) fn is_final(net: &PtNet, m: &[u32]) -> bool {
    if let Some(fm) = classical_final(net) {
        return m == fm;
    }
    match net.kind {
        NetKind::Reactive => !has_leftovers(net, m),
        NetKind::Acyclic | NetKind::Imported => has_output(net, m),
    }
}

/// A001: dead markings that are not final, shortest witness first. Returns the findings and
/// the states they name.
pub(crate) fn deadlocks(net: &PtNet, g: &Graph, severity: Severity) -> (Vec<Finding>, Vec<u32>) {
    let mut out = Vec::new();
    let mut states = Vec::new();
    let mut shapes: HashSet<BTreeSet<usize>> = HashSet::new();
    let mut more = 0usize;
    for &s in &g.dead {
        let m = g.marking(s);
        if is_final(net, &m) {
            continue;
        }
        let shape: BTreeSet<usize> = (0..m.len())
            .filter(|&p| m[p] > 0 && !net.places[p].is_env)
            .collect();
        if !shapes.insert(shape) {
            continue;
        }
        if out.len() >= MAX_DEADLOCKS {
            more += 1;
            continue;
        }
        let path = g.path(s);
        let labels = witness(net, &path);
        let guards = uses_guards(net, &path);
        let ws = waiting(net, &m);
        let tokens = marked(net, &m);
        let mut msg = format!("Deadlock: {}, nothing can fire", sequence(&labels));
        if classical_final(net).is_some() {
            msg.push_str(" and the final marking is not reached");
        } else if net.kind != NetKind::Reactive {
            msg.push_str(" and no output event holds a token");
        }
        if ws.is_empty() {
            if tokens.is_empty() {
                msg.push_str("; no tokens are left anywhere.");
            } else {
                msg.push_str(&format!(
                    "; tokens sit on {} with no step to take them.",
                    tokens.join(", ")
                ));
            }
        } else {
            msg.push_str(&format!("; {}.", waiting_text(&ws)));
        }
        if guards {
            msg.push_str(GUARD_NOTE);
        }
        let pointer = ws.first().map(|w| w.pointer.clone()).unwrap_or_else(|| {
            (0..m.len())
                .find(|&p| m[p] > 0)
                .map(|p| place_pointer(net, p))
                .unwrap_or_default()
        });
        let hint = match ws.first() {
            Some(w) => format!(
                "Make sure {} is always produced before `{}` needs it on every path (check conditional emits and exclusive events), or remove it from `{}`'s `on`.",
                quoted(&w.missing),
                w.who,
                w.who
            ),
            None => "Make every path end by emitting an output event (declared `kind: output`, or consumed by no step).".to_string(),
        };
        out.push(
            Finding::new(Code::Deadlock, severity, pointer, msg)
                .hint(hint)
                .witness(labels)
                .on_guards(guards),
        );
        states.push(s);
    }
    if more > 0
        && let Some(last) = out.last_mut()
    {
        last.message.push_str(&format!(
            " ({more} more dead markings of other shapes were found.)"
        ));
    }
    (out, states)
}

/// A002: steps (or imported transitions) enabled in no reachable marking.
pub(crate) fn dead_steps(net: &PtNet, g: &Graph) -> Vec<Finding> {
    let mut alive: HashSet<&str> = HashSet::new();
    let mut order: Vec<(&str, &str)> = Vec::new();
    for (ti, t) in net.transitions.iter().enumerate() {
        if t.role == Role::Environment {
            continue;
        }
        let who = t.step.as_deref().unwrap_or(&t.name);
        if g.enabled_ever[ti] {
            alive.insert(who);
        }
        if !order.iter().any(|(w, _)| *w == who) {
            order.push((who, &t.pointer));
        }
    }
    order
        .into_iter()
        .filter(|(who, _)| !alive.contains(who))
        .map(|(who, pointer)| {
            let what = if net.kind == NetKind::Imported { "Transition" } else { "Step" };
            Finding::new(
                Code::DeadStep,
                Severity::Warning,
                pointer,
                format!("{what} `{who}` can never fire: no reachable marking provides all of its inputs."),
            )
            .hint("Check that every event in its `on` list is emitted on some path that can run together with the others, or remove the step.")
        })
        .collect()
}

/// A004 and A005 on a complete graph with recorded edges. `reported` are deadlock states
/// already named, so the point of no return is not reported twice.
pub(crate) fn soundness(net: &PtNet, g: &Graph, reported: &[u32]) -> Vec<Finding> {
    let n = g.len();
    let mut out = Vec::new();
    // Reverse edges (CSR by counting), then backward BFS from final markings.
    let mut rev_off = vec![0u32; n + 1];
    for &t in &g.succ {
        rev_off[t as usize + 1] += 1;
    }
    for i in 0..n {
        rev_off[i + 1] += rev_off[i];
    }
    let mut fill = rev_off.clone();
    let mut rev = vec![0u32; g.succ.len()];
    for s in 0..n.min(g.succ_off.len().saturating_sub(1)) {
        for &t in &g.succ[g.succ_off[s] as usize..g.succ_off[s + 1] as usize] {
            rev[fill[t as usize] as usize] = s as u32;
            fill[t as usize] += 1;
        }
    }
    let mut ok = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut improper: Option<u32> = None;
    if let Some(fm) = classical_final(net) {
        // Classical: the final marking may be live, and any marking covering it with more
        // tokens is improper (the first in BFS order has the shortest witness).
        let mut m = Vec::with_capacity(fm.len());
        for s in 0..n as u32 {
            g.marking_into(s, &mut m);
            if m == fm {
                ok[s as usize] = true;
                stack.push(s);
            } else if improper.is_none() && covers_strictly(&m, fm) {
                improper = Some(s);
            }
        }
    } else {
        for &s in &g.dead {
            let m = g.marking(s);
            if is_final(net, &m) {
                ok[s as usize] = true;
                stack.push(s);
                if improper.is_none() && has_leftovers(net, &m) {
                    improper = Some(s);
                }
            }
        }
    }
    while let Some(s) = stack.pop() {
        for &p in &rev[rev_off[s as usize] as usize..rev_off[s as usize + 1] as usize] {
            if !ok[p as usize] {
                ok[p as usize] = true;
                stack.push(p);
            }
        }
    }
    if let Some(s) = (0..n as u32).find(|&s| !ok[s as usize])
        && !reported.contains(&s)
    {
        {
            let path = g.path(s);
            let labels = witness(net, &path);
            let guards = uses_guards(net, &path);
            let goal = match classical_final(net) {
                Some(fm) => format!("firing sequence can reach the final marking ({})", marked(net, fm).join(", ")),
                None => "sequence of steps can reach a completed marking (an output event with a token and nothing left to fire)".to_string(),
            };
            let mut msg = format!(
                "No option to complete: {}, no {goal}; tokens are on {}.",
                sequence(&labels),
                marked(net, &g.marking(s)).join(", ")
            );
            if guards {
                msg.push_str(GUARD_NOTE);
            }
            let pointer = path
                .last()
                .map(|&t| net.transitions[t as usize].pointer.clone())
                .unwrap_or_default();
            out.push(
                Finding::new(Code::NoOptionToComplete, Severity::Error, pointer, msg)
                    .hint("Every choice (conditional emit, exclusive event, failure path) must still lead to an output event; add the missing emits or steps.")
                    .witness(labels)
                    .on_guards(guards),
            );
        }
    }
    if let (Some(s), Some(fm)) = (improper, classical_final(net)) {
        let m = g.marking(s);
        let path = g.path(s);
        let labels = witness(net, &path);
        let msg = format!(
            "Improper completion: {}, the net reaches {}, which covers the final marking ({}) with more tokens; classical soundness requires that whenever the final marking is covered, nothing else is marked.",
            sequence(&labels),
            marked(net, &m).join(", "),
            marked(net, fm).join(", ")
        );
        let extra = (0..m.len())
            .find(|&p| m[p] > fm[p] && fm[p] > 0)
            .or_else(|| (0..m.len()).find(|&p| m[p] > fm[p]));
        out.push(
            Finding::new(
                Code::ImproperCompletion,
                Severity::Warning,
                extra.map(|p| place_pointer(net, p)).unwrap_or_default(),
                msg,
            )
            .hint("Make every branch of a split end in one join before the final place, so that exactly one token reaches it and nothing is left behind.")
            .witness(labels),
        );
    } else if let Some(s) = improper {
        let m = g.marking(s);
        let path = g.path(s);
        let labels = witness(net, &path);
        let guards = uses_guards(net, &path);
        let left: Vec<String> = (0..m.len())
            .filter(|&p| m[p] > 0 && !net.places[p].is_output && !net.places[p].is_env)
            .map(|p| place_label(net, p).to_string())
            .collect();
        let ws = waiting(net, &m);
        let mut msg = format!(
            "Improper completion: {}, the plan completes with tokens left on {}",
            sequence(&labels),
            quoted(&left)
        );
        if ws.is_empty() {
            msg.push('.');
        } else {
            msg.push_str(&format!(" ({}).", waiting_text(&ws)));
        }
        if guards {
            msg.push_str(GUARD_NOTE);
        }
        let pointer = (0..m.len())
            .find(|&p| m[p] > 0 && !net.places[p].is_output && !net.places[p].is_env)
            .map(|p| place_pointer(net, p))
            .unwrap_or_default();
        out.push(
            Finding::new(Code::ImproperCompletion, Severity::Warning, pointer, msg)
                .hint("Consume every intermediate event on every path, or declare the leftover events `kind: output` if they are results.")
                .witness(labels)
                .on_guards(guards),
        );
    }
    out
}

/// A003: one finding per unbounded event, with a pumping witness.
pub(crate) fn unbounded(
    net: &PtNet,
    pumps: &[Pump],
    severity: Severity,
    soundness_applies: bool,
) -> Vec<Finding> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for pump in pumps {
        let label = place_label(net, pump.place as usize);
        if net.places[pump.place as usize].is_env || !seen.insert(label) {
            continue;
        }
        let prefix = witness(net, &pump.prefix);
        let cycle = witness(net, &pump.cycle);
        let guards = uses_guards(net, &pump.prefix) || uses_guards(net, &pump.cycle);
        let mut msg = format!(
            "Event `{label}` can accumulate unboundedly many tokens: {}, each repetition of {} adds tokens to it.",
            sequence(&prefix),
            quoted(&cycle)
        );
        if soundness_applies {
            msg.push_str(" A sound workflow net is bounded, so this one is not sound.");
        }
        if guards {
            msg.push_str(GUARD_NOTE);
        }
        let mut w = prefix;
        w.extend(cycle);
        out.push(
            Finding::new(Code::Unbounded, severity, place_pointer(net, pump.place as usize), msg)
                .hint("Make the steps in the cycle consume as many tokens as they emit (emit once per firing, or join with a bounded event), or guard the loop.")
                .witness(w)
                .on_guards(guards),
        );
    }
    out
}
