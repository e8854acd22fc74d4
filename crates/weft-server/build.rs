//! Which test services this build can use: `cfg(weft_postgres)` when `WEFT_TEST_POSTGRES_URL`
//! is set and non-empty at build time. Without it the tests needing PostgreSQL are
//! `#[ignore]`d with the reason, so `cargo test` counts them as ignored instead of passing
//! them unrun.

include!("../../scripts/test_services.rs");

fn main() {
    service("weft_postgres", "WEFT_TEST_POSTGRES_URL");
}
