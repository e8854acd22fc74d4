//! Opening the store a command names with `--store`: an embedded SQLite file (the default,
//! `.weft/weft.db`) or a PostgreSQL URL. The binary is the one place that links both
//! backends, so the choice by location lives here.

use std::sync::Arc;

use anyhow::Context as _;
use weft_store::{Location, Store};

/// Opens the store at `location` (`None` or empty: `.weft/weft.db`).
pub async fn open(location: Option<&str>) -> anyhow::Result<Arc<dyn Store>> {
    let loc = location.unwrap_or("");
    let parsed = Location::parse(loc).with_context(|| format!("invalid --store `{loc}`"))?;
    let store = match parsed {
        Location::Sqlite(_) => weft_store_sqlite::open(loc).await,
        Location::Postgres(_) => weft_store_postgres::open(loc).await,
    };
    store.with_context(|| {
        format!(
            "cannot open the store `{}`",
            if loc.is_empty() { ".weft/weft.db" } else { loc }
        )
    })
}
