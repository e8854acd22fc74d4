//! Validation findings on small plans: each test names the codes and pointers it expects, so
//! a change in what the validator reports shows up as a readable diff.

use serde_json::json;
use weft_core::{Limits, StaticCatalog, parse_plan, validate};

/// Validates `plan` against the built-in tools and returns `code pointer` lines.
fn check(plan: serde_json::Value) -> Vec<String> {
    let bytes = serde_json::to_vec(&plan).expect("serialises");
    let plan = parse_plan(&bytes, &Limits::default()).expect("parses");
    let cat = StaticCatalog::builtin();
    let v = validate(&plan, Some(&cat), &Limits::default());
    assert_eq!(v.net.is_some(), !v.has_errors());
    v.findings
        .iter()
        .map(|f| format!("{} {} {}", f.code, f.severity.as_str(), f.pointer))
        .collect()
}

fn messages(plan: serde_json::Value) -> Vec<String> {
    let bytes = serde_json::to_vec(&plan).expect("serialises");
    let plan = parse_plan(&bytes, &Limits::default()).expect("parses");
    let v = validate(&plan, Some(&StaticCatalog::builtin()), &Limits::default());
    v.findings.iter().map(|f| f.message.clone()).collect()
}

#[test]
fn sample_plan_is_valid() {
    let f = check(
        json!({"plan_name":"sample","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"first":{"on":["start"],"action":"send_email",
        "args":{"to":"a@example.com","subject":"Hi","body":"Test"},"emits":["done"]}}}),
    );
    assert_eq!(f, vec!["V007 info /events/done"]);
}

#[test]
fn unknown_event_and_tool_with_suggestions() {
    let plan = json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"a":{"on":["strat"],"action":"send_emial","emits":["done"]}}});
    assert_eq!(
        check(plan.clone()),
        vec!["V001 error /steps/a/on/0", "V002 error /steps/a/action"]
    );
    let bytes = serde_json::to_vec(&plan).expect("ser");
    let p = parse_plan(&bytes, &Limits::default()).expect("parses");
    let v = validate(&p, Some(&StaticCatalog::builtin()), &Limits::default());
    assert_eq!(
        v.findings[0].hint.as_deref(),
        Some("did you mean `start`? Otherwise declare `strat` under `events`")
    );
    assert_eq!(
        v.findings[1].hint.as_deref(),
        Some("did you mean `send_email`?")
    );
}

#[test]
fn args_must_match_tool_schema_but_templates_are_unknown() {
    let f = check(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"a":{"on":["start"],"action":"send_email","args":{"subject":3,"to":"x"},"emits":["done"]},
                 "b":{"on":["start"],"action":"send_email","args":{"subject":"${start.s}","to":"${start.to}"},"emits":["done"]}}}),
    );
    // Structural checks run only once references and expressions are clean.
    assert_eq!(f, vec!["V003 error /steps/a/args/subject"]);
}

#[test]
fn cycle_in_acyclic_plan_is_named() {
    let plan = json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"x":{},"y":{}},
        "steps":{"a":{"on":["start"],"action":"noop","emits":["x"]},
                 "b":{"on":["x"],"action":"noop","emits":["y"]},
                 "c":{"on":["y"],"action":"noop","emits":["x"]}}});
    let f = check(plan.clone());
    assert!(
        f.contains(&"V004 error /steps/b/emits".to_string()),
        "{f:?}"
    );
    let m = messages(plan);
    assert!(
        m.iter()
            .any(|m| m == "acyclic plan has a cycle: `b` → `y` → `c` → `x`"),
        "{m:?}"
    );
    // The same net is fine when reactive.
    let reactive = json!({"plan_name":"p","graph_type":"reactive","events":{"start":{},"x":{},"y":{}},
        "steps":{"a":{"on":["start"],"action":"noop","emits":["x"]},
                 "b":{"on":["x"],"action":"noop","emits":["y"]},
                 "c":{"on":["y"],"action":"noop","emits":["x"]}}});
    assert!(check(reactive).iter().all(|l| !l.starts_with("V004")));
}

