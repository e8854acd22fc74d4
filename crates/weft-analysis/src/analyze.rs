//! Runs the analyses in order and settles the verdict: reachability first (cheap and exact),
//! Karp–Miller only when reachability could not finish, soundness only on complete graphs.
//!
//! Which soundness: plan nets get soundness with respect to their outputs; an imported net
//! gets classical workflow-net soundness (van der Aalst, cycles allowed) against its final
//! marking, or `[sink]` when it is a workflow net; an imported net with neither is reported
//! as not a workflow net (A008) and gets no verdict.

use weft_core::{Code, Finding, Plan, Severity};

use crate::checks;
use crate::compile::CompileOptions;
use crate::cover::karp_miller_within;
use crate::describe::place_label;
use crate::explore::{Bounds, Stop, explore_within};
use crate::net::{NetKind, NotWorkflow, PtNet, Role};
use crate::reduce::{Index, can_enable_with, explore_reduced_within};
use crate::report::{AnalysisOptions, AnalysisReport, Verdict};

/// Markings of the full graph explored on a net without cycles before switching to the
/// partial-order reduced one.
const PROBE_STATES: usize = 100_000;

/// Compiles `plan` into a P/T net and analyses it.
pub fn analyze_plan(plan: &Plan, opts: &AnalysisOptions) -> AnalysisReport {
    let net = PtNet::from_plan(
        plan,
        &CompileOptions {
            env_tokens: opts.env_tokens,
        },
    );
    let mut report = analyze_net(&net, opts);
    if let Some(gov) = &opts.governance {
        let bounds = Bounds {
            max_states: opts.max_states,
            max_bytes: opts.max_bytes,
            interrupt: opts.interrupt.clone(),
        };
        let (g, findings) = crate::governance::check(plan, &net, gov, &bounds);
        // Required properties and budgets are not soundness: they leave the verdict alone.
        report.findings.extend(findings);
        report.governance = Some(g);
    }
    report
}

