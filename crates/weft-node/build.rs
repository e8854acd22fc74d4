//! Which test services this build can use: `cfg(weft_nats)` when `WEFT_TEST_NATS_URL` is set
//! (a NATS server), `cfg(weft_python)` when `WEFT_TEST_PYTHON` is (the venv python of
//! `scripts/python-env.sh`, with `python/weft-worker` installed; both non-empty, read at build
//! time). Without them the tests needing the service are `#[ignore]`d with the reason, so
//! `cargo test` counts them as ignored instead of passing them unrun.

include!("../../scripts/test_services.rs");

fn main() {
    service("weft_nats", "WEFT_TEST_NATS_URL");
    service("weft_python", "WEFT_TEST_PYTHON");
    // `cfg(weft_mcp)`: the venv python of `scripts/mcp-test-env.sh` (the MCP test server).
    service("weft_mcp", "WEFT_TEST_MCP_PYTHON");
}
