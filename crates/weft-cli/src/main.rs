//! The `weft` binary. Deliberately thin: everything lives in the `weft_cli` library so that
//! commands can be tested and reused (the server and benchmarks link the same code).

/// mimalloc instead of the system allocator: weft allocates many small short-lived objects
/// (tokens, payload maps, CEL values), and glibc's malloc spends a quarter of validation time
/// consolidating free lists (`perf` on the 10,000-step validation bench).
#[global_allocator]
static GLOBAL: weft_alloc::Alloc = weft_alloc::Alloc;

fn main() -> std::process::ExitCode {
    // See weft-alloc: smaller, steadier memory (measured there).
    weft_alloc::disable_transparent_huge_pages();
    weft_cli::main()
}
