//! Which test services this build can use: `cfg(weft_postgres)` when `WEFT_TEST_POSTGRES_URL`
//! is set, `cfg(weft_pg_restart)` when `WEFT_TEST_PG_RESTART_CMD` is (both non-empty, read at
//! build time). Without them the tests needing the service are `#[ignore]`d with the reason,
//! so `cargo test` counts them as ignored instead of passing them unrun.

include!("../../scripts/test_services.rs");

fn main() {
    service("weft_postgres", "WEFT_TEST_POSTGRES_URL");
    service("weft_pg_restart", "WEFT_TEST_PG_RESTART_CMD");
}
