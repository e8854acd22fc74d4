//! The cost of the policy stage per tool call (issue #25): `Policy::decide` with a realistic
//! bundle (`realistic.rego`: 21 `deny` and 3 `require_approval` rules over tenant, tool,
//! effect class, host, attempt and budget) on an allowed, a denied and an approval-needing
//! input, with an allow-all bundle, and the cost of building the input document
//! (`call_input`). divan gives medians and means; p99 comes from
//! `cargo run --release -p weft-policy --example policy_latency`.
//!
//! Run: `cargo bench -p weft-policy --bench decide`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, LazyLock};

use divan::{Bencher, black_box};
use serde_json::{Value, json};
use weft_policy::{Decision, Policy, call_input};
use weft_tools::{Effect, ToolContext, ToolSpec};

const REALISTIC: &str = include_str!("realistic.rego");
/// `decide` allows when `deny` is an empty set (an absent `deny` is an evaluation error).
const ALLOW_ALL: &str = "package weft\n\ndeny := set()\n";

fn main() {
    divan::main();
}

fn policy(text: &str) -> Policy {
    Policy::from_sources(vec![("weft.rego".into(), text.into())]).expect("the bundle compiles")
}

static REALISTIC_POLICY: LazyLock<Policy> = LazyLock::new(|| policy(REALISTIC));
static ALLOW_ALL_POLICY: LazyLock<Policy> = LazyLock::new(|| policy(ALLOW_ALL));

fn ctx() -> ToolContext {
    ToolContext {
        tenant: Arc::from("acme"),
        instance: Arc::from("i01J8ZQ4W7Y2N3K5M6P7R8S9T0"),
        plan: Arc::from("billing"),
        step: Arc::from("fetch_invoice"),
        ..ToolContext::detached("fetch_invoice")
    }
}

fn http_args() -> Value {
    json!({"url": "https://api.github.com/repos/acme/weft/issues?state=open",
           "method": "GET", "headers": {"accept": "application/json"}})
}

/// `call_input` plus a `budget` object (not in the input document yet; the bundle reads it
/// with `object.get`).
fn with_budget(mut input: Value) -> Value {
    input["budget"] = json!({"tool_calls": 40, "cost_cents": 500});
    input
}

fn allowed() -> Value {
    with_budget(call_input(
        &ctx(),
        &ToolSpec::new("http.request", Effect::Read, true),
        &http_args(),
    ))
}

/// An SSRF attempt: four reasons (plain http, an IP literal, the metadata host, not listed).
fn denied() -> Value {
    with_budget(call_input(
        &ctx(),
        &ToolSpec::new("http.request", Effect::Write, false),
        &json!({"url": "http://169.254.169.254/latest/meta-data/", "method": "POST"}),
    ))
}

fn approval() -> Value {
    with_budget(call_input(
        &ctx(),
        &ToolSpec::new("payments.charge", Effect::Write, false),
        &json!({"customer": "cus_123", "amount_cents": 120_000, "currency": "eur"}),
    ))
}

/// The realistic bundle, allowed: `deny` (empty) then `require_approval` (empty).
#[divan::bench]
fn realistic_allowed(bencher: Bencher) {
    let policy = &*REALISTIC_POLICY;
    let input = allowed();
    assert_eq!(policy.decide(&input), Decision::Allow);
    bencher.bench_local(|| policy.decide(black_box(&input)));
}

/// The realistic bundle, denied: `deny` only.
#[divan::bench]
fn realistic_denied(bencher: Bencher) {
    let policy = &*REALISTIC_POLICY;
    let input = denied();
    assert!(matches!(policy.decide(&input), Decision::Deny(r) if r.len() == 4));
    bencher.bench_local(|| policy.decide(black_box(&input)));
}

/// The realistic bundle, a charge over the tenant's threshold: `deny`, `require_approval`
/// and `approval_timeout_ms`.
#[divan::bench]
fn realistic_needs_approval(bencher: Bencher) {
    let policy = &*REALISTIC_POLICY;
    let input = approval();
    assert!(matches!(
        policy.decide(&input),
        Decision::RequireApproval { .. }
    ));
    bencher.bench_local(|| policy.decide(black_box(&input)));
}

/// `deny := set()`: the floor of a decision (one evaluation, nothing to match).
#[divan::bench]
fn allow_all(bencher: Bencher) {
    let policy = &*ALLOW_ALL_POLICY;
    let input = denied();
    assert_eq!(policy.decide(&input), Decision::Allow);
    bencher.bench_local(|| policy.decide(black_box(&input)));
}

/// Building the input document of a call, as the link does before deciding.
#[divan::bench]
fn build_input(bencher: Bencher) {
    let ctx = ctx();
    let spec = ToolSpec::new("http.request", Effect::Read, true);
    let args = http_args();
    bencher.bench_local(|| call_input(black_box(&ctx), black_box(&spec), black_box(&args)));
}

/// Loading the realistic bundle (once per bundle, not per call).
#[divan::bench]
fn compile_realistic() -> Policy {
    policy(black_box(REALISTIC))
}
