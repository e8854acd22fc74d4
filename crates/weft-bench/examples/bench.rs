//! Runs `weft bench` workloads without the CLI: `cargo run --release -p weft-bench
//! --example bench -- [WORKLOAD…]`.

/// mimalloc, as in the `weft` binary: the engine allocates many small short-lived objects
/// (tokens, payload maps, tool contexts), and glibc's malloc costs W1 about 40%
/// (`docs/performance.md`).
#[global_allocator]
static GLOBAL: weft_alloc::Alloc = weft_alloc::Alloc;

fn main() {
    weft_alloc::disable_transparent_huge_pages();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = std::io::stdout();
    if let Err(e) = weft_bench::engine::run(&args, &mut out) {
        eprintln!("weft bench: {e}");
        std::process::exit(1);
    }
}
