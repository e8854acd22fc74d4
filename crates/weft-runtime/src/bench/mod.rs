//! `weft bench`: the workloads of BENCHMARKS.md (W1 chain, W2 fanout, W3 many), run exactly
//! as written there, plus weft's own `latency` (external event → tool called) and `idle`
//! (a million idle reactive instances). Each prints one JSON line; progress goes to stderr.
//!
//! Protocol (BENCHMARKS.md): build the plan once, warm up untimed, five timed repetitions,
//! report the median; check the last run's result against the expected object outside
//! timing, after the warm-up and after the last repetition.
//!
//! # Where the time goes
//! Instructions per step from `valgrind --tool=callgrind` on `examples/prof.rs` (mimalloc),
//! differenced over two run counts so plan compilation drops out; repeatable on a loaded
//! machine, unlike wall-clock figures. After the hot-path work of issue #3 (before → after):
//! W1 chain 6,028 → 3,477, W3 many 7,149 → 4,633, W2 fanout 9,208 → 6,681.
//!
//! A W1 step (3,477) now splits roughly into: completing the firing (`Instance::complete`:
//! ~850, of which ~220 is removing the in-flight record from its `BTreeMap` and ~190 putting
//! the output token, the slot's queue allocating on first use); the tool `bench.add` (~810,
//! half of it `serde_json::Map::insert`: a SipHash of the key and the map's growth);
//! firing (`Instance::next`/`fire`: ~690, the in-flight insert, the taken token, its
//! vector); dispatch glue (the tool's input vector and names, `catch_unwind`, the ready
//! queue: ~250); and per-instance start/outcome/teardown spread over the 100 steps (~500).
//! About six allocations are left per step (~450 instructions of malloc/free).
//! W3 adds ~1,500 per step of per-instance work (cell, instance, marking, outcome, the
//! payload map growing from one key). In W2 the tool is a third of the cost (each branch
//! copies the shared `started` object, the join merges ten objects: SipHash again), and the
//! join's ten-way binding search ~700 per step.
//!
//! What removed the rest: literal args shared per step instead of cloned per firing
//! (`weft_core::Args`), immediate tools called through `Tool::call_inline` so a pure tool
//! never builds its `ToolContext` (five `Arc` clones, the idempotency key, the inputs `Arc`),
//! no binding vector for one-input steps, emitted ids as a range, the plan `Arc` taken once
//! per batch instead of per input, and no hasher state per index-less slot.

mod reactive;
pub mod sys;
pub mod tool;
pub mod workloads;

use std::io::Write;

use serde_json::{Value, json};

/// Workloads run when none are named.
pub const DEFAULT: &[&str] = &["chain", "fanout", "many", "latency", "idle"];

/// Runs the named workloads (all of [`DEFAULT`] when empty), one JSON line each on `out`.
/// Returns an error message for an unknown workload or a failed correctness check.
pub fn run(workloads: &[String], out: &mut dyn Write) -> Result<(), String> {
    let names: Vec<String> = if workloads.is_empty() {
        DEFAULT.iter().map(|s| s.to_string()).collect()
    } else {
        workloads.to_vec()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let _guard = rt.enter();
    for name in &names {
        eprintln!("weft bench: {name} …");
        let line = match name.as_str() {
            "chain" => workloads::chain()?,
            "fanout" => workloads::fanout()?,
            "many" => workloads::many()?,
            "latency" => rt.block_on(reactive::latency())?,
            "idle" => reactive::idle(1_000_000)?,
            other => {
                return Err(format!(
                    "unknown workload `{other}` (known: {})",
                    DEFAULT.join(", ")
                ));
            }
        };
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
        let _ = out.flush();
    }
    Ok(())
}

/// One output line in the BENCHMARKS.md format.
pub(crate) fn line(workload: &str, metric: &str, value: f64, unit: &str, extra: Value) -> Value {
    json!({
        "peer": "weft",
        "version": env!("CARGO_PKG_VERSION"),
        "workload": workload,
        "metric": metric,
        "value": round(value),
        "unit": unit,
        "extra": extra,
    })
}

/// Rounds to three decimals for readable output.
pub(crate) fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
