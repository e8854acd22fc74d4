//! Which test services this build can use: `cfg(weft_mcp)` when `WEFT_TEST_MCP_PYTHON` names
//! the MCP test server's Python, and `cfg(weft_browser)` when `WEFT_TEST_BROWSER` is
//! set at build time (non-empty and not `0`: Node.js, `ui-tests/node_modules` and Chromium
//! are installed, as `.ci/run` does). Without it the browser test is `#[ignore]`d with the
//! reason, so `cargo test` counts it as ignored instead of passing it unrun.

include!("../../scripts/test_services.rs");

fn main() {
    service("weft_browser", "WEFT_TEST_BROWSER");
    service("weft_mcp", "WEFT_TEST_MCP_PYTHON");
}
