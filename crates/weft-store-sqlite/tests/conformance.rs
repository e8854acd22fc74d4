//! Runs the store conformance suite on the SQLite backend, one fresh file per case.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use weft_store::conformance::Fixture;
use weft_store_sqlite::SqliteStore;

async fn fresh() -> Option<Fixture> {
    let dir = std::env::temp_dir().join(format!(
        "weft-store-sqlite-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let store = SqliteStore::open(dir.join("nested/weft.db")).await.unwrap();
    Some(Fixture::with_cleanup(Arc::new(store), move || {
        Box::pin(async move {
            let _ = std::fs::remove_dir_all(&dir);
        })
    }))
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

weft_store::conformance_tests!(fresh);
