//! Which test services this build can use: `cfg(weft_browser)` when `WEFT_TEST_BROWSER` is
//! set at build time (non-empty and not `0`: Node.js, `ui-tests/node_modules` and Chromium
//! are installed, as `.ci/run` does). Without it the browser test is `#[ignore]`d with the
//! reason, so `cargo test` counts it as ignored instead of passing it unrun.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(weft_browser)");
    println!("cargo:rerun-if-env-changed=WEFT_TEST_BROWSER");
    if std::env::var("WEFT_TEST_BROWSER").is_ok_and(|v| !v.is_empty() && v != "0") {
        println!("cargo:rustc-cfg=weft_browser");
    }
}
