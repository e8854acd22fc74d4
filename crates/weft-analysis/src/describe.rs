//! Words for findings: what a marking holds, which steps wait for which events, and witness
//! sequences as step names. Kept apart so every finding speaks the same way.

use std::collections::BTreeMap;

use weft_core::finding::event_ptr;

use crate::net::{NetKind, PtNet, Role};

/// The user-facing name of a place: its event for plan nets, else its own name.
pub(crate) fn place_label(net: &PtNet, p: usize) -> &str {
    let place = &net.places[p];
    place.event.as_deref().unwrap_or(&place.name)
}

/// Pointer for a place: the event for plan nets, `""` for imported nets.
pub(crate) fn place_pointer(net: &PtNet, p: usize) -> String {
    match (&net.places[p].event, net.kind) {
        (Some(e), NetKind::Acyclic | NetKind::Reactive) => event_ptr(e),
        _ => String::new(),
    }
}

/// Witness labels for a transition sequence.
pub(crate) fn witness(net: &PtNet, path: &[u32]) -> Vec<String> {
    path.iter()
        .map(|&t| net.witness_label(t as usize))
        .collect()
}

/// Does the sequence fire an over-approximated transition?
pub(crate) fn uses_guards(net: &PtNet, path: &[u32]) -> bool {
    path.iter().any(|&t| net.transitions[t as usize].guarded)
}

/// `a → b → c`, or `the initial marking` when empty.
pub(crate) fn sequence(labels: &[String]) -> String {
    if labels.is_empty() {
        "in the initial marking".to_string()
    } else {
        format!(
            "after firing {}",
            labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(" → ")
        )
    }
}

/// Places holding tokens (excluding environment budgets), as `event` or `event ×n`.
pub(crate) fn marked(net: &PtNet, m: &[u32]) -> Vec<String> {
    let mut by_label: BTreeMap<&str, u32> = BTreeMap::new();
    for (p, &k) in m.iter().enumerate() {
        if k > 0 && !net.places[p].is_env {
            *by_label.entry(place_label(net, p)).or_default() += k;
        }
    }
    by_label
        .into_iter()
        .map(|(l, k)| {
            if k == 1 {
                format!("`{l}`")
            } else {
                format!("`{l}` ×{k}")
            }
        })
        .collect()
}

/// A transition (or step) that has some of its inputs and waits for the rest.
pub(crate) struct Waiting {
    /// Step name (or transition name for imported nets).
    pub who: String,
    /// Its pointer.
    pub pointer: String,
    /// Inputs it lacks, by label.
    pub missing: Vec<String>,
    /// Inputs it has, by label.
    pub has: Vec<String>,
}

/// Steps (grouped over variants) with at least one input token that cannot fire in `m`.
pub(crate) fn waiting(net: &PtNet, m: &[u32]) -> Vec<Waiting> {
    let mut out: Vec<Waiting> = Vec::new();
    for (ti, t) in net.transitions.iter().enumerate() {
        if matches!(t.role, Role::Environment | Role::DeferredEmit) || net.enabled(ti, m) {
            continue;
        }
        let has: Vec<String> = t
            .pre
            .iter()
            .filter(|&&(p, _)| m[p as usize] > 0)
            .map(|&(p, _)| place_label(net, p as usize).to_string())
            .collect();
        if has.is_empty() {
            continue;
        }
        let who = t.step.clone().unwrap_or_else(|| t.name.clone());
        if out.iter().any(|w| w.who == who) {
            continue;
        }
        let missing = t
            .pre
            .iter()
            .filter(|&&(p, w)| m[p as usize] < w)
            .map(|&(p, _)| place_label(net, p as usize).to_string())
            .collect();
        out.push(Waiting {
            who,
            pointer: t.pointer.clone(),
            missing,
            has,
        });
    }
    out
}

/// `step `j` waits for `y` (has `x`); …`
pub(crate) fn waiting_text(ws: &[Waiting]) -> String {
    ws.iter()
        .map(|w| {
            format!(
                "`{}` waits for {} (has {})",
                w.who,
                quoted(&w.missing),
                quoted(&w.has)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `` `a`, `b` ``
pub(crate) fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
