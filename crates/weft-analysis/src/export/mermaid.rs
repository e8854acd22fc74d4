//! Mermaid flowchart drawing of a plan (renders in GitHub and most Markdown viewers).

use weft_core::{EventKind, Plan};

use super::{all_events, failure_target};

/// Escapes text for a double-quoted Mermaid label using Mermaid's `#code;` entities, so
/// quotes, `#`, brackets and markup in names cannot break the diagram.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '#' => out.push_str("#35;"),
            '&' => out.push_str("#amp;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '|' => out.push_str("#124;"),
            '`' => out.push_str("#96;"),
            '\n' => out.push_str("<br/>"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The plan as a Mermaid `flowchart LR`: events are circles (double circles for outputs),
/// steps are boxes with their action and guard, conditional emits and failures label arcs.
pub fn mermaid(plan: &Plan) -> String {
    let events = all_events(plan);
    let ev_id = |e: &str| {
        events
            .iter()
            .position(|x| *x == e)
            .map(|i| format!("e{i}"))
            .unwrap_or_default()
    };
    let mut out = String::from("flowchart LR\n");
    for (i, e) in events.iter().enumerate() {
        let (open, close) = match plan.events.get(*e).and_then(|d| d.kind) {
            Some(EventKind::Output) => ("(((", ")))"),
            _ => ("((", "))"),
        };
        out.push_str(&format!("  e{i}{open}\"{}\"{close}\n", esc(e)));
    }
    for (i, (name, step)) in plan.steps.iter().enumerate() {
        let mut label = format!("{}<br/>action: {}", esc(name), esc(&step.action));
        if let Some(g) = &step.guard {
            label.push_str(&format!("<br/>guard: {}", esc(g)));
        }
        out.push_str(&format!("  s{i}[\"{label}\"]\n"));
    }
    for (i, (name, step)) in plan.steps.iter().enumerate() {
        for e in &step.on {
            out.push_str(&format!("  {} --> s{i}\n", ev_id(e)));
        }
        for emit in &step.emits {
            match emit.when() {
                None => out.push_str(&format!("  s{i} --> {}\n", ev_id(emit.event()))),
                Some(w) => out.push_str(&format!(
                    "  s{i} -.->|\"when: {}\"| {}\n",
                    esc(w),
                    ev_id(emit.event())
                )),
            }
        }
        if let Some(f) = failure_target(plan, name) {
            out.push_str(&format!("  s{i} -.->|\"on fail\"| {}\n", ev_id(&f)));
        }
    }
    out
}
