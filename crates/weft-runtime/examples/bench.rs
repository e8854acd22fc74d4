//! Runs `weft bench` workloads without the CLI: `cargo run --release -p weft-runtime
//! --example bench -- [WORKLOAD…]`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = std::io::stdout();
    if let Err(e) = weft_runtime::bench::run(&args, &mut out) {
        eprintln!("weft bench: {e}");
        std::process::exit(1);
    }
}
