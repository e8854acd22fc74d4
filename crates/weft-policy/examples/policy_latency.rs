//! Tail latency of the policy stage (issue #25): divan reports medians and means, the issue
//! asks for p99 (goal: under 20 µs per tool call). This times 100,000 calls of
//! `Policy::decide` one by one (after a warm-up) and prints p50/p90/p99/p99.9/max in µs, for
//! the realistic bundle (`benches/realistic.rego`) on an allowed, a denied and an
//! approval-needing input, and for an allow-all bundle; then it takes a decision apart (engine
//! clone, input conversion, evaluation, result conversion; rows marked "old" are what the
//! library did before a80488b, which prepares the engine once) and times a prototype built on
//! regorus directly, which gives the same decisions, and the cost of each rule alone.
//! `Policy::decide` uses weft's compiled rules (`src/compiled.rs`) for a bundle they cover;
//! the rows marked "interpreter" are the same bundle on regorus's interpreter alone.
//!
//! Run: `cargo run --release -p weft-policy --example policy_latency`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_policy::{APPROVAL_RULE, DENY_RULE, Decision, EVAL_LIMIT, Policy, PolicyLink, call_input};
use weft_tools::{BoxFuture, Effect, Interceptor, Tool, ToolContext, ToolError, ToolSpec};

const REALISTIC: &str = include_str!("../benches/realistic.rego");
/// `decide` allows when `deny` is an empty set (an absent `deny` is an evaluation error).
const ALLOW_ALL: &str = "package weft\n\ndeny := set()\n";
const WARMUP: usize = 10_000;
const CALLS: usize = 100_000;

