//! `weft bench`: the workloads of BENCHMARKS.md (W1 chain, W2 fanout, W3 many), run exactly
//! as written there, plus weft's own `latency` (external event → tool called) and `idle`
//! (a million idle reactive instances). Each prints one JSON line; progress goes to stderr.
//!
//! Protocol (BENCHMARKS.md): build the plan once, warm up untimed, five timed repetitions,
//! report the median; check the last run's result against the expected object outside
//! timing, after the warm-up and after the last repetition.
//!
//! Figures, instruction counts and where the time of a step goes (with the commands that
//! measure them, `examples/prof.rs` under `perf` or callgrind): `docs/performance.md`.

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
