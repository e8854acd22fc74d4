//! Governance proved before the run: approval coverage and declared "before X, always Y"
//! properties, and the cost bound of acyclic plans, on plans built to violate and to satisfy
//! each; every witness is replayed by the token game.

use std::sync::Arc;

use weft_analysis::governance::{APPROVAL_COVERAGE, PropertyResult};
use weft_analysis::{
    AnalysisOptions, AnalysisReport, CompileOptions, Governance, Property, PtNet, Selector,
    analyze_plan,
};
use weft_core::{Effect, Limits, Plan, StaticCatalog, ToolSpec, parse_plan};

fn plan(json: &str) -> Plan {
    parse_plan(json.as_bytes(), &Limits::default()).expect("test plan parses")
}

/// The built-in tools and three of a deployment's own: a priced write, a priced read and a
/// model call.
fn catalog() -> StaticCatalog {
    let mut c = StaticCatalog::builtin();
    let tool = |name: &str, effect, cost, llm| ToolSpec {
        name: name.into(),
        description: String::new(),
        args_schema: serde_json::json!({}),
        effect,
        idempotent: false,
        cost,
        llm,
    };
    c.insert(tool("crm.charge", Effect::Write, Some(2.5), false));
    c.insert(tool("crm.lookup", Effect::Read, Some(0.25), false));
    c.insert(tool("ask", Effect::Read, None, true));
    c
}

fn analyze_with(p: &Plan, properties: Vec<Property>) -> AnalysisReport {
    let gov = Governance::from_catalog(&catalog(), properties);
    analyze_plan(
        p,
        &AnalysisOptions {
            governance: Some(Arc::new(gov)),
            ..AnalysisOptions::default()
        },
    )
}

fn coverage(r: &AnalysisReport) -> &PropertyResult {
    let g = r.governance.as_ref().expect("governance report");
    g.properties
        .iter()
        .find(|p| p.name == APPROVAL_COVERAGE)
        .expect("approval coverage reported")
}

fn net(p: &Plan) -> PtNet {
    PtNet::from_plan(p, &CompileOptions { env_tokens: 1 })
}

/// Fires `path` (transition names) from the initial marking; panics if one is not enabled.
fn replay(net: &PtNet, path: &[String]) -> Vec<u32> {
    let mut m = net.initial.clone();
    for name in path {
        let t = net
            .transition_index(name)
            .expect("witness names a transition");
        m = net
            .fire(t, &m)
            .unwrap_or_else(|| panic!("witness step `{name}` enabled"));
    }
    m
}

fn required_coverage() -> Vec<Property> {
    vec![Property::approval_coverage()]
}

const UNAPPROVED: &str = r#"{"plan_name":"pay","graph_type":"acyclic",
  "events":{"start":{},"found":{},"done":{"kind":"output"}},
  "steps":{
    "lookup":{"on":["start"],"action":"crm.lookup","emits":["found"]},
    "charge":{"on":["found"],"action":"crm.charge","emits":["done"]}}}"#;

#[test]
fn a_write_without_approval_is_reported_with_the_run_that_reaches_it() {
    let p = plan(UNAPPROVED);
    let r = analyze_with(&p, vec![]);
    let c = coverage(&r);
    assert_eq!(c.holds, Some(false));
    assert!(!c.required);
    assert_eq!(c.steps, ["charge"]);
    assert_eq!(c.witness, ["lookup", "charge"]);
    // Not required: reported, not a finding, and the plan stays sound.
    assert!(r.findings.iter().all(|f| f.code != "A009"), "{r:#?}");
    assert_eq!(r.verdict, weft_analysis::Verdict::Sound);
    // The witness runs: replaying all but its last step enables the last one.
    let n = net(&p);
    let m = replay(&n, &c.path[..c.path.len() - 1]);
    let last = n.transition_index(c.path.last().unwrap()).unwrap();
    assert!(n.enabled(last, &m));
}

