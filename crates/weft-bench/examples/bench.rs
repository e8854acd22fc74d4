//! Runs `weft bench` workloads without the CLI: `cargo run --profile perf -p weft-bench
//! --example bench -- [WORKLOAD…]` (W1–W3, `latency`, `idle` and `tools`; W4 is the `w4`
//! example).

/// mimalloc, as in the `weft` binary: the engine allocates many small short-lived objects
/// (tokens, payload maps, tool contexts), and glibc's malloc costs W1 about 40%
/// (`docs/performance.md`).
#[global_allocator]
static GLOBAL: weft_alloc::Alloc = weft_alloc::Alloc;

fn main() {
    weft_alloc::disable_transparent_huge_pages();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = std::io::stdout();
    for name in &args {
        let r = if weft_bench::tools::DEFAULT.contains(&name.as_str()) {
            weft_bench::tools::run(&mut out)
        } else {
            weft_bench::engine::run(std::slice::from_ref(name), &mut out)
        };
        if let Err(e) = r {
            eprintln!("weft bench: {e}");
            std::process::exit(1);
        }
    }
    if args.is_empty()
        && let Err(e) = weft_bench::engine::run(&[], &mut out)
    {
        eprintln!("weft bench: {e}");
        std::process::exit(1);
    }
}
