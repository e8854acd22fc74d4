//! Runs the store conformance suite on PostgreSQL, one fresh schema per case.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use weft_store::conformance::Fixture;
use weft_store_postgres::PgStore;

async fn fresh() -> Option<Fixture> {
    let url = common::url()?;
    let schema = common::schema_name();
    let store = PgStore::open_in_schema(&url, Some(&schema)).await.unwrap();
    Some(Fixture::with_cleanup(Arc::new(store), move || {
        Box::pin(async move { common::drop_schema(&url, &schema).await })
    }))
}

weft_store::conformance_tests!(fresh);
