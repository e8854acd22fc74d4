//! PostgreSQL schema: creation under an advisory lock (several `weft` processes may start
//! at once), the version check, and the mapping of driver failures to store errors.

use deadpool_postgres::{Pool, PoolError};
use tokio_postgres::error::SqlState;
use weft_store::Error;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 6;

/// Advisory lock key serialising schema creation (any fixed number; "weft" in ASCII).
const SCHEMA_LOCK: i64 = 0x7765_6674;

const DDL_V1: &str = "
CREATE TABLE weft_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
CREATE TABLE journal (
  instance TEXT NOT NULL, seq BIGINT NOT NULL, kind TEXT NOT NULL, body BYTEA NOT NULL,
  at_ms BIGINT NOT NULL, prev_hash BYTEA NOT NULL, hash BYTEA NOT NULL,
  PRIMARY KEY (instance, seq));
CREATE TABLE chain_heads (
  instance TEXT PRIMARY KEY, head_seq BIGINT NOT NULL, head_hash BYTEA NOT NULL,
  base_seq BIGINT NOT NULL, base_hash BYTEA NOT NULL);
CREATE TABLE snapshots (
  instance TEXT NOT NULL, seq BIGINT NOT NULL, hash BYTEA NOT NULL, state BYTEA NOT NULL,
  at_ms BIGINT NOT NULL, PRIMARY KEY (instance, seq));
CREATE TABLE plans (
  tenant TEXT NOT NULL, name TEXT NOT NULL, version BIGINT NOT NULL, status TEXT NOT NULL,
  document TEXT NOT NULL, created_at_ms BIGINT NOT NULL, PRIMARY KEY (tenant, name, version));
CREATE TABLE instances (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, plan_name TEXT NOT NULL,
  plan_version BIGINT NOT NULL, status TEXT NOT NULL, reason TEXT,
  created_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL, parent TEXT);
CREATE INDEX instances_by_tenant ON instances (tenant, status, id);
CREATE INDEX instances_by_status ON instances (status, id);
CREATE TABLE timers (
  instance TEXT NOT NULL, timer_id TEXT NOT NULL, due_ms BIGINT NOT NULL, payload TEXT NOT NULL,
  PRIMARY KEY (instance, timer_id));
CREATE INDEX timers_by_due ON timers (due_ms);
CREATE TABLE effects (key TEXT PRIMARY KEY, outcome TEXT NOT NULL);
CREATE TABLE leases (instance TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at_ms BIGINT NOT NULL);
";

/// Version 2: leases carry an epoch (the fencing token of `append_fenced`).
const DDL_V2: &str = "ALTER TABLE leases ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;";

/// Version 3: every text column compares bytewise (`COLLATE "C"`), as SQLite's do, so
/// listings page in the same order on both backends. Under the database's default
/// collation (`C.UTF-8` here, often `en_US.UTF-8`) every comparison of instance ids in the
/// key indexes goes through the locale (`varstr_cmp`, `strcoll`,
/// `pg_newlocale_from_collation`): ~7% of the PostgreSQL server's CPU under W4-concurrent
/// (`perf record -a`). What bytewise comparison gives W4 and recovery: `docs/performance.md`.
/// All text columns, not only the keys: comparing columns of two different collations is
/// an error.
/// The indexes are rebuilt; the rows are not rewritten.
const DDL_V3: &str = "
ALTER TABLE weft_meta ALTER COLUMN key TYPE TEXT COLLATE \"C\";
ALTER TABLE journal ALTER COLUMN instance TYPE TEXT COLLATE \"C\",
  ALTER COLUMN kind TYPE TEXT COLLATE \"C\";
