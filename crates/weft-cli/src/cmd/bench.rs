//! `weft bench [WORKLOAD…]`: the workloads of `BENCHMARKS.md` (W1 `chain`, W2 `fanout`, W3
//! `many`) plus weft's `latency` (external event → tool called) and `idle` (a million idle
//! reactive instances), run in process by `weft_runtime::bench`. One JSON line per workload on
//! stdout, progress on stderr. `idle` is slow and memory-hungry, so it runs only when named.

use std::io::Write;

use super::{Ctx, Status};

/// Arguments of `weft bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workloads to run: chain, fanout, many, latency, idle. Default: all but `idle`.
    #[arg(value_name = "WORKLOAD")]
    pub workloads: Vec<String>,
}

/// The workloads run when none are named.
pub fn default_workloads() -> Vec<String> {
    weft_runtime::bench::DEFAULT
        .iter()
        .filter(|w| **w != "idle")
        .map(|w| (*w).to_string())
        .collect()
}

/// Runs `weft bench`. An unknown workload or a failed correctness check is an error (exit 2).
pub fn run(args: &Args, _ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let names = if args.workloads.is_empty() {
        default_workloads()
    } else {
        args.workloads.clone()
    };
    weft_runtime::bench::run(&names, out).map_err(|e| anyhow::anyhow!("weft bench: {e}"))?;
    Ok(Status::Clean)
}
