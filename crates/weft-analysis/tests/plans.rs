//! Analysis of small plans, one behaviour each: the verdicts and findings weft promises.

use weft_analysis::{
    AnalysisOptions, AnalysisReport, CompileOptions, PtNet, Verdict, analyze_plan,
};
use weft_core::{Limits, Plan, parse_plan};

fn plan(json: &str) -> Plan {
    parse_plan(json.as_bytes(), &Limits::default()).expect("test plan parses")
}

fn analyze(json: &str) -> AnalysisReport {
    analyze_plan(&plan(json), &AnalysisOptions::default())
}

fn codes(r: &AnalysisReport) -> Vec<&str> {
    r.findings.iter().map(|f| f.code.as_str()).collect()
}

const SAMPLE: &str = r#"{"plan_name":"sample","graph_type":"acyclic","events":{"start":{},"done":{}},"steps":{"first":{"on":["start"],"action":"send_email","args":{"to":"a@example.com","subject":"Hi","body":"Test"},"emits":["done"]}}}"#;

#[test]
fn sample_plan_is_sound() {
    let r = analyze(SAMPLE);
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
    assert!(r.complete);
    assert_eq!(r.bounded, Some(true));
    assert_eq!(r.states, 2);
    assert_eq!(codes(&r), ["A007"]);
    assert!(!r.findings[0].depends_on_guards);
}

#[test]
fn join_on_skippable_branch_deadlocks_with_witness() {
    let r = analyze(
        r#"{"plan_name":"join","graph_type":"acyclic",
        "events":{"start":{},"a":{},"b":{},"done":{}},
        "steps":{
          "split":{"on":["start"],"action":"t","emits":["a",{"event":"b","when":"result.ok"}]},
          "join":{"on":["a","b"],"action":"t","emits":["done"]}}}"#,
    );
    assert_eq!(r.verdict, Verdict::NotSound, "{r:#?}");
    let d = r
        .findings
        .iter()
        .find(|f| f.code == "A001")
        .expect("a deadlock");
    assert_eq!(d.witness.as_deref(), Some(&["split".to_string()][..]));
    assert!(d.depends_on_guards);
    assert!(d.is_error());
    assert_eq!(d.pointer, "/steps/join");
    assert!(d.message.contains("`join` waits for `b`"), "{}", d.message);
    assert!(d.message.contains("over-approximated"), "{}", d.message);
}

#[test]
fn exclusive_event_with_two_consumers_leaves_one_waiting() {
    // `x` is exclusive: `left` or `right` takes the token, never both, so `both` may wait.
    let r = analyze(
        r#"{"plan_name":"excl","graph_type":"acyclic",
        "events":{"start":{},"x":{"consume":"exclusive"},"l":{},"r":{},"done":{}},
        "steps":{
          "s":{"on":["start"],"action":"t","emits":["x"]},
          "left":{"on":["x"],"action":"t","emits":["l"]},
          "right":{"on":["x"],"action":"t","emits":["r"]},
          "both":{"on":["l","r"],"action":"t","emits":["done"]}}}"#,
    );
    let net = PtNet::from_plan(
        &plan(
            r#"{"plan_name":"p","graph_type":"acyclic","events":{"start":{},"x":{"consume":"exclusive"}},"steps":{"a":{"on":["x"],"action":"t"},"b":{"on":["x"],"action":"t"}}}"#,
        ),
        &CompileOptions::default(),
    );
    assert_eq!(
        net.places
            .iter()
            .filter(|p| p.event.as_deref() == Some("x"))
            .count(),
        1
    );
    assert_eq!(r.verdict, Verdict::NotSound);
    let d = r
        .findings
        .iter()
        .find(|f| f.code == "A001")
        .expect("deadlock");
    assert_eq!(d.witness.as_ref().map(Vec::len), Some(2));
    assert!(!d.depends_on_guards);
    assert!(codes(&r).contains(&"A002"), "`both` is dead: {r:#?}");
}

#[test]
fn broadcast_fan_out_fan_in_is_sound() {
    let r = analyze(
        r#"{"plan_name":"fan","graph_type":"acyclic",
        "events":{"start":{},"x":{},"l":{},"r":{},"done":{"kind":"output"}},
        "steps":{
          "s":{"on":["start"],"action":"t","emits":["x"]},
          "left":{"on":["x"],"action":"t","emits":["l"]},
          "right":{"on":["x"],"action":"t","emits":["r"]},
          "both":{"on":["l","r"],"action":"t","emits":["done"]}}}"#,
    );
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
    assert_eq!(codes(&r), ["A007"]);
}

