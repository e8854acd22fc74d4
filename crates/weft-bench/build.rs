//! Which test services this build can use: `cfg(weft_nats)` when `WEFT_TEST_NATS_URL` is set
//! (a NATS server) and `cfg(weft_python)` when `WEFT_TEST_PYTHON` is (the venv python of
//! `scripts/python-env.sh`, with `python/weft-worker` installed). The external-tools crash test
//! (`tests/crash_tools.rs`) needs both; without them it is `#[ignore]`d with the reason.

include!("../../scripts/test_services.rs");

fn main() {
    service("weft_nats", "WEFT_TEST_NATS_URL");
    service("weft_python", "WEFT_TEST_PYTHON");
}