#[test]
fn never_enabled_never_emitted_never_consumed() {
    let f = check(json!({"plan_name":"p","graph_type":"acyclic",
        "events":{"start":{},"approval":{},"done":{"kind":"output"},"spare":{}},
        "steps":{"a":{"on":["start","approval"],"action":"noop","emits":["done"]}}}));
    assert_eq!(
        f,
        vec![
            "V005 error /steps/a/on",
            "V006 warning /events/approval",
            "V006 warning /events/spare",
            "V007 warning /events/spare",
        ]
    );
}

#[test]
fn bad_expressions_point_at_step_and_field() {
    let f = check(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"a":{"on":["start"],"action":"log","guard":"start.x ==","args":{"message":"hi ${start.}"},
                      "emits":[{"event":"done","when":"1 +"}]}}}),
    );
    assert_eq!(
        f,
        vec![
            "V008 error /steps/a/args/message",
            "V008 error /steps/a/guard",
            "V008 error /steps/a/emits/0/when",
        ]
    );
}

#[test]
fn constant_non_boolean_guard() {
    let f = check(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"a":{"on":["start"],"action":"noop","guard":"1 + 1","emits":["done"]},
                 "b":{"on":["start"],"action":"noop","guard":"'yes'","emits":["done"]},
                 "c":{"on":["start"],"action":"noop","guard":"start.ok","emits":["done"]}}}),
    );
    assert_eq!(
        f,
        vec!["V012 error /steps/a/guard", "V012 error /steps/b/guard"]
    );
}

#[test]
fn names_and_policies() {
    let long = "e".repeat(10_000);
    let f = check(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"":{}, long.clone():{}},
        "steps":{"a":{"on":["start"],"action":"noop","emits":["", long],"retry":{"max":5,"multiplier":0.5},"timeout_ms":0}}}),
    );
    assert!(f.contains(&"V009 error /events/".to_string()), "{f:?}");
    assert!(
        f.iter().filter(|l| l.starts_with("V009")).count() == 2,
        "{f:?}"
    );
    assert!(
        f.contains(&"V015 error /steps/a/retry".to_string()),
        "{f:?}"
    );
    assert!(
        f.contains(&"V015 error /steps/a/timeout_ms".to_string()),
        "{f:?}"
    );
}

#[test]
fn no_start_no_inputs_duplicate_inputs_and_empty_plan() {
    assert_eq!(
        check(json!({"plan_name":"p","graph_type":"acyclic","events":{"go":{}},"steps":{}})),
        vec!["V016 error /steps", "V011 error /events"]
    );
    let f = check(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"a":{"on":[],"action":"noop","emits":["done"]},"b":{"on":["start","start"],"action":"noop"}}}),
    );
    assert_eq!(
        f,
        vec!["V010 error /steps/a/on", "V013 error /steps/b/on/1"]
    );
}

#[test]
fn failed_event_and_on_fail_targets_count_as_produced() {
    let f = check(json!({"plan_name":"p","graph_type":"acyclic",
        "events":{"start":{},"done":{"kind":"output"},"a.failed":{},"oops":{},"handled":{"kind":"output"}},
        "steps":{"a":{"on":["start"],"action":"fail","emits":["done"]},
                 "b":{"on":["start"],"action":"fail","emits":["done"],"on_fail":"emit:oops"},
                 "h":{"on":["a.failed"],"action":"log","emits":["handled"]},
                 "k":{"on":["oops"],"action":"log","emits":["handled"]}}}));
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn invalid_event_schema() {
    let f = check(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{"schema":{"type":"nonsense"}},"done":{}},
        "steps":{"a":{"on":["start"],"action":"noop","emits":["done"]}}}),
    );
    assert_eq!(f, vec!["V014 error /events/start/schema"]);
    // A pattern that needs backtracking (a backreference) is refused too: checking a payload
    // against it could take time exponential in the payload's length.
    let f = check(json!({"plan_name":"p","graph_type":"acyclic",
        "events":{"start":{"schema":{"properties":{"x":{"pattern":"^(a|a)*\\1$"}}}},"done":{}},
        "steps":{"a":{"on":["start"],"action":"noop","emits":["done"]}}}));
    assert_eq!(f, vec!["V014 error /events/start/schema"]);
}

