//! Opening a SQLite store file: pragmas for durability, the schema and its version check,
//! and the mapping of SQLite failures to [`weft_store::Error`] (a damaged file must be a
//! clear `store_corrupt`, never a panic).

use std::path::Path;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};
use weft_store::Error;

/// The schema version this build writes. Bump it with a migration in `migrate`.
pub const SCHEMA_VERSION: i64 = 9;

const DDL_V1: &str = "
CREATE TABLE weft_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE journal (
  instance TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL,
  at_ms INTEGER NOT NULL, prev_hash BLOB NOT NULL, hash BLOB NOT NULL,
  PRIMARY KEY (instance, seq)) WITHOUT ROWID;
CREATE TABLE chain_heads (
  instance TEXT PRIMARY KEY, head_seq INTEGER NOT NULL, head_hash BLOB NOT NULL,
  base_seq INTEGER NOT NULL, base_hash BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE snapshots (
  instance TEXT NOT NULL, seq INTEGER NOT NULL, hash BLOB NOT NULL, state BLOB NOT NULL,
  at_ms INTEGER NOT NULL, PRIMARY KEY (instance, seq)) WITHOUT ROWID;
CREATE TABLE plans (
  tenant TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL, status TEXT NOT NULL,
  document TEXT NOT NULL, created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (tenant, name, version)) WITHOUT ROWID;
CREATE TABLE instances (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, plan_name TEXT NOT NULL,
  plan_version INTEGER NOT NULL, status TEXT NOT NULL, reason TEXT,
  created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL, parent TEXT);
CREATE INDEX instances_by_tenant ON instances (tenant, status, id);
CREATE INDEX instances_by_status ON instances (status, id);
CREATE TABLE timers (
  instance TEXT NOT NULL, timer_id TEXT NOT NULL, due_ms INTEGER NOT NULL,
  payload TEXT NOT NULL, PRIMARY KEY (instance, timer_id)) WITHOUT ROWID;
CREATE INDEX timers_by_due ON timers (due_ms);
CREATE TABLE effects (key TEXT PRIMARY KEY, outcome TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE leases (
  instance TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at_ms INTEGER NOT NULL) WITHOUT ROWID;
";

/// Version 2: leases carry an epoch (the fencing token of `append_fenced`).
const DDL_V2: &str = "ALTER TABLE leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 1;";

// Version 3 added one `journal_log` table: appends went to that rowid-ordered log first,
// merged into `journal` in large sorted batches (see `journal`'s module docs: it cuts the
// pages a group commit writes). Version 4 split it into `LOG_PARTS` tables
// `journal_log_{k}`, one row per record, merged one at a time. Version 5 replaces those.

/// Moves the live rows of an old row-per-record log table into `journal` and drops it.
fn move_old_log(table: &str) -> String {
    format!(
        "INSERT OR FAIL INTO journal (instance, seq, kind, body, at_ms, prev_hash, hash)
         SELECT l.instance, l.seq, l.kind, l.body, l.at_ms, l.prev_hash, l.hash
         FROM {table} l
         WHERE l.seq > coalesce(
           (SELECT h.base_seq FROM chain_heads h WHERE h.instance = l.instance), 0)
         ORDER BY l.instance, l.seq;
         DROP TABLE {table};"
    )
}

/// Version 5: each log partition is `journal_log_batch_{k}`, one row per group commit
/// holding that commit's records of the partition as one blob (`batch`'s format) and their
/// count (see `journal`'s module docs); an older store's log moves into `journal` first.
fn ddl_v5(from: i64) -> String {
    let mut ddl = String::new();
    if from == 3 {
        ddl.push_str(&move_old_log("journal_log"));
    }
    for part in 0..crate::journal_log::LOG_PARTS {
        if from == 4 {
            ddl.push_str(&move_old_log(&format!("journal_log_{part}")));
        }
        ddl.push_str(&format!(
            "CREATE TABLE IF NOT EXISTS {} (n INTEGER NOT NULL, data BLOB NOT NULL);",
            crate::journal_log::LOG_TABLES[part]
        ));
    }
    ddl
}

/// Version 6: `journal` is keyed by (part, instance, seq) and `chain_heads` by (part,
/// instance), `part` being the instance's log partition, so a merge of one partition writes
/// into one contiguous range of each table instead of into leaf pages spread over all of
/// it (see `journal`'s module docs). The rows move over in key order; `weft_part` is
/// [`crate::journal_log::part_sql`] ([`migrate`] registers it).
const DDL_V6: &str = "
CREATE TABLE journal_v6 (
  part INTEGER NOT NULL, instance TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
  body BLOB NOT NULL, at_ms INTEGER NOT NULL, prev_hash BLOB NOT NULL, hash BLOB NOT NULL,
  PRIMARY KEY (part, instance, seq)) WITHOUT ROWID;
INSERT INTO journal_v6 (part, instance, seq, kind, body, at_ms, prev_hash, hash)
  SELECT weft_part(instance), instance, seq, kind, body, at_ms, prev_hash, hash FROM journal
  ORDER BY 1, 2, 3;
DROP TABLE journal;
ALTER TABLE journal_v6 RENAME TO journal;
CREATE TABLE chain_heads_v6 (
  part INTEGER NOT NULL, instance TEXT NOT NULL, head_seq INTEGER NOT NULL,
  head_hash BLOB NOT NULL, base_seq INTEGER NOT NULL, base_hash BLOB NOT NULL,
  PRIMARY KEY (part, instance)) WITHOUT ROWID;
INSERT INTO chain_heads_v6 (part, instance, head_seq, head_hash, base_seq, base_hash)
  SELECT weft_part(instance), instance, head_seq, head_hash, base_seq, base_hash
  FROM chain_heads ORDER BY 1, 2;
DROP TABLE chain_heads;
ALTER TABLE chain_heads_v6 RENAME TO chain_heads;
";

/// Version 7: tenants' declared tools, versioned like plans (a `NULL` definition is a
/// deletion).
const DDL_V7: &str = "
CREATE TABLE IF NOT EXISTS tools (
  tenant TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL, definition TEXT,
  created_at_ms INTEGER NOT NULL, PRIMARY KEY (tenant, name, version)) WITHOUT ROWID;
";

/// Version 8: each instance record keeps the chain head's seq when its status was last set,
/// so `verify` finds a journal cut back behind it (`weft_store::ChainFault::TailMissing`).
/// Older records get 0 (nothing to compare against).
const DDL_V8: &str = "ALTER TABLE instances ADD COLUMN status_seq INTEGER NOT NULL DEFAULT 0;";

/// Version 9: the shared counters of the operator's quotas (`Store::add_counts`).
const DDL_V9: &str = "
CREATE TABLE IF NOT EXISTS counters (
  key TEXT NOT NULL, period INTEGER NOT NULL, ends_ms INTEGER NOT NULL,
  tool_calls INTEGER NOT NULL, llm_calls INTEGER NOT NULL, llm_tokens INTEGER NOT NULL,
  cost REAL NOT NULL, PRIMARY KEY (key, period)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS counters_by_end ON counters (ends_ms);
";

/// What `weft_part` says about a row whose instance is not text.
const NOT_TEXT: &str = "a journal row's instance is not text";

/// Registers `weft_part(instance)`, the SQL form of [`crate::journal_log::part_sql`] (used by
/// the version-6 migration). A non-text instance (a damaged row) fails the statement.
fn register_part_function(conn: &Connection) -> Result<(), Error> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "weft_part",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let instance = ctx.get_raw(0).as_str().map_err(|e| {
                rusqlite::Error::UserFunctionError(format!("{NOT_TEXT}: {e}").into())
            })?;
            Ok(crate::journal_log::part_sql(instance))
        },
    )
    .map_err(map_err)
}

