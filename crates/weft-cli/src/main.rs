//! The `weft` binary. Deliberately thin: everything lives in the `weft_cli` library so that
//! commands can be tested and reused (the server and benchmarks link the same code).

fn main() -> std::process::ExitCode {
    weft_cli::main()
}