ALTER TABLE chain_heads ALTER COLUMN instance TYPE TEXT COLLATE \"C\";
ALTER TABLE snapshots ALTER COLUMN instance TYPE TEXT COLLATE \"C\";
ALTER TABLE plans ALTER COLUMN tenant TYPE TEXT COLLATE \"C\",
  ALTER COLUMN name TYPE TEXT COLLATE \"C\", ALTER COLUMN status TYPE TEXT COLLATE \"C\",
  ALTER COLUMN document TYPE TEXT COLLATE \"C\";
ALTER TABLE instances ALTER COLUMN id TYPE TEXT COLLATE \"C\",
  ALTER COLUMN tenant TYPE TEXT COLLATE \"C\", ALTER COLUMN plan_name TYPE TEXT COLLATE \"C\",
  ALTER COLUMN status TYPE TEXT COLLATE \"C\", ALTER COLUMN reason TYPE TEXT COLLATE \"C\",
  ALTER COLUMN parent TYPE TEXT COLLATE \"C\";
ALTER TABLE timers ALTER COLUMN instance TYPE TEXT COLLATE \"C\",
  ALTER COLUMN timer_id TYPE TEXT COLLATE \"C\", ALTER COLUMN payload TYPE TEXT COLLATE \"C\";
ALTER TABLE effects ALTER COLUMN key TYPE TEXT COLLATE \"C\",
  ALTER COLUMN outcome TYPE TEXT COLLATE \"C\";
ALTER TABLE leases ALTER COLUMN instance TYPE TEXT COLLATE \"C\",
  ALTER COLUMN owner TYPE TEXT COLLATE \"C\";
";

/// Version 4: tenants' declared tools, versioned like plans (a `NULL` definition is a
/// deletion).
const DDL_V4: &str = "
CREATE TABLE IF NOT EXISTS tools (
  tenant TEXT COLLATE \"C\" NOT NULL, name TEXT COLLATE \"C\" NOT NULL, version BIGINT NOT NULL,
  definition TEXT COLLATE \"C\", created_at_ms BIGINT NOT NULL,
  PRIMARY KEY (tenant, name, version));
";

/// Version 5: each instance record keeps the chain head's seq when its status was last
/// set, so `verify` finds a journal cut back behind it; older records get 0.
const DDL_V5: &str =
    "ALTER TABLE instances ADD COLUMN IF NOT EXISTS status_seq BIGINT NOT NULL DEFAULT 0;";

/// Version 6: the shared counters of the operator's quotas (`Store::add_counts`).
const DDL_V6: &str = "
CREATE TABLE IF NOT EXISTS counters (
  key TEXT COLLATE \"C\" NOT NULL, period BIGINT NOT NULL, ends_ms BIGINT NOT NULL,
  tool_calls BIGINT NOT NULL, llm_calls BIGINT NOT NULL, llm_tokens BIGINT NOT NULL,
  cost DOUBLE PRECISION NOT NULL, PRIMARY KEY (key, period));
CREATE INDEX IF NOT EXISTS counters_by_end ON counters (ends_ms);
";