fn main() {
    let realistic = policy(REALISTIC);
    let allow_all = policy(ALLOW_ALL);
    let inputs = Inputs::new();
    show_decisions(&realistic, &allow_all, &inputs);

    println!(
        "\n{CALLS} calls each after {WARMUP} warm-up calls, µs per call ({} cores, load average {})",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    header();
    measure("Instant::now overhead (empty)", || {});
    println!(
        "-- Policy::decide (the library as built; realistic evaluated by {:?}) --",
        realistic.evaluator()
    );
    measure_realistic(&realistic, &inputs, "");
    measure("allow-all bundle (`deny := set()`)", || {
        black_box(allow_all.decide(black_box(&inputs.allowed)));
    });
    println!("-- the same, regorus's interpreter alone (Policy::interpreted) --");
    measure_realistic(&realistic.interpreted(), &inputs, ", interpreter");
    let bare = policy("package weft\n");
    measure("`package weft` alone (no deny rule)", || {
        black_box(bare.decide(black_box(&inputs.allowed)));
    });
    println!("-- the policy link's whole stage (input document + decision), `call_now` --");
    let linked = linked_tool(&realistic);
    let linked_all = linked_tool(&allow_all);
    measure("realistic, allowed, through the link", || {
        black_box(linked.call_now(inputs.ctx.clone(), black_box(inputs.http_args.clone())))
            .unwrap();
    });
    measure("allow-all, through the link", || {
        black_box(linked_all.call_now(inputs.ctx.clone(), black_box(inputs.http_args.clone())))
            .unwrap();
    });
    let evaluated_all = policy(&format!("{ALLOW_ALL}# evaluated for each input\n"));
    measure("allow-all evaluated per call (not constant)", || {
        black_box(evaluated_all.decide(black_box(&inputs.allowed)));
    });

    breakdown(&inputs);

    println!("-- prototype: prepared engine, direct conversions --");
    let fast = FastPolicy::new(REALISTIC);
    let fast_all = FastPolicy::new(ALLOW_ALL);
    for (input, expected) in [
        (&inputs.allowed, realistic.decide(&inputs.allowed)),
        (&inputs.denied, realistic.decide(&inputs.denied)),
        (&inputs.approval, realistic.decide(&inputs.approval)),
    ] {
        assert_eq!(
            fast.decide(input),
            expected,
            "the prototype decides the same"
        );
    }
    assert_eq!(fast_all.decide(&inputs.denied), Decision::Allow);
    measure("realistic, allowed", || {
        black_box(fast.decide(black_box(&inputs.allowed)));
    });
    measure("realistic, denied", || {
        black_box(fast.decide(black_box(&inputs.denied)));
    });
    measure("realistic, needs approval", || {
        black_box(fast.decide(black_box(&inputs.approval)));
    });
    measure("allow-all bundle", || {
        black_box(fast_all.decide(black_box(&inputs.allowed)));
    });
    let ctx = inputs.ctx.clone();
    measure("call_input + realistic allowed", || {
        let input = call_input(&ctx, &inputs.http_spec, &inputs.http_args);
        black_box(fast.decide(black_box(&input)));
    });

    println!("-- prototype + host parsed through variables (tuned bundle) --");
    let tuned_text = tuned(REALISTIC);
    let tuned_policy = FastPolicy::new(&tuned_text);
    for input in [&inputs.allowed, &inputs.denied, &inputs.approval] {
        assert_eq!(tuned_policy.decide(input), realistic.decide(input));
    }
    measure("tuned, allowed", || {
        black_box(tuned_policy.decide(black_box(&inputs.allowed)));
    });
    measure("tuned, denied", || {
        black_box(tuned_policy.decide(black_box(&inputs.denied)));
    });
    let tuned_lib = policy(&tuned_text);
    measure("tuned, allowed, through Policy::decide", || {
        black_box(tuned_lib.decide(black_box(&inputs.allowed)));
    });

    if std::env::args().nth(1).is_none() {
        per_rule(&inputs);
    }
}

/// `Policy::decide` of the realistic bundle on its allowed, denied and approval inputs.
fn measure_realistic(policy: &Policy, inputs: &Inputs, suffix: &str) {
    for (what, input) in [
        ("allowed (deny + require_approval)", &inputs.allowed),
        ("denied (4 reasons)", &inputs.denied),
        ("needs approval (3 rules)", &inputs.approval),
    ] {
        measure(&format!("realistic, {what}{suffix}"), || {
            black_box(policy.decide(black_box(input)));
        });
    }
}

/// The fixture with the host parsed through local variables. Indexing a call's result with a
/// number (`split(x, "/")[2]`) makes regorus 0.11 format the whole call expression with
/// `{:?}` into an error it then drops (`get_path_string`, from
/// `eval_chained_ref_dot_or_brack`), on every evaluation.
fn tuned(text: &str) -> String {
    let from = "authority := split(input.args.url, \"/\")[2] if http_call\n\n\
                host := lower(split(split(authority, \"@\")[count(split(authority, \"@\")) - 1], \":\")[0])\n";
    let to = "authority := parts[2] if {\n\thttp_call\n\tparts := split(input.args.url, \"/\")\n}\n\n\
              host := lower(hp[0]) if {\n\tat := split(authority, \"@\")\n\thp := split(at[count(at) - 1], \":\")\n}\n";
    assert!(text.contains(from), "the fixture's host parsing changed");
    text.replace(from, to)
}

/// The median cost of each rule of the fixture alone (with the definitions it uses), on a
/// prepared engine: where the evaluation time goes.
fn per_rule(inputs: &Inputs) {
    let blocks: Vec<&str> = REALISTIC.split("\n\n").collect();
    let is_rule =
        |b: &str| b.starts_with("deny contains") || b.starts_with("require_approval contains");
    let preamble: String = blocks
        .iter()
        .filter(|b| !is_rule(b))
        .map(|b| format!("{b}\n\n"))
        .collect();
    let allowed = to_rego(&inputs.allowed);
    let denied = to_rego(&inputs.denied);
    let median = |text: &str, rule: &str, input: &regorus::Value| {
        let ready = prepared(text);
        let samples = time(20_000, || {
            let mut e = ready.clone();
            e.set_input(input.clone());
            black_box(e.eval_rule(rule.to_string()).unwrap());
        });
        at(&samples, 0.5)
    };
    println!("-- each rule alone, median µs (clone + set_input + eval_rule, prepared) --");
    println!("{:<64} {:>8} {:>8}", "", "allowed", "denied");
    let base = format!("{preamble}deny contains \"never\" if false\n");
    println!(
        "{:<64} {:>8.2} {:>8.2}",
        "(definitions only, `deny contains \"never\" if false`)",
        median(&base, DENY_RULE, &allowed),
        median(&base, DENY_RULE, &denied)
    );
    for block in blocks.iter().filter(|b| is_rule(b)) {
        let rule = if block.starts_with("deny") {
            DENY_RULE
        } else {
            APPROVAL_RULE
        };
        let text = format!("{preamble}{block}\n");
        let label: String = block
            .lines()
            .take(3)
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(64)
            .collect();
        println!(
            "{label:<64} {:>8.2} {:>8.2}",
            median(&text, rule, &allowed),
            median(&text, rule, &denied)
        );
    }
}

/// A read-only `http.request` that answers `null`, behind `policy`'s link.
fn linked_tool(policy: &Policy) -> Arc<dyn Tool> {
    struct Null(ToolSpec);
    impl Tool for Null {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn call(&self, _: ToolContext, _: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
            Box::pin(std::future::ready(Ok(Value::Null)))
        }
        fn call_now(&self, _: ToolContext, _: Value) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }
    PolicyLink::new(policy.clone()).wrap(Arc::new(Null(ToolSpec::new(
        "http.request",
        Effect::Read,
        true,
    ))))
}

fn policy(text: &str) -> Policy {
    Policy::from_sources(vec![("weft.rego".into(), text.into())]).expect("the bundle compiles")
}

/// The documents the link would build (`call_input`), plus a `budget` object (not in the
/// input document yet; the bundle reads it with `object.get`).
struct Inputs {
    ctx: ToolContext,
    http_spec: ToolSpec,
    http_args: Value,
    allowed: Value,
    denied: Value,
    approval: Value,
}

impl Inputs {
    fn new() -> Self {
        let ctx = ToolContext {
            tenant: Arc::from("acme"),
            instance: Arc::from("i01J8ZQ4W7Y2N3K5M6P7R8S9T0"),
            plan: Arc::from("billing"),
            step: Arc::from("fetch_invoice"),
            ..ToolContext::detached("fetch_invoice")
        };
        let http_spec = ToolSpec::new("http.request", Effect::Read, true);
        let http_args = json!({"url": "https://api.github.com/repos/acme/weft/issues?state=open",
                               "method": "GET", "headers": {"accept": "application/json"}});
        let budget = json!({"tool_calls": 40, "cost_cents": 500});
        let mut allowed = call_input(&ctx, &http_spec, &http_args);
        allowed["budget"] = budget.clone();
        // An SSRF attempt: plain http, an IP literal, the metadata host, not on the list.
        let mut denied = call_input(
            &ctx,
            &ToolSpec::new("http.request", Effect::Write, false),
            &json!({"url": "http://169.254.169.254/latest/meta-data/", "method": "POST"}),
        );
        denied["budget"] = budget.clone();
        let mut approval = call_input(
            &ctx,
            &ToolSpec::new("payments.charge", Effect::Write, false),
            &json!({"customer": "cus_123", "amount_cents": 120_000, "currency": "eur"}),
        );
        approval["budget"] = budget;
        Inputs {
            ctx,
            http_spec,
            http_args,
            allowed,
            denied,
            approval,
        }
    }
}

fn show_decisions(realistic: &Policy, allow_all: &Policy, inputs: &Inputs) {
    println!("decisions:");
    println!(
        "  realistic, allowed:  {:?}",
        realistic.decide(&inputs.allowed)
    );
    println!(
        "  realistic, denied:   {:?}",
        realistic.decide(&inputs.denied)
    );
    println!(
        "  realistic, approval: {:?}",
        realistic.decide(&inputs.approval)
    );
    println!(
        "  allow-all:           {:?}",
        allow_all.decide(&inputs.denied)
    );
    let bare = policy("package weft\n");
    println!(
        "  `package weft` alone (no deny rule): {:?}",
        bare.decide(&inputs.allowed)
    );
    assert_eq!(realistic.decide(&inputs.allowed), Decision::Allow);
    assert!(matches!(realistic.decide(&inputs.denied), Decision::Deny(r) if r.len() == 4));
    assert!(matches!(
        realistic.decide(&inputs.approval),
        Decision::RequireApproval { .. }
    ));
    assert_eq!(allow_all.decide(&inputs.denied), Decision::Allow);
}

fn header() {
    println!(
        "{:<48} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
}

/// Times `CALLS` calls of `f` one by one, after `WARMUP` untimed ones; with an argument,
/// only the measures whose name contains it (e.g. to profile one under `perf record`).
fn measure(name: &str, f: impl FnMut()) {
    if std::env::args()
        .nth(1)
        .is_some_and(|only| !name.contains(&only))
    {
        return;
    }
    let samples = time(CALLS, f);
    println!(
        "{name:<48} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2}",
        at(&samples, 0.50),
        at(&samples, 0.90),
        at(&samples, 0.99),
        at(&samples, 0.999),
        us(samples[samples.len() - 1])
    );
}

/// `calls` timings of `f`, sorted, after `WARMUP` untimed calls.
fn time(calls: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..WARMUP {
        f();
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        f();
        samples.push(start.elapsed());
    }
    samples.sort_unstable();
    samples
}

/// The `q` quantile of sorted samples, in µs.
fn at(samples: &[Duration], q: f64) -> f64 {
    let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
    us(samples[i])
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// An engine set up as `Policy::from_sources` set it up before a80488b (never evaluated, so
/// every clone analyses the modules again).
fn engine(text: &str) -> regorus::Engine {
    let mut engine = regorus::Engine::new();
    engine.set_execution_timer_config(regorus::utils::limits::ExecutionTimerConfig {
        limit: EVAL_LIMIT,
        check_interval: std::num::NonZeroU32::MIN.saturating_add(99),
    });
    engine
        .add_policy("weft.rego".into(), text.into())
        .expect("compiles");
    engine
}

/// An engine after one evaluation: regorus analyses the modules (schedule, functions, rules,
/// loop hoisting) on the first evaluation and keeps the result, which clones share.
fn prepared(text: &str) -> regorus::Engine {
    let mut engine = engine(text);
    engine.set_input(regorus::Value::new_object());
    let _ = engine.eval_rule(DENY_RULE.to_string());
    engine
}

/// `serde_json::Value` to `regorus::Value` without a JSON text in between.
fn to_rego(v: &Value) -> regorus::Value {
    match v {
        Value::Null => regorus::Value::Null,
        Value::Bool(b) => regorus::Value::from(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                regorus::Value::from(u)
            } else if let Some(i) = n.as_i64() {
                regorus::Value::from(i)
            } else {
                regorus::Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => regorus::Value::from(s.as_str()),
        Value::Array(a) => regorus::Value::from(a.iter().map(to_rego).collect::<Vec<_>>()),
        Value::Object(o) => regorus::Value::from(
            o.iter()
                .map(|(k, v)| (regorus::Value::from(k.as_str()), to_rego(v)))
                .collect::<BTreeMap<_, _>>(),
        ),
    }
}

/// The reasons of a set rule, read from the regorus value (no JSON text in between).
fn reasons(out: &regorus::Value) -> Result<Vec<String>, String> {
    match out {
        regorus::Value::Undefined => Ok(Vec::new()),
        regorus::Value::Set(items) => Ok(items
            .iter()
            .map(|r| match r {
                regorus::Value::String(s) => s.to_string(),
                other => other.to_json_str().unwrap_or_default(),
            })
            .collect()),
        other => Err(format!("not a set: {other}")),
    }
}

/// Times the parts of one `Policy::eval` separately.
fn breakdown(inputs: &Inputs) {
    println!("-- the parts of one Policy::eval (realistic bundle, allowed input) --");
    let raw = engine(REALISTIC);
    let ready = prepared(REALISTIC);
    let input = &inputs.allowed;
    let rego_input = to_rego(input);
    assert_eq!(
        rego_input,
        regorus::Value::from_json_str(&input.to_string()).unwrap()
    );
    measure("clone of an engine never evaluated (old lib)", || {
        black_box(black_box(&raw).clone());
    });
    measure("clone of a prepared engine", || {
        black_box(black_box(&ready).clone());
    });
    measure("input: to_string + from_json_str (old lib)", || {
        black_box(regorus::Value::from_json_str(&black_box(input).to_string()).unwrap());
    });
    measure("input: regorus::Value::deserialize (lib now)", || {
        use serde::Deserialize as _;
        black_box(regorus::Value::deserialize(black_box(input)).unwrap());
    });
    measure("input: direct walk (to_rego)", || {
        black_box(to_rego(black_box(input)));
    });
    measure("clone + set_input + eval_rule, never evaluated", || {
        let mut e = raw.clone();
        e.set_input(rego_input.clone());
        black_box(e.eval_rule(DENY_RULE.to_string()).unwrap());
    });
    measure("clone + set_input + eval_rule, prepared", || {
        let mut e = ready.clone();
        e.set_input(rego_input.clone());
        black_box(e.eval_rule(DENY_RULE.to_string()).unwrap());
    });
    measure("clone + set_input + eval_query, prepared", || {
        let mut e = ready.clone();
        e.set_input(rego_input.clone());
        black_box(e.eval_query(DENY_RULE.to_string(), false).unwrap());
    });
    let mut reused = ready.clone();
    measure("one reused engine: set_input + eval_rule", || {
        reused.set_input(rego_input.clone());
        black_box(reused.eval_rule(DENY_RULE.to_string()).unwrap());
    });
    let mut compiling = prepared(REALISTIC);
    let compiled = compiling
        .compile_with_entrypoint(&DENY_RULE.into())
        .unwrap();
    measure("CompiledPolicy::eval_with_input", || {
        black_box(compiled.eval_with_input(rego_input.clone()).unwrap());
    });
    let mut e = ready.clone();
    e.set_input(rego_input.clone());
    let empty = e.eval_rule(DENY_RULE.to_string()).unwrap();
    let mut e = ready.clone();
    e.set_input(to_rego(&inputs.denied));
    let four = e.eval_rule(DENY_RULE.to_string()).unwrap();
    measure("result, 4 reasons: to_json_str + serde (old)", || {
        let text = black_box(&four).to_json_str().unwrap();
        black_box(serde_json::from_str::<Value>(&text).unwrap());
    });
    measure("result, 4 reasons: read the set (lib now)", || {
        black_box(reasons(black_box(&four)).unwrap());
    });
    measure("result, empty: to_json_str + serde (old)", || {
        let text = black_box(&empty).to_json_str().unwrap();
        black_box(serde_json::from_str::<Value>(&text).unwrap());
    });
    let ctx = inputs.ctx.clone();
    measure("call_input (build the input document)", || {
        black_box(call_input(
            black_box(&ctx),
            &inputs.http_spec,
            black_box(&inputs.http_args),
        ));
    });
}

/// The prototype a80488b follows (engine prepared once, no JSON text, reasons read from the
/// regorus set); it differs from the library in one engine clone for all the rules of a
/// decision and a hand-written input walk (`to_rego`) instead of serde.
struct FastPolicy {
    engine: regorus::Engine,
    approvals: bool,
}

impl FastPolicy {
    fn new(text: &str) -> Self {
        FastPolicy {
            engine: prepared(text),
            approvals: text.contains("\nrequire_approval "),
        }
    }

    fn decide(&self, input: &Value) -> Decision {
        let mut engine = self.engine.clone();
        engine.set_input(to_rego(input));
        let rule = |engine: &mut regorus::Engine, rule: &str| -> Result<Vec<String>, String> {
            let out = engine
                .eval_rule(rule.to_string())
                .map_err(|e| e.to_string())?;
            let mut r = reasons(&out)?;
            r.sort();
            r.dedup();
            Ok(r)
        };
        match rule(&mut engine, DENY_RULE) {
            Ok(r) if r.is_empty() => {}
            Ok(r) => return Decision::Deny(r),
            Err(e) => return Decision::Deny(vec![e]),
        }
        if !self.approvals {
            return Decision::Allow;
        }
        match rule(&mut engine, APPROVAL_RULE) {
            Ok(r) if r.is_empty() => Decision::Allow,
            Ok(reasons) => {
                let timeout_ms = engine
                    .eval_rule(weft_policy::APPROVAL_TIMEOUT_RULE.to_string())
                    .ok()
                    .and_then(|v| v.as_u64().ok());
                Decision::RequireApproval {
                    reasons,
                    timeout_ms,
                }
            }
            Err(e) => Decision::Deny(vec![e]),
        }
    }
}
