//! Which test services this build can use: `cfg(weft_browser)` when `WEFT_TEST_BROWSER` is
//! set at build time (non-empty and not `0`: Node.js, `ui-tests/node_modules` and Chromium
//! are installed, as `.ci/run` does). Without it the layout module's Node.js tests are
//! `#[ignore]`d with the reason, so `cargo test` counts them as ignored instead of passing
//! them unrun.

include!("../../scripts/test_services.rs");

fn main() {
    service("weft_browser", "WEFT_TEST_BROWSER");
}
