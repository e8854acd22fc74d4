//! Which test services this build can use: `cfg(weft_postgres)` when `WEFT_TEST_POSTGRES_URL`
//! is set and non-empty at build time; for `tests/react_worker.rs` (seed 004 with a real
//! `extract_facts` worker) `cfg(weft_nats)` (`WEFT_TEST_NATS_URL`), `cfg(weft_python)`
//! (`WEFT_TEST_PYTHON`, the venv of `scripts/python-env.sh`) and `cfg(weft_llm)`
//! (`WEFT_TEST_LLM_URL`, `scripts/llm-server.sh start`). Without them the tests needing the
//! service are `#[ignore]`d with the reason, so `cargo test` counts them as ignored instead
//! of passing them unrun.

include!("../../scripts/test_services.rs");

fn main() {
    service("weft_postgres", "WEFT_TEST_POSTGRES_URL");
    service("weft_nats", "WEFT_TEST_NATS_URL");
    service("weft_python", "WEFT_TEST_PYTHON");
    service("weft_llm", "WEFT_TEST_LLM_URL");
}
