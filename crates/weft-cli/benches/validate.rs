//! Validation benchmark: `parse_plan` + `validate` on a generated 10,000-step plan with a
//! realistic mix (chains, parallel branches and joins, guards on exclusive events, `${…}`
//! args templates, conditional emits, payload shaping). Goal: under 50 ms for parse and
//! validate together, so the LLM critic loop and `weft validate` stay interactive.
//!
//! Run: `cargo bench -p weft-cli --bench validate`.

use serde_json::{Value, json};
use weft_core::{Limits, StaticCatalog, parse_plan, validate};

/// The same allocator as the `weft` binary, so the figures match what users get.
#[global_allocator]
static GLOBAL: weft_alloc::Alloc = weft_alloc::Alloc;

fn main() {
    divan::main();
}

/// Steps per block; the plan is `blocks` blocks chained one after the other.
const STEPS_PER_BLOCK: usize = 10;

/// A plan of `blocks * 10` steps. Block `k` fetches an item, checks it on two parallel
/// branches, joins them (with a conditional audit emit), routes it by guard, stores it,
/// notifies and hands over to block `k + 1`.
fn generate(blocks: usize) -> Vec<u8> {
    let mut events = serde_json::Map::new();
    let mut steps = serde_json::Map::new();
    events.insert("start".into(), json!({"description": "{\"id\": \"...\"}"}));
    for k in 0..blocks {
        let prev = if k == 0 {
            "start".to_string()
        } else {
            format!("b{}_done", k - 1)
        };
        let ev = |s: &str| format!("b{k}_{s}");
        let dotted = |s: &str| format!("b{k}.{s}");
        for name in [
            ev("fetched"),
            dotted("a"),
            dotted("b"),
            ev("joined"),
            ev("audit"),
            ev("routed"),
            ev("stored"),
            ev("notified"),
            ev("done"),
        ] {
            events.insert(name, json!({}));
        }
        events.insert(ev("audited"), json!({"kind": "output"}));
        events.insert(ev("joined"), json!({"consume": "exclusive"}));
        if k + 1 == blocks {
            events.insert(ev("done"), json!({"kind": "output"}));
        }
        let step = |s: &str| format!("b{k}_{s}");
        steps.insert(step("fetch"), json!({
            "on": [prev],
            "action": "http.request",
            "args": {"url": format!("https://api.example.com/items/${{{prev}.id}}?block={k}"), "method": "GET"},
            "timeout_ms": 5000,
            "retry": {"max": 3, "backoff_ms": 100, "multiplier": 2.0},
            "emits": [{"event": ev("fetched"), "data": {"id": format!("${{{prev}.id}}"), "body": "${result.body}"}}]
        }));
        for (branch, threshold) in [("a", 10), ("b", 20)] {
            steps.insert(step(&format!("check_{branch}")), json!({
                "on": [ev("fetched")],
                "action": "echo",
                "args": {"id": format!("${{b{k}_fetched.id}}"), "score": format!("${{size(b{k}_fetched.body) + {threshold}}}")},
                "emits": [dotted(branch)]
            }));
        }
        steps.insert(step("join"), json!({
            "on": [dotted("a"), dotted("b")],
            "action": "echo",
            "args": {
                "id": format!("${{inputs[\"b{k}.a\"].id}}"),
                "amount": format!("${{inputs[\"b{k}.a\"].score + inputs[\"b{k}.b\"].score}}")
            },
            "emits": [
                ev("joined"),
                {"event": ev("audit"), "when": format!("inputs[\"b{k}.a\"].score > {}", 100 + k % 7), "data": {"id": "${result.id}"}}
            ]
        }));
        steps.insert(step("route_high"), json!({
            "on": [ev("joined")],
            "guard": format!("b{k}_joined.amount > {}", 50 + k % 13),
            "action": "log",
            "args": {"message": format!("high value item ${{b{k}_joined.id}}"), "level": "info"},
            "emits": [ev("routed")]
        }));
        steps.insert(
            step("route_low"),
            json!({
                "on": [ev("joined")],
                "guard": format!("b{k}_joined.amount <= {}", 50 + k % 13),
                "action": "log",
                "args": {"message": format!("low value item ${{b{k}_joined.id}}")},
                "emits": [ev("routed")]
            }),
        );
        steps.insert(step("audit"), json!({
            "on": [ev("audit")],
            "action": "send_email",
            "args": {"to": "audit@example.com", "subject": format!("Audit item ${{b{k}_audit.id}} (block {k})")},
            "on_fail": "continue",
            "emits": [ev("audited")]
        }));
        steps.insert(step("store"), json!({
            "on": [ev("routed")],
            "action": "context.put",
            "args": {"key": format!("item-${{b{k}_routed.message}}"), "value": format!("${{b{k}_routed}}")},
            "emits": [ev("stored")]
        }));
        steps.insert(
            step("notify"),
            json!({
                "on": [ev("stored")],
                "action": "log",
                "args": {"message": format!("stored ${{b{k}_stored.key}}")},
                "emits": [ev("notified")]
            }),
        );
        steps.insert(step("done"), json!({
            "on": [ev("notified")],
            "action": "noop",
            "emits": [{"event": ev("done"), "data": {"id": format!("${{b{k}_notified.message}}")}}]
        }));
    }
    let plan = json!({
        "plan_name": "bench",
        "description": "generated by benches/validate.rs",
        "graph_type": "acyclic",
        "events": Value::Object(events),
        "steps": Value::Object(steps),
    });
    serde_json::to_vec_pretty(&plan).unwrap_or_default()
}

