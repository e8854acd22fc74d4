//! Runs the store conformance suite on the SQLite backend, one fresh file per case: once
//! with the default journal-log merge interval (records of a short case stay in the log),
//! and once merging after every append (records spread over the log and the journal).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use weft_store::conformance::Fixture;
use weft_store_sqlite::SqliteStore;

async fn open_fresh(merge_rows: Option<u64>) -> Option<Fixture> {
    let dir = std::env::temp_dir().join(format!(
        "weft-store-sqlite-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let store = SqliteStore::open(dir.join("nested/weft.db")).await.unwrap();
    if let Some(n) = merge_rows {
        store.set_log_merge_rows(n);
    }
    Some(Fixture::with_cleanup(Arc::new(store), move || {
        Box::pin(async move {
            let _ = std::fs::remove_dir_all(&dir);
        })
    }))
}

async fn fresh() -> Option<Fixture> {
    open_fresh(None).await
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

weft_store::conformance_tests!(fresh);

/// The same cases with the journal log merged into the journal after every append.
mod merging_every_append {
    async fn fresh() -> Option<weft_store::conformance::Fixture> {
        super::open_fresh(Some(1)).await
    }

    weft_store::conformance_tests!(fresh);
}
