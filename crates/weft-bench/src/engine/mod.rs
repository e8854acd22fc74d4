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
//! differenced over two run counts so plan compilation drops out (chain 200/1,200 runs,
//! many 2,000/12,000, fanout 500/2,500); repeatable on a loaded machine, unlike wall-clock
//! figures. First hot-path round of issue #3: W1 chain 6,028 → 3,477, W3 many 7,149 → 4,633,
//! W2 fanout 9,208 → 6,681. Second round (measured with the run counts above, which put the
//! starting point at 3,568 / 4,724 / 6,857): W1 3,568 → 2,857, W3 4,724 → 4,031,
//! W2 6,857 → 5,741.
//!
//! Third round (wall time first: `perf record -e cpu-clock` and `perf annotate`, since the
//! instruction count stopped predicting it): the hottest instructions were the locked
//! read-modify-writes of `Arc` counts (~20 cycles each here) and 16-byte stack copies right
//! after narrower stores of the same bytes (store-forwarding stalls from moving 64-byte
//! tokens and 80-byte values through `Option`/`Result` returns). Removed: the tool's `Arc`
//! clone per immediate call (borrowed), the literal args' clone (`InlineArgs::Literal` lends
//! them from the net), the input name's clone (`weft_tools::InputName` borrows the plan's),
//! the correlation's clone in `detach_inputs` and in `emit` (moved along instead), the token
//! staging (`Marking::take_into`; a `TokenQueue` keeps a slot's first token in place; empty
//! slots are built from a constant), the result's moves (wrapped in its `Arc` where the tool
//! returns it), the growth of the per-instance queues of a fan-out (`Net::width`),
//! mimalloc's aligned entry point and its transparent huge pages (`weft-alloc`).
//! Instructions per step (run counts 1,000/3,000 for all three): W1 2,857 → 2,639, W3
//! 4,031 → 3,564, W2 5,741 → 4,815. `weft bench` (three alternating runs of the old and the
//! new binary on one machine): W1 3.03–3.07M → 3.32–4.39M steps/s, W2 128–134k →
//! 177–191k workflows/s, W3 2.16–2.17M → 2.51–2.86M steps/s, peak RSS 24.3–24.9 →
//! 16.9–17.0 MiB. What is left is spread thin; the largest single costs are the tool's
//! payload maps (SipHash of each key, `IndexMap` clone and growth: ~25% of W2), the
//! reference counts a broadcast needs (one per listening slot), the two atomic operations
//! of taking a payload over (`Arc::try_unwrap`), and moving the tool's 80-byte result into
//! its `Arc`.
//!
//! A W1 step (2,857 before the third round) split roughly into: the tool `bench.add` (~780: inserting the key
//! into the payload map is ~380 of it, a SipHash of the key and the probe, since
//! `serde_json::Map` is an `IndexMap` with std's hasher; copying the key ~80);
//! completing the firing (`Instance::complete`: ~580, putting the output token ~170,
//! dropping the in-flight record ~80, the result's `Arc` ~45); firing
//! (`Instance::next`/`fire`: ~540, taking the token ~90, the in-flight insert ~70);
//! dispatch glue (~300: handing the tokens to the tool, names, `catch_unwind`, the ready
//! queue); applying outcomes (~200); and per-instance start/outcome/teardown spread over
//! the 100 steps (~250). About two allocations are left per step (the result's `Arc`, the
//! new key), down from six. W3 adds ~1,200 per step of per-instance work (cell, instance,
//! marking, outcome, the payload map growing from one key). In W2 the tool is still 40%
//! (nine branches copy the shared `started` object; the join inserts nine new keys into a
//! growing map), then putting the broadcast token on ten slots, each queue allocating.
//!
//! What removed it, second round: the in-flight firings in a sorted queue
//! (`weft_core::inflight::InFlightMap`: append, pop the front, binary search otherwise;
//! same serialized form as the `BTreeMap` it replaces) instead of a `BTreeMap`; the
//! emptied binding vector and slot queue reused by the next firing and token; a one-slot
//! put moving the payload in; a one-input immediate call holding its input in place
//! (`InlineContext::one`, no vector); input names matched by event id; `bench.add`
//! walking its input `Arc`s (a shared one cloned, which keeps the hashes) and skipping
//! the prefix a joined branch shares with the merged object; joins without a guard bound
//! in one pass instead of a recursive search (when the search could not run out of
//! budget, so the result is the same); a binding of distinct slots taken without sorting;
//! empty slots let go without their drop glue; no empty span entered per call.
//!
//! First round: literal args shared per step instead of cloned per firing
//! (`weft_core::Args`), immediate tools called through `Tool::call_inline` so a pure tool
//! never builds its `ToolContext` (five `Arc` clones, the idempotency key, the inputs `Arc`),
//! no binding vector for one-input steps, emitted ids as a range, the plan `Arc` taken once
//! per batch instead of per input, and no hasher state per index-less slot.
//!
//! Session 10 (W2 only; callgrind as above, `prof fanout` 1,000 and 3,000 runs): 58.0k
//! instructions per workflow, `bench.add` 23.4k of them (`IndexMap` inserts 8.2k, the nine
//! branch copies of the shared map 5.7k, growing the join's map ~3.5k). Tried and not
//! kept: merging a join into a map sized for all its inputs (57.9k: the growth it saves is
//! about what hashing the first input's keys again costs), and copying a payload whose
//! count says it is shared without first trying `Arc::try_unwrap` (four alternating pairs,
//! within the noise). `perf annotate` of `call_inline`: ~45% of its own samples sit on the
//! locked `cmpxchg` / `dec` of taking a payload over and dropping it, the rest mostly on
//! stack reloads right after `insert_full` and the map clone return. Kept: fat LTO with one
//! codegen unit (the workspace's release profile), which inlines `serde_json`/`indexmap`
//! into the tool and the core into the runtime: W2 177,834–205,280 → 188,249–214,137
//! workflows/s in eleven alternating pairs, medians 185,985 → 199,015 (+7%); W1 and W3
//! unchanged within the noise.
//!
//! Session 14 (callgrind on `examples/prof.rs`, differenced over fanout 1,000/3,000, chain
//! 100/300 and many 2,000/6,000 runs): an immediate firing is *taken* instead of recorded
//! as in flight (`weft_core::Instance::next_taking`, `Cell::call_taken`; ARCHITECTURE.md):
//! no in-flight record inserted, looked up three times and removed, no `Input::Outcome`
//! built and matched, no `Cell::complete` bookkeeping per step, and a fan-out's branches
//! reuse one token vector instead of allocating one each. Instructions: W2 55,090 →
//! 46,376 per workflow (−16%), W1 2,536 → 1,977 per step (−22%), W3 3,419 → 2,818 per
//! step (−18%). Of a W2 workflow, `bench.add` is now 21.6k (the join's nine map merges
//! 9.2k, the nine copies of the shared `started` map 4.6k, SipHash of every inserted key
//! ~3.5k), the engine the rest; per-instance work (cell, marking of 22 slots built and
//! dropped, outcome) is ~4–5k of it. Tried and not kept: a per-step hint of the input a
//! join last found empty (the scan it saves costs what the hint costs), and a boxed spill
//! queue per slot so a marking is cheaper to build and drop (the indirection cost more on
//! every token put and length check: W2 +880 instructions).

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