#[test]
fn reactive_self_loop_emitting_twice_is_unbounded() {
    let r = analyze(
        r#"{"plan_name":"loop","graph_type":"reactive",
        "events":{"start":{},"tick":{}},
        "steps":{
          "kick":{"on":["start"],"action":"t","emits":["tick"]},
          "loop":{"on":["tick"],"action":"t","emits":["tick","tick"]}}}"#,
    );
    assert_eq!(r.verdict, Verdict::NotApplicable);
    assert_eq!(r.bounded, Some(false));
    assert!(!r.complete);
    let u = r
        .findings
        .iter()
        .find(|f| f.code == "A003")
        .expect("unbounded");
    assert_eq!(u.pointer, "/events/tick");
    assert_eq!(u.severity, weft_core::Severity::Warning);
    assert_eq!(
        u.witness.as_deref(),
        Some(&["kick".to_string(), "loop".to_string()][..])
    );
}

#[test]
fn state_limit_gives_unknown() {
    let r = analyze_plan(
        &plan(SAMPLE),
        &AnalysisOptions {
            max_states: 1,
            ..AnalysisOptions::default()
        },
    );
    assert_eq!(r.verdict, Verdict::Unknown, "{r:#?}");
    assert!(!r.complete);
    assert_eq!(r.states, 1);
    let a = r
        .findings
        .iter()
        .find(|f| f.code == "A006")
        .expect("state limit");
    assert!(
        a.message.contains("after 1 reachable markings"),
        "{}",
        a.message
    );
    assert!(!codes(&r).contains(&"A007"));
}

#[test]
fn failure_paths_are_modelled() {
    // `work` may fail; `cleanup` handles `work.failed`, so both paths reach an output.
    let r = analyze(
        r#"{"plan_name":"fail","graph_type":"acyclic",
        "events":{"start":{},"ok":{"kind":"output"},"work.failed":{},"cleaned":{"kind":"output"}},
        "steps":{
          "work":{"on":["start"],"action":"t","emits":["ok"]},
          "cleanup":{"on":["work.failed"],"action":"t","emits":["cleaned"]}}}"#,
    );
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
    assert_eq!(r.states, 4);
}

#[test]
fn input_events_get_a_budgeted_environment() {
    let r = analyze(
        r#"{"plan_name":"in","graph_type":"acyclic",
        "events":{"start":{},"approval":{"kind":"input"},"done":{}},
        "steps":{"go":{"on":["start","approval"],"action":"t","emits":["done"]}}}"#,
    );
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
    assert!(
        r.notes.iter().any(|n| n.contains("env:approval")),
        "{:?}",
        r.notes
    );
}

#[test]
fn reactive_join_waiting_is_a_warning() {
    let r = analyze(
        r#"{"plan_name":"rj","graph_type":"reactive",
        "events":{"start":{},"a":{},"never":{},"done":{}},
        "steps":{
          "s":{"on":["start"],"action":"t","emits":["a"]},
          "j":{"on":["a","never"],"action":"t","emits":["done"]}}}"#,
    );
    assert_eq!(r.verdict, Verdict::NotApplicable);
    let d = r
        .findings
        .iter()
        .find(|f| f.code == "A001")
        .expect("deadlock");
    assert_eq!(d.severity, weft_core::Severity::Warning);
    assert_eq!(d.witness.as_deref(), Some(&["s".to_string()][..]));
}

