//! W1 chain, W2 fanout and W3 many, exactly as BENCHMARKS.md defines them.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};
use weft_tools::{Chain, Registry, Stage};

use super::sys::{median, peak_rss_mib};
use super::{line, round};
use weft_runtime::{CompiledPlan, Engine, EngineOptions, StartOptions};

const REPS: usize = 5;

/// An engine with the pure built-ins and `bench.add`, no journal, no subscribers.
pub fn engine() -> Engine {
    engine_with(Chain::new())
}

/// [`engine`] with `chain` applied to its tools.
pub fn engine_with(chain: Chain) -> Engine {
    engine_quotas(chain, None)
}

fn engine_quotas(chain: Chain, quotas: Option<Arc<weft_runtime::quota::Quotas>>) -> Engine {
    let mut registry = Registry::new();
    weft_builtins::builtin::register_pure(&mut registry);
    registry.register(super::tool::tool());
    Engine::new(EngineOptions {
        registry: Arc::new(registry),
        chain,
        quotas,
        ..EngineOptions::default()
    })
}

/// The variable that, when set, puts W1–W3 under the operator's budgets (`[budget]`: tenant
/// and plan quotas no run reaches): what counting every call against shared quotas adds.
pub const QUOTAS_VAR: &str = "WEFT_BENCH_QUOTAS";

fn quotas_on() -> bool {
    std::env::var_os(QUOTAS_VAR).is_some_and(|v| !v.is_empty())
}

/// The variable naming a Rego bundle (files or directories, `:`-separated) that W1–W3 run
/// behind, at the chain's policy stage: what the policy adds per step.
pub const POLICY_VAR: &str = "WEFT_BENCH_POLICY";

/// The engine W1–W3 run on: [`engine`], behind the bundle `WEFT_BENCH_POLICY` names.
fn bench_engine() -> Result<(Engine, Option<String>), String> {
    let mut chain = Chain::new();
    let mut name = None;
    if let Some(paths) = std::env::var_os(POLICY_VAR).filter(|p| !p.is_empty()) {
        let paths: Vec<std::path::PathBuf> = std::env::split_paths(&paths).collect();
        let policy = weft_policy::Policy::load(&paths).map_err(|e| format!("{POLICY_VAR}: {e}"))?;
        name = Some(policy.files().join(", "));
        chain = chain.with(
            Stage::Policy,
            Arc::new(weft_policy::PolicyLink::new(policy)),
        );
    }
    let mut quotas = None;
    if quotas_on() {
        let never = weft_core::PlanLimits {
            max_tool_calls: Some(1_000_000_000_000),
            ..weft_core::PlanLimits::default()
        };
        quotas = Some(Arc::new(weft_runtime::quota::Quotas::new(
            weft_runtime::quota::QuotaConfig {
                tenant: Some(never.clone()),
                plan: Some(never),
                period_ms: 86_400_000,
                ..weft_runtime::quota::QuotaConfig::default()
            },
        )));
        chain = chain.with(
            Stage::Budget,
            Arc::new(weft_tools::BudgetLink {
                pausing: false,
                what: "bench quotas",
            }),
        );
    }
    Ok((engine_quotas(chain, quotas), name))
}

fn add_step(on: &[String], key: &str, value: i64, emit: &str) -> Value {
    json!({"on": on, "action": "bench.add", "args": {"key": key, "value": value}, "emits": [emit]})
}

/// `s1 → … → sN`.
pub fn chain_plan(name: &str, n: usize) -> Value {
    let mut events = Map::new();
    let mut steps = Map::new();
    events.insert("start".into(), json!({}));
    for i in 1..=n {
        let input = if i == 1 {
            "start".to_string()
        } else {
            format!("e{}", i - 1)
        };
        let output = if i == n {
            "done".to_string()
        } else {
            format!("e{i}")
        };
        events.insert(
            output.clone(),
            if i == n {
                json!({"kind": "output"})
            } else {
                json!({})
            },
        );
        steps.insert(
            format!("s{i}"),
            add_step(&[input], &format!("s{i}"), i as i64, &output),
        );
    }
    json!({"plan_name": name, "graph_type": "acyclic", "events": events, "steps": steps})
}

/// `start` → `b0…b9` → `join`.
pub fn fanout_plan() -> Value {
    let mut events = Map::new();
    let mut steps = Map::new();
    events.insert("start".into(), json!({}));
    events.insert("started".into(), json!({}));
    steps.insert(
        "start".into(),
        add_step(&["start".into()], "start", 0, "started"),
    );
    let mut joins = Vec::new();
    for j in 0..10 {
        let d = format!("d{j}");
        events.insert(d.clone(), json!({}));
        steps.insert(
            format!("b{j}"),
            add_step(&["started".into()], &format!("b{j}"), j, &d),
        );
        joins.push(d);
    }
    events.insert("done".into(), json!({"kind": "output"}));
    steps.insert("join".into(), add_step(&joins, "join", 10, "done"));
    json!({"plan_name": "fanout", "graph_type": "acyclic", "events": events, "steps": steps})
}

/// The variable that, when set, gives W1–W3's plans `limits` no run reaches: what the budget
/// stage (each call counted before it runs) adds per step.
pub const LIMITS_VAR: &str = "WEFT_BENCH_LIMITS";

