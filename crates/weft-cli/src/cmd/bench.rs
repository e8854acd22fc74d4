//! `weft bench [WORKLOAD…]`: the workloads of `BENCHMARKS.md` (W1 `chain`, W2 `fanout`, W3
//! `many`) plus weft's `latency` (external event → tool called) and `idle` (a million idle
//! reactive instances), run in process by `weft_bench::engine`, and W4 (`durable`,
//! `durable_concurrent`, `durable_recovery`, `durable_compaction`) on the embedded durable
//! store by `weft_bench::durable`, and `tools` (the round trip weft adds to each kind of
//! declared tool, and worker throughput over NATS) by `weft_bench::tools`. One JSON line per
//! workload (per tool kind for `tools`) on stdout, progress on stderr. `idle`, the W4
//! workloads and `tools` are slow or need services, so they run only when named.
//!
//! The workloads are compiled in only with the `bench` feature (published figures are built
//! with `--profile perf --features bench`): the user build leaves out its largest crate, and
//! `weft bench` there says how to get a build that has them.

use std::io::Write;

use super::{Ctx, Status};

/// Arguments of `weft bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workloads to run: chain, fanout, many, latency, idle, durable, durable_concurrent,
    /// durable_recovery, durable_compaction, tools. Default: chain, fanout, many, latency.
    #[arg(value_name = "WORKLOAD")]
    pub workloads: Vec<String>,
}

/// How to build a `weft` that has the benchmarks.
pub const BUILD_HINT: &str = "cargo run --profile perf -p weft-cli --features bench -- bench";

/// The workloads run when none are named.
#[cfg(feature = "bench")]
pub fn default_workloads() -> Vec<String> {
    weft_bench::engine::DEFAULT
        .iter()
        .filter(|w| **w != "idle")
        .map(|w| (*w).to_string())
        .collect()
}

/// Runs `weft bench`. An unknown workload or a failed correctness check is an error (exit 2).
#[cfg(feature = "bench")]
pub fn run(args: &Args, _ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let names = if args.workloads.is_empty() {
        default_workloads()
    } else {
        args.workloads.clone()
    };
    // Keep the order the user gave, sending each name to the crate that implements it.
    for name in &names {
        let one = std::slice::from_ref(name);
        if weft_bench::durable::DEFAULT.contains(&name.as_str()) {
            weft_bench::durable::run_w4(one, out)
        } else if weft_bench::tools::DEFAULT.contains(&name.as_str()) {
            weft_bench::tools::run(out)
        } else {
            weft_bench::engine::run(one, out)
        }
        .map_err(|e| anyhow::anyhow!("weft bench: {e}"))?;
    }
    Ok(Status::Clean)
}

/// `weft bench` in a build without the `bench` feature: a usage error (exit 2) naming the
/// command that builds one with it.
#[cfg(not(feature = "bench"))]
pub fn run(_args: &Args, _ctx: &Ctx, _out: &mut dyn Write) -> anyhow::Result<Status> {
    anyhow::bail!(
        "[feature_missing] weft bench: this `weft` was built without the benchmarks (the `bench` feature, left \
         out of the default build to keep it fast)\n  = hint: `{BUILD_HINT} [WORKLOAD…]` builds \
         and runs them with the profile published figures use"
    )
}