/// Maps a SQLite failure to the store error, keeping damage distinct from other failures.
pub(crate) fn map_err(e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => Error::Corrupt {
            message: format!("the SQLite store is damaged or not a database: {e}"),
        },
        Some(ErrorCode::DiskFull) => Error::backend(format!("disk full: {e}")),
        Some(ErrorCode::CannotOpen) => Error::Unavailable {
            message: format!("cannot open the SQLite store: {e}"),
        },
        _ => Error::backend(e),
    }
}

fn with_path(path: &Path, e: Error) -> Error {
    match e {
        Error::Corrupt { message } => Error::Corrupt {
            message: format!("{}: {message}", path.display()),
        },
        Error::Unavailable { message } => Error::Unavailable {
            message: format!("{}: {message}", path.display()),
        },
        other => other,
    }
}

fn pragmas(conn: &Connection) -> Result<(), Error> {
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(map_err)?;
    qpsg(conn)?;
    // WAL: readers never block the writer; FULL: every commit fsyncs the WAL (durable).
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(map_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::backend(format!(
            "could not switch the SQLite store to WAL mode (got `{mode}`)"
        )));
    }
    conn.execute_batch("PRAGMA synchronous=FULL;")
        .map_err(map_err)
}

/// Pragmas of the write connection only (measured on W4-concurrent, see `writer`):
/// - `temp_store=MEMORY`: statement journals (a multi-row `INSERT` that may abort keeps the
///   pages it changes so it can be undone alone) stay in memory instead of spilling to a
///   temporary file past 64 KiB — spilled, they cost ~14% of the writer's CPU in `pwrite`s;
/// - `cache_size=-65536` (64 MiB instead of 2 MiB): a group-commit batch touches pages
///   across the journal, chain-head, instance and lease b-trees; with the default cache
///   the batch spilled dirty pages to the WAL mid-transaction and re-read evicted pages.
///   Memory is taken only as pages are used;
/// - `wal_autocheckpoint=32768` (128 MiB of WAL instead of 4 MiB): the checkpoint runs on
///   the writer thread after a commit and copies every page the WAL holds that the file
///   does not have yet; the hot pages (chain heads, the instance indexes, the journal's
///   right edge) are in every commit, so a longer interval copies each of them once for
///   many more commits. The background [`crate::checkpointer`] copies most pages before
///   then, so the writer's own checkpoint (needed to start the WAL over) copies only the
///   last fraction of a second's pages: measured under the server's event load, 8,192
///   pages gave a p99 of 11.8–13.2 ms and 32,768 pages 8.4 ms (`weft-loadgen -c 4 -b 50`).
fn writer_pragmas(conn: &Connection) -> Result<(), Error> {
    conn.execute_batch(
        "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-65536; PRAGMA wal_autocheckpoint=32768;",
    )
    .map_err(map_err)
}