#[test]
fn a_required_property_that_fails_is_an_error_with_its_witness() {
    let p = plan(UNAPPROVED);
    let r = analyze_with(&p, required_coverage());
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "A009")
        .expect("A009 finding");
    assert_eq!(f.severity, weft_core::Severity::Error);
    assert_eq!(f.pointer, "/steps/charge");
    assert_eq!(
        f.witness.as_deref(),
        Some(&["lookup".to_string(), "charge".to_string()][..])
    );
    assert!(f.message.contains("approval_coverage"), "{}", f.message);
    // Soundness is another matter: the verdict does not change.
    assert_eq!(r.verdict, weft_analysis::Verdict::Sound);
}

#[test]
fn an_approval_on_every_path_covers_the_write() {
    // The write's own approval covers it; so does an approved step before it.
    for json in [
        r#"{"plan_name":"pay","graph_type":"acyclic",
          "events":{"start":{},"found":{},"done":{"kind":"output"}},
          "steps":{
            "lookup":{"on":["start"],"action":"crm.lookup","emits":["found"]},
            "charge":{"on":["found"],"action":"crm.charge","emits":["done"],
                      "approval":{"reason":"money"}}}}"#,
        r#"{"plan_name":"pay","graph_type":"acyclic",
          "events":{"start":{},"ok":{},"done":{"kind":"output"}},
          "steps":{
            "review":{"on":["start"],"action":"noop","emits":["ok"],"approval":{}},
            "charge":{"on":["ok"],"action":"crm.charge","emits":["done"]}}}"#,
    ] {
        let r = analyze_with(&plan(json), required_coverage());
        assert_eq!(coverage(&r).holds, Some(true), "{r:#?}");
        assert!(r.findings.iter().all(|f| f.code != "A009"));
    }
}

#[test]
fn a_branch_around_the_approval_and_a_denied_approval_are_found() {
    // A conditional emit skips the review: the witness takes that branch.
    let p = plan(
        r#"{"plan_name":"pay","graph_type":"acyclic",
          "events":{"start":{},"big":{},"ok":{},"done":{"kind":"output"}},
          "steps":{
            "triage":{"on":["start"],"action":"noop",
                      "emits":[{"event":"big","when":"result.big"},
                               {"event":"ok","when":"!result.big"}]},
            "review":{"on":["big"],"action":"noop","emits":["ok"],"approval":{}},
            "charge":{"on":["ok"],"action":"crm.charge","emits":["done"]}}}"#,
    );
    let r = analyze_with(&p, required_coverage());
    let c = coverage(&r);
    assert_eq!(c.holds, Some(false));
    assert_eq!(c.witness, ["triage", "charge"]);
    let f = r.findings.iter().find(|f| f.code == "A009").unwrap();
    assert!(f.depends_on_guards, "the branch is a `when`");
    replay(&net(&p), &c.path);

    // A denied approval is a failure: its `on_fail` path covers nothing.
    let p = plan(
        r#"{"plan_name":"pay","graph_type":"acyclic",
          "events":{"start":{},"ok":{},"refused":{},"done":{"kind":"output"}},
          "steps":{
            "review":{"on":["start"],"action":"noop","emits":["ok"],"approval":{},
                      "on_fail":"emit:refused"},
            "charge":{"on":["ok"],"action":"crm.charge","emits":["done"]},
            "apologise":{"on":["refused"],"action":"send_email",
                         "args":{"to":"a@example.com","subject":"s","body":"b"},"emits":["done"]}}}"#,
    );
    let r = analyze_with(&p, required_coverage());
    let c = coverage(&r);
    assert_eq!(c.holds, Some(false));
    assert_eq!(c.steps, ["apologise", "charge"]);
    assert_eq!(c.witness, ["review", "apologise"]);
    replay(&net(&p), &c.path);
}