/// An emit's literal data is checked against its event's schema where it is written; the
/// templated parts are only known when the step runs.
#[test]
fn emit_data_that_cannot_match_its_event_schema() {
    let plan = |data: serde_json::Value| {
        json!({"plan_name":"p","graph_type":"acyclic",
            "events":{"start":{},"done":{"kind":"output","schema":{"type":"object","required":["n","tag"],
                "properties":{"n":{"type":"integer"},"tag":{"enum":["a","b"]}}}}},
            "steps":{"a":{"on":["start"],"action":"noop","emits":[{"event":"done","data":data}]}}})
    };
    assert_eq!(
        check(plan(json!({"n": "${start.n}", "tag": "c"}))),
        vec!["V021 error /steps/a/emits/0/data/tag"]
    );
    assert_eq!(
        check(plan(json!({"tag": "a"}))),
        vec!["V021 error /steps/a/emits/0/data"]
    );
    assert_eq!(
        check(plan(json!({"n": "${start.n}", "tag": "a"}))),
        Vec::<String>::new()
    );
    let m = messages(plan(json!({"n": 1, "tag": "c"})));
    assert!(
        m.iter()
            .any(|m| m.contains("`done`") && m.contains("step `a`")),
        "{m:?}"
    );
}

#[test]
fn net_is_compiled_with_ids() {
    let plan = parse_plan(br#"{"plan_name":"p","graph_type":"acyclic","events":{"start":{},"x":{},"done":{}},
        "steps":{"a":{"on":["start"],"action":"noop","emits":["x"]},"b":{"on":["x"],"action":"noop","emits":["done"]}}}"#,
        &Limits::default()).expect("parses");
    let v = validate(&plan, None, &Limits::default());
    let net = v.net.expect("valid");
    assert_eq!(net.initial, vec![0]);
    let x = net.event_id("x").expect("x");
    assert_eq!(net.event(x).consumers, vec![net.step_id("b").expect("b")]);
    assert!(net.event(net.event_id("done").expect("done")).is_output);
}

#[test]
fn expressions_may_only_read_inputs() {
    let f = check(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"a":{},"done":{}},
        "steps":{"s1":{"on":["start"],"action":"echo","emits":["a"]},
                 "s2":{"on":["a"],"action":"echo","guard":"start.ok && a.items.all(i, i > 0) && type(a.n) == int",
                       "args":{"x":"${result.y}","ok":"${a.n + size(inputs) + size(instance)}"},
                       "emits":[{"event":"done","when":"result.y > 0","data":{"v":"${strat.v}"}}]}}}),
    );
    assert_eq!(
        f,
        vec![
            "V017 error /steps/s2/guard",
            "V017 error /steps/s2/args",
            "V017 error /steps/s2/emits/0/data",
        ]
    );
    let m = messages(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"a":{},"done":{}},
        "steps":{"s1":{"on":["start"],"action":"echo","emits":["a"]},
                 "s2":{"on":["a"],"action":"echo","guard":"start.ok","emits":["done"]}}}),
    );
    assert_eq!(
        m,
        vec!["the guard of step `s2` refers to `start`, which is not one of its inputs (`a`)"]
    );
}

/// Issue #26: a misspelt `inputs["…"]` key is caught like a misspelt name (it used to pass
/// validation and fail at run time).
#[test]
fn inputs_keys_must_be_inputs() {
    let plan = |guard: &str, args: &str| {
        json!({"plan_name":"p","graph_type":"acyclic",
        "events":{"email.received":{"kind":"input"},"start":{},"done":{}},
        "steps":{"s":{"on":["start","email.received"],"action":"echo","guard":guard,
                      "args":{"x":args},"emits":["done"]}}})
    };
    let f = check(plan(
        "inputs[\"email.recieved\"].ok",
        "${inputs.start.v + inputs['strat'].v}",
    ));
    assert_eq!(
        f,
        vec!["V017 error /steps/s/guard", "V017 error /steps/s/args"]
    );
    let m = messages(plan("inputs[\"email.recieved\"].ok", "x"));
    assert_eq!(
        m,
        vec![
            "the guard of step `s` reads `inputs[\"email.recieved\"]`, but `email.recieved` is not one of its inputs (`start`, `email.received`)"
        ]
    );
    // Correct keys, presence tests and a comprehension rebinding `inputs` pass.
    let ok = check(plan(
        "inputs[\"email.received\"].ok && has(inputs.other) && [1].all(inputs, inputs > 0)",
        "${inputs.start}",
    ));
    assert!(ok.iter().all(|f| !f.contains("error")), "{ok:?}");
}
