//! Which test services this build can use: `cfg(weft_postgres)` when `WEFT_TEST_POSTGRES_URL`
//! is set, `cfg(weft_llm)` when `WEFT_TEST_LLM_URL` is (the local LLM server of
//! `scripts/llm-server.sh`; both non-empty, read at build time). Without them the tests
//! needing the service are `#[ignore]`d with the reason, so `cargo test` counts them as
//! ignored instead of passing them unrun.

fn main() {
    service("weft_postgres", "WEFT_TEST_POSTGRES_URL");
    service("weft_llm", "WEFT_TEST_LLM_URL");
}

fn service(cfg: &str, var: &str) {
    println!("cargo:rustc-check-cfg=cfg({cfg})");
    println!("cargo:rerun-if-env-changed={var}");
    if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
        println!("cargo:rustc-cfg={cfg}");
    }
}