/// Analyses a P/T net: deadlocks, dead steps, boundedness and (for acyclic nets) soundness.
pub fn analyze_net(net: &PtNet, opts: &AnalysisOptions) -> AnalysisReport {
    let mut findings = Vec::new();
    // An imported net without a final marking completes in `[sink]` when it is a workflow net.
    let with_sink;
    let net = match (net.kind, &net.final_marking) {
        (NetKind::Imported, None) => match net.workflow_shape() {
            Ok((_, sink)) => {
                let mut n = net.clone();
                let mut fm = vec![0; n.places.len()];
                fm[sink] = 1;
                n.final_marking = Some(fm);
                with_sink = n;
                &with_sink
            }
            Err(why) => {
                findings.push(not_workflow(net, &why));
                net
            }
        },
        _ => net,
    };
    let classical = checks::classical_final(net).is_some();
    let soundness_applies = match net.kind {
        NetKind::Acyclic => true,
        NetKind::Reactive => false,
        NetKind::Imported => classical,
    };
    let mut notes = net.notes.clone();
    let severity = if net.kind == NetKind::Reactive {
        Severity::Warning
    } else {
        Severity::Error
    };
    // Too many interleavings to store: on a net without cycles, partial-order reduction keeps
    // every answer the checks below need (see `reduce.rs`), usually in far fewer markings. The
    // full graph is tried first (its witnesses are shortest), but only up to `PROBE_STATES`
    // markings there, so a wide fan-out does not pay for a million useless ones first.
    let acyclic = !net.has_cycle();
    // The reduction keeps every dead marking; classical proper completion also looks at live
    // markings, which it keeps only in effect: when the final places are sinks and every
    // transition produces something, a marking covering the final one with more tokens can
    // only end in a dead marking that is not final (see `reduction_decides_classical`).
    let reducible = acyclic && (!classical || reduction_decides_classical(net));
    let probe = if reducible {
        opts.max_states.min(PROBE_STATES)
    } else {
        opts.max_states
    };
    let bounds = Bounds {
        max_states: opts.max_states,
        max_bytes: opts.max_bytes,
        interrupt: opts.interrupt.clone(),
    };
    let within = |max_states: usize| Bounds {
        max_states,
        ..bounds.clone()
    };
    let mut g = explore_within(net, &within(probe), soundness_applies);
    let mut reduced = false;
    let mut undecided: Vec<usize> = Vec::new();
    if g.stop == Stop::StateLimit && reducible {
        let r = explore_reduced_within(net, &bounds);
        if matches!(r.stop, Stop::MemoryLimit | Stop::Interrupted) {
            // Out of memory or time: the probe's partial graph, stopped by that bound.
            g.stop = r.stop;
        } else if r.stop != Stop::None && probe < opts.max_states {
            // The reduction did not help either: the usual partial exploration, in full.
            g = explore_within(net, &bounds, soundness_applies);
        } else if r.stop == Stop::None {
            let full_states = g.len();
            g = r;
            reduced = true;
            let stopped;
            (undecided, stopped) = settle_dead_steps(net, &mut g, &bounds);
            if let Some(s) = stopped {
                g.stop = s;
            }
            notes.push(format!(
                "The full state space has more than {full_states} markings; the analysis used partial-order reduction (stubborn sets) and explored {} markings, which keeps every reachable dead marking, so deadlock, completion and dead-step results are exact.",
                g.len()
            ));
        }
    }
    let complete = g.stop == Stop::None && undecided.is_empty();

    let (deadlocks, deadlock_states) = checks::deadlocks(net, &g, severity);
    findings.extend(deadlocks);

    let bounded = if g.stop == Stop::None {
        Some(true)
    } else {
        let km = karp_miller_within(net, &within(opts.max_coverability_nodes));
        findings.extend(checks::unbounded(
            net,
            &km.pumps,
            severity,
            soundness_applies,
        ));
        if km
            .pumps
            .iter()
            .any(|p| !net.places[p.place as usize].is_env)
        {
            Some(false)
        } else if km.complete {
            Some(true)
        } else {
            None
        }
    };

    if !undecided.is_empty() && g.stop == Stop::None {
        let names: Vec<String> = undecided.iter().map(|&t| net.witness_label(t)).collect();
        findings.push(
            Finding::new(
                Code::StateLimit,
                Severity::Warning,
                "",
                format!(
                    "Deciding whether {} can ever fire stopped at the state limit or the memory bound; soundness is unknown.",
                    crate::describe::quoted(&names)
                ),
            )
            .hint("Raise `max_states`, or split the plan into smaller plans."),
        );
    }
    match g.stop {
        Stop::None => {}
        Stop::StateLimit => findings.push(
            Finding::new(
                Code::StateLimit,
                Severity::Warning,
                "",
                format!(
                    "Exploration stopped at the state limit after {} reachable markings and {} firings; findings cover only that part, so soundness is unknown.",
                    g.len(),
                    g.edges
                ),
            )
            .hint("Raise `max_states`, or split the plan into smaller plans."),
        ),
        Stop::Overflow(p) if bounded != Some(false) => findings.push(
            Finding::new(
                Code::StateLimit,
                Severity::Warning,
                crate::describe::place_pointer(net, p as usize),
                format!(
                    "Exploration dropped markings where `{}` would hold more than 65535 tokens, after {} reachable markings; findings cover only that part, so soundness is unknown.",
                    place_label(net, p as usize),
                    g.len()
                ),
            )
            .hint("Check the loops that emit onto this event."),
        ),
        Stop::Overflow(_) => {}
        Stop::MemoryLimit => findings.push(
            Finding::new(
                Code::StateLimit,
                Severity::Warning,
                "",
                format!(
                    "Exploration stopped at the memory bound ({} bytes of stored markings) after {} reachable markings and {} firings; findings cover only that part, so soundness is unknown.",
                    opts.max_bytes,
                    g.len(),
                    g.edges
                ),
            )
            .hint("Raise the analysis memory bound (`weft analyze --max-analysis-bytes`), or split the plan into smaller plans."),
        ),
        Stop::Interrupted => findings.push(
            Finding::new(
                Code::StateLimit,
                Severity::Warning,
                "",
                format!(
                    "Exploration stopped at the deadline after {} reachable markings and {} firings; findings cover only that part, so soundness is unknown.",
                    g.len(),
                    g.edges
                ),
            )
            .hint("Allow the analysis more time (`weft analyze --analysis-timeout`), or split the plan into smaller plans."),
        ),
    }

    if complete {
        findings.extend(checks::dead_steps(net, &g));
        if soundness_applies {
            findings.extend(checks::soundness(net, &g, &deadlock_states));
        }
    }

    let violated = findings
        .iter()
        .any(|f| f.code != Code::StateLimit.as_str() && f.severity >= Severity::Warning);
    let verdict = if !soundness_applies {
        Verdict::NotApplicable
    } else if violated {
        Verdict::NotSound
    } else if !complete {
        Verdict::Unknown
    } else {
        let guarded = net
            .transitions
            .iter()
            .any(|t| t.guarded && t.role != Role::Environment);
        let (what, steps) = match net.kind {
            NetKind::Imported => ("net", "transitions"),
            _ => ("plan", "steps"),
        };
        let notion = if classical {
            "classical workflow-net soundness, against the final marking"
        } else {
            "with respect to the plan's outputs"
        };
        let explored = if reduced {
            format!(
                "the {} markings of its partial-order reduced state space were explored",
                g.len()
            )
        } else {
            format!("all {} reachable markings were explored", g.len())
        };
        let mut msg = format!(
            "Sound ({notion}): {explored}; the {what} can always complete, completes cleanly, has no dead {steps} and is bounded."
        );
        if guarded {
            msg.push_str(" This assumes every guard and `when` condition may go either way (they were over-approximated); a guard that is never true can still leave an instance stuck.");
        }
        findings.push(
            Finding::new(Code::Sound, Severity::Info, "", msg)
                .hint("Nothing to fix.")
                .on_guards(guarded),
        );
        Verdict::Sound
    };

    AnalysisReport {
        findings,
        states: g.len(),
        edges: g.edges,
        complete,
        verdict,
        bounded,
        reduced,
        notes,
        governance: None,
    }
}

