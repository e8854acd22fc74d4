//! Graphviz DOT drawing of a plan.

use weft_core::{EventKind, Plan};

use super::{all_events, failure_target};

/// Escapes text for a DOT double-quoted string: `\` and `"` are escaped (so `\n` in a name
/// is not read as a DOT line break), newlines become DOT line breaks.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The plan as a DOT digraph: events are circles (doubled for outputs), steps are boxes
/// labelled with their action and guard, conditional emits and failure paths label arcs.
pub fn dot(plan: &Plan) -> String {
    let events = all_events(plan);
    let ev_id = |e: &str| {
        events
            .iter()
            .position(|x| *x == e)
            .map(|i| format!("e{i}"))
            .unwrap_or_default()
    };
    let initial = plan.initial_events();
    let mut out = format!("digraph \"{}\" {{\n  rankdir=LR;\n", esc(&plan.plan_name));
    for (i, e) in events.iter().enumerate() {
        let def = plan.events.get(*e);
        let shape = match def.and_then(|d| d.kind) {
            Some(EventKind::Output) => "doublecircle",
            _ => "circle",
        };
        let mut attrs = format!("shape={shape}, label=\"{}\"", esc(e));
        if initial.contains(e) {
            attrs.push_str(", style=bold");
        } else if def.and_then(|d| d.kind) == Some(EventKind::Input) {
            attrs.push_str(", style=dashed");
        }
        out.push_str(&format!("  e{i} [{attrs}];\n"));
    }
    for (i, (name, step)) in plan.steps.iter().enumerate() {
        let mut label = format!("{}\\naction: {}", esc(name), esc(&step.action));
        if let Some(g) = &step.guard {
            label.push_str(&format!("\\nguard: {}", esc(g)));
        }
        out.push_str(&format!("  s{i} [shape=box, label=\"{label}\"];\n"));
    }
    for (i, (name, step)) in plan.steps.iter().enumerate() {
        for e in &step.on {
            out.push_str(&format!("  {} -> s{i};\n", ev_id(e)));
        }
        for emit in &step.emits {
            match emit.when() {
                None => out.push_str(&format!("  s{i} -> {};\n", ev_id(emit.event()))),
                Some(w) => out.push_str(&format!(
                    "  s{i} -> {} [label=\"when: {}\", style=dashed];\n",
                    ev_id(emit.event()),
                    esc(w)
                )),
            }
        }
        if let Some(f) = failure_target(plan, name) {
            out.push_str(&format!(
                "  s{i} -> {} [label=\"on fail\", color=red, style=dashed];\n",
                ev_id(&f)
            ));
        }
    }
    out.push_str("}\n");
    out
}
