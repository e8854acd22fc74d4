//! Bundles that never read their input are decided once, when they load, and every call
//! gets that decision: the same one the interpreter gives when it evaluates the bundle for
//! each call. The reference is the same bundle with a comment that mentions `input`, which
//! makes weft evaluate it per call. Generated calls (tenants, tools, effect classes, URLs,
//! arguments, attempts, budgets) exercise the per-call side.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod calls;

use calls::{Gen, call};
use weft_policy::{Decision, Policy};

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

/// The same bundle, made to be evaluated per call (a comment that mentions the input) by
/// the interpreter.
fn per_call(text: &str) -> Policy {
    let p = policy(&format!("{text}\n# evaluated for each input\n"));
    assert!(!p.is_constant());
    p.interpreted()
}

#[test]
fn only_bundles_that_never_mention_input_are_constant() {
    assert!(policy(ALLOW_ALL).is_constant());
    assert!(policy(CLOSED).is_constant());
    assert!(policy(ALWAYS_ASK).is_constant());
    assert!(!policy(REALISTIC).is_constant());
    // Nor is one whose builtin answers differently each time.
    assert!(
        !policy("package weft\n\ndeny contains \"x\" if rand.intn(\"k\", 2) == 0\n").is_constant()
    );
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