fn plan_10k() -> Vec<u8> {
    let bytes = generate(10_000 / STEPS_PER_BLOCK);
    let plan = parse_plan(&bytes, &Limits::default()).expect("generated plan loads");
    assert_eq!(plan.steps.len(), 10_000);
    let v = validate(&plan, Some(&StaticCatalog::builtin()), &Limits::default());
    let errors: Vec<_> = v.findings.iter().filter(|f| f.is_error()).collect();
    assert!(errors.is_empty(), "generated plan has errors: {errors:#?}");
    bytes
}

/// The goal: load and validate together.
#[divan::bench(sample_count = 20)]
fn parse_and_validate_10k_steps(bencher: divan::Bencher) {
    let bytes = plan_10k();
    let catalog = StaticCatalog::builtin();
    let limits = Limits::default();
    bencher
        .counter(divan::counter::BytesCount::new(bytes.len()))
        .bench(|| {
            let plan = parse_plan(divan::black_box(&bytes), &limits).expect("loads");
            validate(&plan, Some(&catalog), &limits)
        });
}

/// Loading alone (limits, UTF-8, depth scan, serde with paths).
#[divan::bench(sample_count = 20)]
fn parse_10k_steps(bencher: divan::Bencher) {
    let bytes = plan_10k();
    let limits = Limits::default();
    bencher.bench(|| parse_plan(divan::black_box(&bytes), &limits).expect("loads"));
}

/// Validation alone, on an already parsed plan.
#[divan::bench(sample_count = 20)]
fn validate_10k_steps(bencher: divan::Bencher) {
    let bytes = plan_10k();
    let limits = Limits::default();
    let plan = parse_plan(&bytes, &limits).expect("loads");
    let catalog = StaticCatalog::builtin();
    bencher.bench(|| validate(divan::black_box(&plan), Some(&catalog), &limits));
}

/// One CEL compile (the ANTLR-generated parser in the `cel` crate), for typical guard and
/// template expressions: the unit cost that dominates `validate` on large plans.
#[divan::bench(args = [
    "start.id",
    "b1_joined.amount > 63",
    "inputs[\"b1.a\"].score + inputs[\"b1.b\"].score",
])]
fn cel_compile_one_expression(bencher: divan::Bencher, src: &str) {
    bencher.bench(|| weft_core::expr::Expr::compile(divan::black_box(src)).expect("compiles"));
}