#[test]
fn many_conditional_emits_are_deferred_and_noted() {
    let emits: Vec<String> = (0..7)
        .map(|i| format!(r#"{{"event":"c{i}","when":"result.n > {i}"}}"#))
        .collect();
    let events: Vec<String> = (0..7)
        .map(|i| format!(r#""c{i}":{{"kind":"output"}}"#))
        .collect();
    let json = format!(
        r#"{{"plan_name":"many","graph_type":"acyclic","events":{{"start":{{}},"done":{{"kind":"output"}},{}}},
        "steps":{{"fan":{{"on":["start"],"action":"t","emits":["done",{}]}}}}}}"#,
        events.join(","),
        emits.join(",")
    );
    let net = PtNet::from_plan(&plan(&json), &CompileOptions::default());
    // One step transition plus an emit and a skip transition per conditional emit.
    assert_eq!(net.transitions.len(), 1 + 2 * 7);
    assert!(net.transitions.iter().all(|t| t.guarded));
    let r = analyze(&json);
    assert!(
        r.notes.iter().any(|n| n.contains("7 conditional emits")),
        "{:?}",
        r.notes
    );
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
    assert!(r.findings[0].depends_on_guards);
}

#[test]
fn messages_read_well() {
    let r = analyze(
        r#"{"plan_name":"excl","graph_type":"acyclic",
        "events":{"start":{},"x":{"consume":"exclusive"},"l":{},"r":{},"done":{}},
        "steps":{
          "s":{"on":["start"],"action":"t","emits":["x"]},
          "left":{"on":["x"],"action":"t","emits":["l"]},
          "right":{"on":["x"],"action":"t","emits":["r"]},
          "both":{"on":["l","r"],"action":"t","emits":["done"]}}}"#,
    );
    insta::assert_json_snapshot!(r);
}

/// A `k`-way broadcast fan-out joined by one step; `extra` adds steps (JSON members).
fn wide_fan_out(k: usize, join_on_missing: bool, extra: &str) -> String {
    wide_fan_out_with(k, join_on_missing, extra, &[])
}

/// [`wide_fan_out`] with some branch results made exclusive (one consumer takes the token).
fn wide_fan_out_with(k: usize, join_on_missing: bool, extra: &str, exclusive: &[usize]) -> String {
    let mut events = vec![
        r#""start":{}"#.to_string(),
        r#""all":{"kind":"output"}"#.to_string(),
    ];
    let mut steps = Vec::new();
    let mut on = Vec::new();
    for i in 0..k {
        if exclusive.contains(&i) {
            events.push(format!(r#""b{i}.done":{{"consume":"exclusive"}}"#));
        } else {
            events.push(format!(r#""b{i}.done":{{}}"#));
        }
        steps.push(format!(
            r#""b{i}":{{"on":["start"],"action":"t","emits":["b{i}.done"]}}"#
        ));
        on.push(format!(r#""b{i}.done""#));
    }
    if join_on_missing {
        events.push(r#""never":{}"#.to_string());
        on.push(r#""never""#.to_string());
    }
    steps.push(format!(
        r#""join":{{"on":[{}],"action":"t","emits":["all"]}}"#,
        on.join(",")
    ));
    if !extra.is_empty() {
        steps.push(extra.to_string());
    }
    format!(
        r#"{{"plan_name":"wide","graph_type":"acyclic","events":{{{}}},"steps":{{{}}}}}"#,
        events.join(","),
        steps.join(",")
    )
}

#[test]
fn wide_fan_out_is_proved_sound_by_partial_order_reduction() {
    // 2^24 interleavings: far past the state limit, but the branches are independent.
    let r = analyze(&wide_fan_out(24, false, ""));
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
    assert!(r.complete && r.reduced);
    assert_eq!(r.bounded, Some(true));
    assert!(r.states < 100, "{} states", r.states);
    assert_eq!(codes(&r), ["A007"]);
    assert!(r.findings[0].message.contains("partial-order reduced"));
    assert!(
        r.notes.iter().any(|n| n.contains("stubborn sets")),
        "{:?}",
        r.notes
    );
    // A small fan-out still gets the full exploration.
    let small = analyze(&wide_fan_out(4, false, ""));
    assert!(small.complete && !small.reduced);
    assert_eq!(small.states, 17);
}

#[test]
fn wide_fan_out_deadlock_and_dead_step_are_found_after_reduction() {
    // The join also waits for `never`: every run deadlocks after the 24 branches, and the
    // join can never fire.
    let r = analyze(&wide_fan_out(24, true, ""));
    assert!(r.reduced && r.complete, "{r:#?}");
    assert_eq!(r.verdict, Verdict::NotSound);
    let d = r
        .findings
        .iter()
        .find(|f| f.code == "A001")
        .expect("deadlock");
    assert_eq!(d.witness.as_ref().map(Vec::len), Some(24));
    assert!(d.message.contains("`join` waits for"), "{}", d.message);
    let dead: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.code == "A002")
        .map(|f| f.pointer.as_str())
        .collect();
    assert_eq!(dead, ["/steps/join"]);
}

#[test]
fn competing_consumers_after_a_wide_fan_out_are_still_seen() {
    // `late` and `join` compete for the exclusive `b0.done` and `b1.done`: the runs where
    // `late` wins complete with 20 branch results left over. The reduced graph fires the
    // branches in one order only, but keeps that outcome.
    let r = analyze(&wide_fan_out_with(
        22,
        false,
        r#""late":{"on":["b0.done","b1.done"],"action":"t","emits":["all"]}"#,
        &[0, 1],
    ));
    assert!(r.reduced && r.complete, "{r:#?}");
    assert_eq!(r.verdict, Verdict::NotSound);
    assert_eq!(codes(&r), ["A005"], "{r:#?}");
    // Broadcast results: both fire, nothing competes, nothing is left over.
    let r = analyze(&wide_fan_out(
        22,
        false,
        r#""late":{"on":["b0.done","b1.done"],"action":"t","emits":["all"]}"#,
    ));
    assert_eq!(r.verdict, Verdict::Sound, "{r:#?}");
}
