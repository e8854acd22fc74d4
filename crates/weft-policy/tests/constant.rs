//! Bundles that never read their input are decided once, when they load, and every call
//! gets that decision: the same one the interpreter gives when it evaluates the bundle for
//! each call. The reference is the same bundle with a comment that mentions `input`, which
//! makes weft evaluate it per call. Generated calls (tenants, tools, effect classes, URLs,
//! arguments, attempts, budgets) exercise the per-call side.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use weft_policy::{Decision, Policy, call_input};
use weft_tools::{Effect, ToolContext, ToolSpec};

const REALISTIC: &str = include_str!("../benches/realistic.rego");
const ALLOW_ALL: &str = include_str!("../../weft-bench/fixtures/allow-all.rego");

/// A deny set that does not depend on the call.
const CLOSED: &str = "package weft\n\ndeny contains \"closed for maintenance\"\n";

/// A bundle that only asks for approvals, of every call.
const ALWAYS_ASK: &str =
    "package weft\n\nrequire_approval contains \"every call\"\n\napproval_timeout_ms := 5000\n";

fn policy(text: &str) -> Policy {
    Policy::from_sources(vec![("b.rego".into(), text.into())]).expect("compiles")
}

/// A small deterministic generator (xorshift), so a failure is repeatable.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

const TENANTS: &[&str] = &["acme", "globex", "initech", "umbrella", ""];
const TOOLS: &[&str] = &[
    "http.request",
    "http.get",
    "payments.charge",
    "send_email",
    "search",
    "sql.query",
    "llm.complete",
    "shell.exec",
];
const EFFECTS: &[Effect] = &[Effect::Pure, Effect::Read, Effect::Write];
const URLS: &[&str] = &[
    "https://api.github.com/repos/acme/weft",
    "https://api.acme.com:8443/v1/x?y=1",
    "https://user:pw@api.acme.com/",
    "http://169.254.169.254/latest/meta-data/",
    "https://10.1.2.3/",
    "https://evil.example.org/",
    "https://sub.acme.com/path",
    "https://LOCALHOST/",
    "not a url",
    "",
];
const STEPS: &[&str] = &["fetch_invoice", "Charge", "a", "step-2", "notify_all"];

fn args(g: &mut Gen, tool: &str) -> Value {
    match g.next() % 9 {
        0 => json!({}),
        1 => json!({"url": 42}),
        2 => json!({"to": g.pick(&["ann@acme.com", "bob@ACME.COM", "eve@evil.org"]) }),
        3 => json!({"query": g.pick(&["select 1", "DROP table x", "alter  t", "truncated"]) }),
        4 => json!({"customer": "c", "amount_cents": g.next() % 200_000, "currency": "eur"}),
        5 => {
            json!({"tags": ["ok", "secret-x", 3, "Secretive"], "addresses": ["10.2.3.4", "192.168.0.1", 7]})
        }
        6 => json!({"headers": {"a": "b", "c": g.pick(&[json!("d"), json!(1), json!(null)])}}),
        _ => {
            let mut a =
                json!({"url": g.pick(URLS), "method": g.pick(&["GET", "post", "DELETE", "PATCH"])});
            if tool == "http.request" && g.next().is_multiple_of(2) {
                a["headers"] = json!({"accept": "application/json"});
            }
            a
        }
    }
}

fn context(g: &mut Gen) -> ToolContext {
    let step = *g.pick(STEPS);
    ToolContext {
        tenant: Arc::from(*g.pick(TENANTS)),
        instance: Arc::from("i01J8ZQ4W7Y2N3K5M6P7R8S9T0"),
        plan: Arc::from(*g.pick(&["billing", "onboarding", ""])),
        step: Arc::from(step),
        attempt: (g.next() % 7 + 1) as u32,
        ..ToolContext::detached(step)
    }
}

/// One generated call's input document (some with a `budget`, as an operator's bundle
/// might be given one).
fn call(g: &mut Gen) -> Value {
    let tool = *g.pick(TOOLS);
    let spec = ToolSpec::new(tool, *g.pick(EFFECTS), g.next().is_multiple_of(2));
    let ctx = context(g);
    let args = args(g, tool);
    let mut doc = call_input(&ctx, &spec, &args);
    if g.next().is_multiple_of(3) {
        doc["budget"] =
            json!({"tool_calls": (g.next() % 4) as i64 - 1, "cost_cents": g.next() % 60});
    }
    doc
}

/// The same bundle, made to be evaluated per call (a comment that mentions the input).
fn per_call(text: &str) -> Policy {
    let p = policy(&format!("{text}\n# evaluated for each input\n"));
    assert!(!p.is_constant());
    p
}

#[test]
fn only_bundles_that_never_mention_input_are_constant() {
    assert!(policy(ALLOW_ALL).is_constant());
    assert!(policy(CLOSED).is_constant());
    assert!(policy(ALWAYS_ASK).is_constant());
    assert!(!policy(REALISTIC).is_constant());
    // A rule reading the input through a helper in another file is still found.
    let two = Policy::from_sources(vec![
        (
            "a.rego".into(),
            "package weft\n\ndeny contains \"no\" if data.helper.bad\n".into(),
        ),
        (
            "b.rego".into(),
            "package helper\n\nbad if input.tenant == \"x\"\n".into(),
        ),
    ])
    .expect("compiles");
    assert!(!two.is_constant());
}

#[test]
fn constant_bundles_decide_every_call_as_evaluating_it_does() {
    let mut g = Gen(7);
    for (text, expected) in [
        (ALLOW_ALL, Decision::Allow),
        (
            CLOSED,
            Decision::Deny(vec!["closed for maintenance".to_string()]),
        ),
        (
            ALWAYS_ASK,
            Decision::RequireApproval {
                reasons: vec!["every call".to_string()],
                timeout_ms: Some(5000),
            },
        ),
    ] {
        let (constant, reference) = (policy(text), per_call(text));
        for _ in 0..300 {
            let doc = call(&mut g);
            assert_eq!(constant.decide(&doc), expected, "{text}");
            assert_eq!(reference.decide(&doc), expected, "{text}");
            let deny_only = match &expected {
                Decision::Deny(_) => expected.clone(),
                _ => Decision::Allow,
            };
            assert_eq!(constant.decide_deny(&doc), deny_only, "{text}");
            assert_eq!(reference.decide_deny(&doc), deny_only, "{text}");
        }
    }
}

/// The generated calls reach every decision of the realistic bundle (the generator is what
/// the test above relies on to vary the input).
#[test]
fn generated_calls_reach_every_decision() {
    let p = policy(REALISTIC);
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    let (mut allowed, mut denied, mut asked) = (0, 0, 0);
    for _ in 0..1000 {
        match p.decide(&call(&mut g)) {
            Decision::Allow => allowed += 1,
            Decision::Deny(_) => denied += 1,
            Decision::RequireApproval { .. } => asked += 1,
        }
    }
    assert!(
        allowed > 10 && denied > 10 && asked > 0,
        "{allowed} allowed, {denied} denied, {asked} asked"
    );
}