#[test]
fn declared_properties_select_by_tool_step_and_prefix() {
    let p = plan(UNAPPROVED);
    // Before any `crm.` write, always the lookup: holds.
    let holds = Property {
        name: "lookup_first".into(),
        before: Selector {
            tool_prefix: Some("crm.".into()),
            effect: Some(Effect::Write),
            ..Selector::default()
        },
        always: Selector {
            step: Some("lookup".into()),
            ..Selector::default()
        },
    };
    // Before the lookup, always the charge: fails at once.
    let fails = Property {
        name: "charge_first".into(),
        before: Selector {
            tool: Some("crm.lookup".into()),
            ..Selector::default()
        },
        always: Selector {
            step: Some("charge".into()),
            ..Selector::default()
        },
    };
    let r = analyze_with(&p, vec![holds, fails]);
    let g = r.governance.as_ref().unwrap();
    let by = |n: &str| g.properties.iter().find(|p| p.name == n).unwrap();
    assert_eq!(by("lookup_first").holds, Some(true));
    assert_eq!(by("charge_first").holds, Some(false));
    assert_eq!(by("charge_first").witness, ["lookup"]);
    let a009: Vec<_> = r.findings.iter().filter(|f| f.code == "A009").collect();
    assert_eq!(a009.len(), 1, "{a009:#?}");
    assert!(a009[0].message.contains("charge_first"));
    // Properties deserialise from the shape a policy declares them in.
    let from_json: Property = serde_json::from_value(serde_json::json!({
        "name": "p", "before": {"effect": "write"}, "always": {"approval": true}}))
    .unwrap();
    assert_eq!(from_json.before.effect, Some(Effect::Write));
    assert!(
        serde_json::from_value::<Property>(serde_json::json!({
            "name": "p", "before": {"effekt": "write"}, "always": {}}))
        .is_err()
    );
}

/// A choice between a short branch and a long one with retries and model calls.
const CHOICE: &str = r#"{"plan_name":"choice","graph_type":"acyclic",
  "events":{"start":{},"go":{"consume":"exclusive"},"a":{},"b":{},"c":{},"done":{"kind":"output"}},
  "steps":{
    "split":{"on":["start"],"action":"noop","emits":["go"]},
    "short":{"on":["go"],"action":"crm.charge","emits":["done"]},
    "long1":{"on":["go"],"action":"crm.lookup","emits":["a"],"retry":{"max":2}},
    "long2":{"on":["a"],"action":"ask","emits":["b"],"retry":{"max":1}},
    "long3":{"on":["b"],"action":"crm.lookup","emits":["done"]}}}"#;

#[test]
fn the_cost_bound_is_the_most_expensive_run_with_retries_counted() {
    let p = plan(CHOICE);
    let r = analyze_with(&p, vec![]);
    let b = r
        .governance
        .as_ref()
        .unwrap()
        .bound
        .as_ref()
        .expect("bound");
    // split 1 + long1 3 + long2 2 + long3 1.
    assert_eq!(b.tool_calls.max, 7.0);
    assert_eq!(b.tool_calls.witness, ["split", "long1", "long2", "long3"]);
    assert_eq!(b.llm_calls.max, 2.0);
    // The charge branch costs 2.5; the long one 3 × 0.25 + 0.25 = 1.
    let cost = b.cost.as_ref().expect("declared costs");
    assert_eq!(cost.max, 2.5);
    assert_eq!(cost.witness, ["split", "short"]);
    assert!(!b.depends_on_guards);
    // Each witness replays to a dead marking and adds up to its maximum.
    let n = net(&p);
    for e in [&b.tool_calls, &b.llm_calls, cost] {
        let m = replay(&n, &e.path);
        assert!((0..n.transitions.len()).all(|t| !n.enabled(t, &m)));
    }
}

#[test]
fn a_bound_over_the_limits_refuses_the_plan_and_one_within_does_not() {
    let over = CHOICE.replacen(
        r#""graph_type":"acyclic","#,
        r#""graph_type":"acyclic","limits":{"max_tool_calls":6,"max_llm_calls":2,"max_cost":2},"#,
        1,
    );
    let r = analyze_with(&plan(&over), vec![]);
    let a010: Vec<_> = r.findings.iter().filter(|f| f.code == "A010").collect();
    let pointers: Vec<&str> = a010.iter().map(|f| f.pointer.as_str()).collect();
    assert_eq!(pointers, ["/limits/max_tool_calls", "/limits/max_cost"]);
    assert!(
        a010.iter()
            .all(|f| f.severity == weft_core::Severity::Error)
    );
    assert!(
        a010[0].message.contains("7 tool calls"),
        "{}",
        a010[0].message
    );
    assert_eq!(
        a010[1].witness.as_deref(),
        Some(&["split".to_string(), "short".to_string()][..])
    );

    let within = CHOICE.replacen(
        r#""graph_type":"acyclic","#,
        r#""graph_type":"acyclic","limits":{"max_tool_calls":7,"max_llm_calls":2,"max_cost":2.5},"#,
        1,
    );
    let r = analyze_with(&plan(&within), vec![]);
    assert!(r.findings.iter().all(|f| f.code != "A010"), "{r:#?}");
}