/// Opens (creating if needed) the write connection: checks or creates the schema.
pub(crate) fn open_writer(path: &Path) -> Result<Connection, Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::Unavailable {
            message: format!("cannot create {}: {e}", dir.display()),
        })?;
    }
    let conn = Connection::open(path).map_err(|e| with_path(path, map_err(e)))?;
    // Room for the multi-row statements of every batch size for every log partition
    // (journal_log::append_many), and the rest.
    conn.set_prepared_statement_cache_capacity(32 * crate::journal_log::LOG_PARTS + 128);
    pragmas(&conn)
        .and_then(|()| writer_pragmas(&conn))
        .map_err(|e| with_path(path, e))?;
    migrate(&conn).map_err(|e| with_path(path, e))?;
    conn.execute_batch(crate::journal_log::TRUNCATED_SINCE_MERGE)
        .map_err(|e| with_path(path, map_err(e)))?;
    Ok(conn)
}

/// The query planner stability guarantee: plans never depend on bound values. Without it
/// SQLite (3.54) plans `LIMIT ?` with the bound limit and marks the statement to be
/// prepared again whenever that parameter is bound again, so every cached statement with a
/// `LIMIT ?` (journal reads, pages of instances and timers) would be re-parsed on every
/// call (recovery reads two statements per instance).
fn qpsg(conn: &Connection) -> Result<(), Error> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map(|_| ())
    .map_err(map_err)
}

/// Opens a read connection to an existing store.
pub(crate) fn open_reader(path: &Path) -> Result<Connection, Error> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| with_path(path, map_err(e)))?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .and_then(|()| conn.execute_batch("PRAGMA query_only=1;"))
        .map_err(|e| with_path(path, map_err(e)))?;
    qpsg(&conn).map_err(|e| with_path(path, e))?;
    Ok(conn)
}

/// The journal key fingerprint the store was keyed with (`weft_store::KEY_ID_META`), if any.
pub(crate) fn stored_key_id(conn: &Connection) -> Result<Option<i64>, Error> {
    conn.query_row(
        "SELECT value FROM weft_meta WHERE key = ?1",
        [weft_store::KEY_ID_META],
        |r| r.get(0),
    )
    .optional()
    .map_err(map_err)
}

/// Decides the store's chaining ([`weft_store::Chaining::resolve`]) on the write connection
/// once the log is merged, recording the key's fingerprint when the store becomes keyed.
pub(crate) fn resolve_chaining(
    conn: &Connection,
    key: Option<&weft_store::ChainKey>,
) -> Result<weft_store::Chaining, Error> {
    let stored = stored_key_id(conn)?;
    let empty: bool = conn
        .query_row(
            "SELECT NOT EXISTS (SELECT 1 FROM journal) AND NOT EXISTS (SELECT 1 FROM chain_heads)",
            [],
            |r| r.get(0),
        )
        .map_err(map_err)?;
    let (chaining, record) = weft_store::Chaining::resolve(stored, key, empty)?;
    if let Some(id) = record {
        conn.execute(
            "INSERT INTO weft_meta (key, value) VALUES (?1, ?2)",
            rusqlite::params![weft_store::KEY_ID_META, id],
        )
        .map_err(map_err)?;
    }
    Ok(chaining)
}

