//! Exports for people and other tools: DOT and Mermaid drawings of a plan (events as circles,
//! steps as boxes, guards and conditions as labels) and PNML for Petri-net tools.

mod dot;
mod mermaid;
mod pnml;

pub use dot::dot;
pub use mermaid::mermaid;
pub use pnml::pnml;
pub(crate) use pnml::role_str;

use weft_core::{OnFail, Plan};

/// Every event a plan mentions, declared ones first, each once (drawings include undeclared
/// events so an invalid plan still draws).
pub(crate) fn all_events(plan: &Plan) -> Vec<&str> {
    let mut out: Vec<&str> = plan.events.keys().map(String::as_str).collect();
    let mut extra: Vec<&str> = plan.initial_events();
    for s in plan.steps.values() {
        extra.extend(s.on.iter().map(String::as_str));
        extra.extend(s.emits.iter().map(|e| e.event()));
        if let Some(OnFail::Emit(e)) = &s.on_fail {
            extra.push(e);
        }
    }
    for e in extra {
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

/// The failure arc of a step, if the plan handles its failure with an event.
pub(crate) fn failure_target(plan: &Plan, step: &str) -> Option<String> {
    let failed = format!("{step}.failed");
    if plan.steps.values().any(|s| s.on.contains(&failed)) {
        return Some(failed);
    }
    match plan.steps.get(step).and_then(|s| s.on_fail.as_ref()) {
        Some(OnFail::Emit(x)) => Some(x.clone()),
        _ => None,
    }
}