#[test]
fn reactive_plans_get_properties_but_no_bound() {
    let p = plan(
        r#"{"plan_name":"loop","graph_type":"reactive",
          "events":{"tick":{"kind":"input"},"out":{}},
          "steps":{
            "pay":{"on":["tick"],"action":"crm.charge","emits":["out"]},
            "again":{"on":["out"],"action":"noop","emits":["tick"]}}}"#,
    );
    let r = analyze_with(&p, vec![]);
    let g = r.governance.as_ref().unwrap();
    assert!(g.bound.is_none());
    assert_eq!(coverage(&r).holds, Some(false));
}

#[test]
fn a_limit_stops_the_checks_with_an_unknown_answer() {
    let p = plan(UNAPPROVED);
    let gov = Governance::from_catalog(&catalog(), required_coverage());
    let limited = |max_states| {
        analyze_plan(
            &p,
            &AnalysisOptions {
                max_states,
                governance: Some(Arc::new(gov.clone())),
                ..AnalysisOptions::default()
            },
        )
    };
    // One marking is not enough to reach the charge: undecided, which a requirement reports.
    let r = limited(1);
    assert_eq!(coverage(&r).holds, None);
    let f = r.findings.iter().find(|f| f.code == "A009").unwrap();
    assert!(f.message.contains("could not be decided"), "{}", f.message);
    assert_eq!(coverage(&limited(2)).holds, Some(false));
    let wide = plan(
        r#"{"plan_name":"wide","graph_type":"acyclic",
          "events":{"start":{},"a":{},"b":{},"c":{},"d":{},"j":{},"done":{"kind":"output"}},
          "steps":{
            "fan":{"on":["start"],"action":"noop","emits":["a","b","c","d"]},
            "pa":{"on":["a"],"action":"noop","emits":["j"]},
            "pb":{"on":["b"],"action":"noop","emits":["j"]},
            "pc":{"on":["c"],"action":"noop","emits":["j"]},
            "pd":{"on":["d"],"action":"noop","emits":["j"]},
            "join":{"on":["j"],"action":"noop","emits":["done"]}}}"#,
    );
    let gov = Governance::from_catalog(&catalog(), vec![]);
    let r = analyze_plan(
        &wide,
        &AnalysisOptions {
            max_states: 3,
            governance: Some(Arc::new(gov)),
            ..AnalysisOptions::default()
        },
    );
    assert!(r.governance.as_ref().unwrap().bound.is_none());
}

#[test]
fn a_denied_listener_is_a_path_where_the_call_never_ran() {
    // The write is approved; its denial goes to `charge.denied`, whose handler sends nothing.
    let p = plan(
        r#"{"plan_name":"pay","graph_type":"acyclic",
          "events":{"start":{},"charge.denied":{},"done":{"kind":"output"},"refused":{"kind":"output"}},
          "steps":{
            "charge":{"on":["start"],"action":"crm.charge","emits":["done"],"approval":{}},
            "sorry":{"on":["charge.denied"],"action":"noop","emits":["refused"]}}}"#,
    );
    let n = net(&p);
    let denial = n
        .transitions
        .iter()
        .find(|t| t.role == weft_analysis::Role::Denial)
        .expect("a denial variant");
    assert_eq!(denial.step.as_deref(), Some("charge"));
    let r = analyze_with(&p, required_coverage());
    assert_eq!(coverage(&r).holds, Some(true));
    assert_eq!(r.verdict, weft_analysis::Verdict::Sound, "{r:#?}");
    // A denied call costs nothing: the most expensive run is the one that charges.
    let b = r.governance.as_ref().unwrap().bound.as_ref().unwrap();
    assert_eq!(b.cost.as_ref().unwrap().witness, ["charge"]);
    assert_eq!(b.tool_calls.max, 1.0);
}
