//! Profiling loop for the bench workloads: `prof WORKLOAD ITERATIONS` runs the workload's
//! runs back to back (no warm-up protocol) so `perf record` / `callgrind` see the hot path.
//! Uses mimalloc, like `bench` and the `weft` binary.

#[global_allocator]
static GLOBAL: weft_alloc::Alloc = weft_alloc::Alloc;

use std::time::Instant;

use serde_json::json;
use weft_bench::engine::workloads as w;
use weft_runtime::StartOptions;

fn main() {
    weft_alloc::disable_transparent_huge_pages();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map(String::as_str).unwrap_or("many");
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let engine = w::engine();
    let doc = match which {
        "chain" => w::chain_plan("chain", 100),
        "fanout" => w::fanout_plan(),
        _ => w::chain_plan("many", 5),
    };
    let plan = engine.compile_value(doc).expect("plan");
    let steps = match which {
        "chain" => 100,
        "fanout" => 12,
        _ => 5,
    };
    let t = Instant::now();
    for r in 0..n {
        let h = engine
            .start_with("bench", &plan, json!({"run": r}), StartOptions::default())
            .expect("the plan takes any input");
        let o = h.outcome_now().expect("settled");
        assert!(o.result("done").is_some());
    }
    let s = t.elapsed().as_secs_f64();
    eprintln!(
        "{which}: {n} runs in {s:.3}s, {:.0} steps/s, {:.3} us/step",
        (n * steps) as f64 / s,
        s * 1e6 / (n * steps) as f64
    );
}
