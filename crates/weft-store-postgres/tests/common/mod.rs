//! Per-test PostgreSQL schemas: each test gets a fresh schema (random name), dropped after.
//! The tests are ignored unless `WEFT_TEST_POSTGRES_URL` was set at build time
//! (`cfg(weft_postgres)`, see `build.rs`), so a missing variable here is a failure.

#![allow(dead_code, clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The test server's URL, `WEFT_TEST_POSTGRES_URL`; panics with a hint when it is not set
/// (the test was built with it: `cfg(weft_postgres)`).
pub(crate) fn url() -> String {
    match std::env::var("WEFT_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => panic!(
            "this test needs PostgreSQL and WEFT_TEST_POSTGRES_URL is not set (it was when the \
             test was built): export WEFT_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
             (bash .ci/run starts the server)"
        ),
    }
}

/// A fresh schema name, unique across processes and runs.
pub(crate) fn schema_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "weft_test_{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// Runs `f` with a plain client, then closes its connection.
async fn with_client<T>(url: &str, f: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let out = f(&client).await;
    drop(client);
    let _ = task.await;
    out
}

/// Runs SQL on a plain connection (schema management and tampering).
pub(crate) async fn sql(url: &str, sql: &str) {
    with_client(url, async |c| c.batch_execute(sql).await.unwrap()).await
}

/// Drops a test schema.
pub(crate) async fn drop_schema(url: &str, schema: &str) {
    sql(url, &format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await;
}

/// The first column of every row of a query, as text (checks of the schema itself).
pub(crate) async fn strings(url: &str, sql: &str) -> Vec<String> {
    let rows = with_client(url, async |c| c.query(sql, &[]).await.unwrap()).await;
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}