fn compile(engine: &Engine, mut doc: Value) -> Result<Arc<CompiledPlan>, String> {
    if std::env::var_os(LIMITS_VAR).is_some_and(|v| !v.is_empty()) {
        doc["limits"] = json!({"max_tool_calls": 1_000_000_000_000u64});
    }
    engine.compile_value(doc).map_err(|e| e.to_string())
}

/// One run: start, drive to the end, read the result.
fn run_once(engine: &Engine, plan: &Arc<CompiledPlan>, r: usize) -> Option<Arc<Value>> {
    let h = engine
        .start_with("bench", plan, json!({"run": r}), StartOptions::default())
        .ok()?;
    let o = match h.outcome_now() {
        Some(o) => o,
        None => futures::executor::block_on(h.wait()),
    };
    o.result("done").cloned()
}

fn check(got: Option<&Arc<Value>>, expected: &Value, what: &str) -> Result<(), String> {
    match got {
        Some(v) if **v == *expected => Ok(()),
        other => Err(format!(
            "{what}: wrong result {} (expected {expected})",
            other.map_or("none".to_string(), |v| v.to_string())
        )),
    }
}

/// Warm-up, five timed repetitions of `runs` runs, correctness checks; returns rep seconds.
fn protocol(
    engine: &Engine,
    plan: &Arc<CompiledPlan>,
    warmup: usize,
    runs: usize,
    expected: impl Fn(usize) -> Value,
) -> Result<Vec<f64>, String> {
    let mut last = None;
    for r in 0..warmup {
        last = run_once(engine, plan, r);
    }
    check(last.as_ref(), &expected(warmup - 1), "after warm-up")?;
    let mut reps = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let t = Instant::now();
        for r in 0..runs {
            last = run_once(engine, plan, r);
        }
        reps.push(t.elapsed().as_secs_f64());
        if last.is_none() {
            return Err("a run produced no result".to_string());
        }
    }
    check(
        last.as_ref(),
        &expected(runs - 1),
        "after the last repetition",
    )?;
    Ok(reps)
}

fn chain_expected(n: usize) -> impl Fn(usize) -> Value {
    move |r| {
        let mut m = Map::new();
        m.insert("run".into(), json!(r));
        for i in 1..=n {
            m.insert(format!("s{i}"), json!(i));
        }
        Value::Object(m)
    }
}

fn extra(reps: &[f64], steps_per_rep: f64) -> (f64, Value) {
    let med = median(reps);
    let e = json!({
        "rep_seconds": reps.iter().map(|x| round(x * 1e6) / 1e6).collect::<Vec<_>>(),
        "median_rep_seconds": med,
        "us_per_step": round(med * 1e6 / steps_per_rep),
        "peak_rss_mib": round(peak_rss_mib()),
    });
    (med, e)
}

/// W1.
pub(crate) fn chain() -> Result<Value, String> {
    let (engine, policy) = bench_engine()?;
    let plan = compile(&engine, chain_plan("chain", 100))?;
    let reps = protocol(&engine, &plan, 10, 1, chain_expected(100))?;
    let (med, mut e) = extra(&reps, 100.0);
    e["policy"] = json!(policy);
    e["limits"] = json!(std::env::var_os(LIMITS_VAR).is_some());
    e["quotas"] = json!(quotas_on());
    Ok(line("chain", "steps_per_second", 100.0 / med, "steps/s", e))
}

/// W2.
pub(crate) fn fanout() -> Result<Value, String> {
    let (engine, policy) = bench_engine()?;
    let plan = compile(&engine, fanout_plan())?;
    let expected = |r: usize| {
        let mut m = Map::new();
        m.insert("run".into(), json!(r));
        m.insert("start".into(), json!(0));
        for j in 0..10 {
            m.insert(format!("b{j}"), json!(j));
        }
        m.insert("join".into(), json!(10));
        Value::Object(m)
    };
    let reps = protocol(&engine, &plan, 100, 1000, expected)?;
    let (med, mut e) = extra(&reps, 12_000.0);
    e["steps_per_second"] = json!(round(12_000.0 / med));
    e["policy"] = json!(policy);
    e["limits"] = json!(std::env::var_os(LIMITS_VAR).is_some());
    e["quotas"] = json!(quotas_on());
    Ok(line(
        "fanout",
        "workflows_per_second",
        1000.0 / med,
        "workflows/s",
        e,
    ))
}

/// W3.
pub(crate) fn many() -> Result<Value, String> {
    let (engine, policy) = bench_engine()?;
    let plan = compile(&engine, chain_plan("many", 5))?;
    let reps = protocol(&engine, &plan, 1000, 10_000, chain_expected(5))?;
    let (med, mut e) = extra(&reps, 50_000.0);
    e["runs_per_second"] = json!(round(10_000.0 / med));
    e["policy"] = json!(policy);
    e["limits"] = json!(std::env::var_os(LIMITS_VAR).is_some());
    e["quotas"] = json!(quotas_on());
    Ok(line(
        "many",
        "steps_per_second",
        50_000.0 / med,
        "steps/s",
        e,
    ))
}
