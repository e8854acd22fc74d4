//! Runs W4 and the durability measurements: `cargo run --profile perf -p weft-bench --example
//! w4 -- [durable|durable_concurrent|durable_recovery|durable_compaction]…` (see
//! `weft_bench::durable` for the `WEFT_W4_*` size variables and `WEFT_BENCH_POSTGRES_URL`).

/// The allocator of the `weft` binary, so the figures match `weft bench`.
#[global_allocator]
static GLOBAL: weft_alloc::Alloc = weft_alloc::Alloc;

fn main() {
    weft_alloc::disable_transparent_huge_pages();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = std::io::stdout();
    if let Err(e) = weft_bench::durable::run_w4(&args, &mut out) {
        eprintln!("weft bench: {e}");
        std::process::exit(1);
    }
}
