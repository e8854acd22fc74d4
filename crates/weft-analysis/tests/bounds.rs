//! The analysis's own resource bounds: the bytes of stored markings and the caller's
//! deadline (an interrupt). Either ends the analysis with a partial result and an A006 finding
//! naming the bound, never a "sound" verdict. No timing: a tiny byte bound, an interrupt
//! that has already fired, and one that fires after a fixed number of checks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use weft_analysis::{AnalysisOptions, AnalysisReport, Verdict, analyze_plan};
use weft_core::{Limits, Plan, parse_plan};

/// `n` steps on one broadcast `start`, each emitting its own output: 2^n markings.
fn fan_out(n: usize) -> Plan {
    let events: Vec<String> = (0..n)
        .map(|i| format!(r#""o{i}":{{"kind":"output"}}"#))
        .collect();
    let steps: Vec<String> = (0..n)
        .map(|i| format!(r#""s{i}":{{"on":["start"],"action":"noop","emits":["o{i}"]}}"#))
        .collect();
    let json = format!(
        r#"{{"plan_name":"fan","graph_type":"acyclic","events":{{"start":{{}},{}}},"steps":{{{}}}}}"#,
        events.join(","),
        steps.join(",")
    );
    parse_plan(json.as_bytes(), &Limits::default()).expect("plan")
}

/// A reactive loop whose counter grows without bound: reachability never ends, Karp–Miller
/// runs.
fn unbounded() -> Plan {
    let json = r#"{"plan_name":"grow","graph_type":"reactive",
      "events":{"start":{},"tick":{},"count":{}},
      "steps":{"loop":{"on":["tick"],"action":"noop","emits":["tick","count"]},
               "go":{"on":["start"],"action":"noop","emits":["tick"]}}}"#;
    parse_plan(json.as_bytes(), &Limits::default()).expect("plan")
}

fn a006(r: &AnalysisReport) -> Vec<&str> {
    r.findings
        .iter()
        .filter(|f| f.code == "A006")
        .map(|f| f.message.as_str())
        .collect()
}

#[test]
fn the_fan_out_is_sound_within_the_default_bounds() {
    let r = analyze_plan(&fan_out(12), &AnalysisOptions::default());
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
    assert_eq!(r.states, 1 << 12);
}

#[test]
fn the_memory_bound_stops_exploration_with_a_partial_result() {
    let opts = AnalysisOptions {
        max_bytes: 48 << 10,
        ..AnalysisOptions::default()
    };
    let r = analyze_plan(&fan_out(12), &opts);
    assert!(!r.complete);
    assert_eq!(r.verdict, Verdict::Unknown, "{r:#?}");
    assert!(r.states > 1 && r.states < 1 << 12, "{}", r.states);
    let msgs = a006(&r);
    assert!(
        msgs.iter().any(|m| m.contains("memory bound (49152 bytes")),
        "{msgs:?}"
    );
    assert!(r.findings.iter().all(|f| f.code != "A007"));
}

#[test]
fn an_expired_deadline_stops_exploration_at_once() {
    let opts = AnalysisOptions {
        interrupt: Some(Arc::new(|| true)),
        ..AnalysisOptions::default()
    };
    for plan in [fan_out(12), unbounded()] {
        let r = analyze_plan(&plan, &opts);
        assert!(!r.complete);
        assert_ne!(r.verdict, Verdict::Sound);
        assert!(r.states <= 1, "{}", r.states);
        let msgs = a006(&r);
        assert!(
            msgs.iter().any(|m| m.contains("stopped at the deadline")),
            "{msgs:?}"
        );
    }
}

#[test]
fn a_deadline_reached_part_way_keeps_what_was_explored() {
    // Fires on its third consultation: the first is at the first new marking, then one every
    // `CHECK_EVERY` markings.
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let opts = AnalysisOptions {
        interrupt: Some(Arc::new(move || c.fetch_add(1, Ordering::Relaxed) >= 2)),
        ..AnalysisOptions::default()
    };
    let r = analyze_plan(&fan_out(16), &opts);
    assert!(!r.complete);
    assert_eq!(r.verdict, Verdict::Unknown, "{r:#?}");
    let every = weft_analysis::explore::CHECK_EVERY as usize;
    assert!(
        r.states > every && r.states <= 2 * every + 1,
        "{}",
        r.states
    );
    assert!(a006(&r).iter().any(|m| m.contains("deadline")));
}

#[test]
fn an_unbounded_net_stops_at_the_memory_bound_too() {
    let opts = AnalysisOptions {
        max_bytes: 64 << 10,
        max_states: usize::MAX,
        max_coverability_nodes: usize::MAX,
        ..AnalysisOptions::default()
    };
    let r = analyze_plan(&unbounded(), &opts);
    assert!(!r.complete);
    assert!(
        a006(&r).iter().any(|m| m.contains("memory bound")),
        "{r:#?}"
    );
}