/// Decides the store's chaining ([`weft_store::Chaining::resolve`]) under the schema lock
/// (two processes keying a new store at once agree), recording the key's fingerprint when
/// the store becomes keyed.
pub(crate) async fn resolve_chaining(
    pool: &Pool,
    key: Option<&weft_store::ChainKey>,
) -> Result<weft_store::Chaining, Error> {
    let mut client = pool.get().await.map_err(map_pool)?;
    let tx = client.transaction().await.map_err(map_err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(map_err)?;
    let stored: Option<i64> = tx
        .query_opt(
            "SELECT value FROM weft_meta WHERE key = $1",
            &[&weft_store::KEY_ID_META],
        )
        .await
        .map_err(map_err)?
        .map(|r| r.get(0));
    let empty: bool = tx
        .query_one(
            "SELECT NOT EXISTS (SELECT 1 FROM journal) AND NOT EXISTS (SELECT 1 FROM chain_heads)",
            &[],
        )
        .await
        .map_err(map_err)?
        .get(0);
    let (chaining, record) = weft_store::Chaining::resolve(stored, key, empty)?;
    if let Some(id) = record {
        tx.execute(
            "INSERT INTO weft_meta (key, value) VALUES ($1, $2)",
            &[&weft_store::KEY_ID_META, &id],
        )
        .await
        .map_err(map_err)?;
    }
    tx.commit().await.map_err(map_err)?;
    Ok(chaining)
}

/// Maps a driver failure: lost connections are `store_unavailable`, the rest `backend`.
pub(crate) fn map_err(e: tokio_postgres::Error) -> Error {
    if e.is_closed() || (e.as_db_error().is_none() && e.code().is_none()) {
        return Error::Unavailable {
            message: format!("PostgreSQL: {e}"),
        };
    }
    match e.as_db_error() {
        Some(db) => Error::backend(format!(
            "PostgreSQL: {} ({})",
            db.message(),
            db.code().code()
        )),
        None => Error::backend(format!("PostgreSQL: {e}")),
    }
}

/// Maps a pool failure (could not get a connection).
pub(crate) fn map_pool(e: PoolError) -> Error {
    match e {
        PoolError::Backend(e) => map_err(e),
        other => Error::Unavailable {
            message: format!("PostgreSQL pool: {other}"),
        },
    }
}

/// Is this a failure worth retrying the transaction for (deadlock, serialisation)?
pub(crate) fn is_transient(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
    )
}

/// Is this a unique-key violation?
pub(crate) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// Creates the schema if absent, or checks that the stored version is not newer.
pub(crate) async fn migrate(pool: &Pool) -> Result<(), Error> {
    let mut client = pool.get().await.map_err(map_pool)?;
    let tx = client.transaction().await.map_err(map_err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(map_err)?;
    let exists: bool = tx
        .query_one("SELECT to_regclass('weft_meta') IS NOT NULL", &[])
        .await
        .map_err(map_err)?
        .get(0);
    if !exists {
        tx.batch_execute(DDL_V1).await.map_err(map_err)?;
        tx.batch_execute(DDL_V2).await.map_err(map_err)?;
        tx.batch_execute(DDL_V3).await.map_err(map_err)?;
        tx.batch_execute(DDL_V4).await.map_err(map_err)?;
        tx.batch_execute(DDL_V5).await.map_err(map_err)?;
        tx.batch_execute(DDL_V6).await.map_err(map_err)?;
        tx.execute(
            "INSERT INTO weft_meta VALUES ('schema_version', $1)",
            &[&SCHEMA_VERSION],
        )
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        return Ok(());
    }
    let found: Option<i64> = tx
        .query_opt(
            "SELECT value FROM weft_meta WHERE key = 'schema_version'",
            &[],
        )
        .await
        .map_err(map_err)?
        .map(|r| r.get(0));
    match found {
        None => Err(Error::Corrupt {
            message: "the weft store in PostgreSQL has no schema version".into(),
        }),
        Some(v) if v > SCHEMA_VERSION => Err(Error::SchemaTooNew {
            found: v,
            supported: SCHEMA_VERSION,
        }),
        Some(v @ 1..=5) => {
            if v == 1 {
                tx.batch_execute(DDL_V2).await.map_err(map_err)?;
            }
            if v <= 2 {
                tx.batch_execute(DDL_V3).await.map_err(map_err)?;
            }
            if v <= 3 {
                tx.batch_execute(DDL_V4).await.map_err(map_err)?;
            }
            if v <= 4 {
                tx.batch_execute(DDL_V5).await.map_err(map_err)?;
            }
            tx.batch_execute(DDL_V6).await.map_err(map_err)?;
            tx.execute(
                "UPDATE weft_meta SET value = $1 WHERE key = 'schema_version'",
                &[&SCHEMA_VERSION],
            )
            .await
            .map_err(map_err)?;
            tx.commit().await.map_err(map_err)
        }
        Some(_) => Ok(()),
    }
}