/// Reads the stored schema version: `None` for an empty database.
fn stored_version(conn: &Connection) -> Result<Option<i64>, Error> {
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(map_err)?;
    if tables == 0 {
        return Ok(None);
    }
    let has_meta: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type='table' AND name='weft_meta'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(map_err)?;
    if has_meta.is_none() {
        return Err(Error::Corrupt {
            message: "a SQLite database, but not a weft store (no weft_meta table)".into(),
        });
    }
    let v: Option<i64> = conn
        .query_row(
            "SELECT value FROM weft_meta WHERE key='schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(map_err)?;
    v.map(Some).ok_or_else(|| Error::Corrupt {
        message: "the weft store has no schema version".into(),
    })
}

/// [`DDL_V8`] unless `instances` already has the column (SQLite has no `ADD COLUMN IF NOT
/// EXISTS`).
fn ddl_v8(conn: &Connection) -> Result<&'static str, Error> {
    let has: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info('instances') WHERE name = 'status_seq')",
            [],
            |r| r.get(0),
        )
        .map_err(map_err)?;
    Ok(if has { "" } else { DDL_V8 })
}

/// Creates the schema in an empty database, or checks that a stored one is not newer.
fn migrate(conn: &Connection) -> Result<(), Error> {
    register_part_function(conn)?;
    let stored = stored_version(conn)?;
    let v8 = match stored {
        Some(v) if v < SCHEMA_VERSION => ddl_v8(conn)?,
        _ => DDL_V8,
    };
    match stored {
        None => {
            let ddl = format!(
                "BEGIN IMMEDIATE; {DDL_V1} {DDL_V2} {} {DDL_V6} {DDL_V7} {DDL_V8} {DDL_V9} INSERT INTO weft_meta VALUES ('schema_version', {SCHEMA_VERSION}); COMMIT;",
                ddl_v5(0)
            );
            conn.execute_batch(&ddl).map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                map_err(e)
            })
        }
        Some(v) if v > SCHEMA_VERSION => Err(Error::SchemaTooNew {
            found: v,
            supported: SCHEMA_VERSION,
        }),
        Some(v @ (1..=5)) => {
            // The move to version 6 keys rows by their instance's hash: a row whose instance
            // is not text is damage, reported as such before anything changes.
            let damaged: i64 = conn
                .query_row(
                    "SELECT (SELECT count(*) FROM journal WHERE typeof(instance) != 'text')
                          + (SELECT count(*) FROM chain_heads WHERE typeof(instance) != 'text')",
                    [],
                    |r| r.get(0),
                )
                .map_err(map_err)?;
            if damaged > 0 {
                return Err(Error::Corrupt {
                    message: format!(
                        "{damaged} journal or chain-head row(s) have an instance that is not text"
                    ),
                });
            }
            let steps = match v {
                1 => format!("{DDL_V2} {} {DDL_V6} {DDL_V7} {v8} {DDL_V9}", ddl_v5(v)),
                5 => format!("{DDL_V6} {DDL_V7} {v8} {DDL_V9}"),
                _ => format!("{} {DDL_V6} {DDL_V7} {v8} {DDL_V9}", ddl_v5(v)),
            };
            let ddl = format!(
                "BEGIN IMMEDIATE; {steps} UPDATE weft_meta SET value = {SCHEMA_VERSION} WHERE key = 'schema_version'; COMMIT;"
            );
            conn.execute_batch(&ddl).map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                // `weft_part` refusing a row (one an old log moved in) is damage too.
                if e.to_string().contains(NOT_TEXT) {
                    return Error::Corrupt {
                        message: format!("cannot migrate the journal: {e}"),
                    };
                }
                map_err(e)
            })
        }
        Some(v @ (6..=8)) => {
            let steps = match v {
                6 => format!("{DDL_V7} {v8} {DDL_V9}"),
                7 => format!("{v8} {DDL_V9}"),
                _ => DDL_V9.to_string(),
            };
            let ddl = format!(
                "BEGIN IMMEDIATE; {steps} UPDATE weft_meta SET value = {SCHEMA_VERSION} WHERE key = 'schema_version'; COMMIT;"
            );
            conn.execute_batch(&ddl).map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                map_err(e)
            })
        }
        Some(_) => Ok(()),
    }
}