/// Is the partial-order reduced graph enough to decide classical soundness of an acyclic
/// net? It keeps every reachable dead marking. If the final marking's places have no output
/// arcs and every transition puts a token somewhere, a reachable marking covering the final
/// marking with more tokens keeps them (or passes them on) until the run ends, so the run
/// ends in a dead marking that is not the final one: the verdict (not sound) is the same,
/// reported as a deadlock instead of improper completion.
fn reduction_decides_classical(net: &PtNet) -> bool {
    let Some(fm) = net.final_marking.as_deref() else {
        return false;
    };
    net.transitions
        .iter()
        .all(|t| !t.post.is_empty() && t.pre.iter().all(|&(p, _)| fm.get(p as usize) == Some(&0)))
}

/// A008: the net is neither given a final marking nor a workflow net.
fn not_workflow(net: &PtNet, why: &NotWorkflow) -> Finding {
    let names = |ns: &[usize], places: bool| -> Vec<String> {
        ns.iter()
            .map(|&n| {
                if places {
                    net.places[n].name.clone()
                } else {
                    net.node_name(n).to_string()
                }
            })
            .collect()
    };
    let mut problems = Vec::new();
    if why.sources.len() != 1 {
        problems.push(format!(
            "it has {} source places (no transition produces into them){}",
            why.sources.len(),
            if why.sources.is_empty() {
                String::new()
            } else {
                format!(": {}", crate::describe::quoted(&names(&why.sources, true)))
            }
        ));
    }
    if why.sinks.len() != 1 {
        problems.push(format!(
            "it has {} sink places (no transition consumes from them){}",
            why.sinks.len(),
            if why.sinks.is_empty() {
                String::new()
            } else {
                format!(": {}", crate::describe::quoted(&names(&why.sinks, true)))
            }
        ));
    }
    if !why.off_path.is_empty() {
        problems.push(format!(
            "{} not on a path from the source to the sink",
            crate::describe::quoted(&names(&why.off_path, false))
        ));
    }
    Finding::new(
        Code::NotWorkflowNet,
        Severity::Warning,
        "",
        format!(
            "Not a workflow net, so soundness is not decided: {}. Deadlocks are judged with every sink place as an end.",
            problems.join("; ")
        ),
    )
    .hint("Give the file a <finalmarkings> block naming the marking that counts as completion, or make the net have exactly one source place, one sink place and every node on a path between them.")
}

/// On a reduced graph, `enabled_ever` misses transitions that only some other interleaving
/// enables: decides each step that looks dead with a search targeted at it. Returns the
/// transitions the state limit left undecided, and the memory bound or the interrupt when
/// either stopped the searches.
fn settle_dead_steps(
    net: &PtNet,
    g: &mut crate::explore::Graph,
    bounds: &Bounds,
) -> (Vec<usize>, Option<Stop>) {
    let mut undecided = Vec::new();
    let ix = Index::new(net);
    for t in 0..net.transitions.len() {
        let tr = &net.transitions[t];
        if g.enabled_ever[t] || tr.role == Role::Environment {
            continue;
        }
        // A step is alive when any of its variants can fire.
        let step_alive = tr.step.is_some()
            && net
                .transitions
                .iter()
                .zip(&g.enabled_ever)
                .any(|(o, &e)| e && o.step == tr.step);
        if step_alive {
            continue;
        }
        match can_enable_with(net, &ix, t as u32, bounds) {
            Some(true) => g.enabled_ever[t] = true,
            Some(false) => {}
            None => undecided.push(t),
        }
        if bounds.interrupted() {
            return (undecided, Some(Stop::Interrupted));
        }
    }
    (undecided, None)
}
