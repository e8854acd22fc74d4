//! Journal and snapshot statements, as plain functions on a connection: the write ones run
//! inside the writer's batch transaction, the read ones on a reader connection.
//!
//! ## Two tables: the log and the journal
//! Appends go to the log, rowid tables: every commit writes at their right edge, so a
//! group commit of records for N instances dirties about `bytes / 4 KiB` pages. Writing
//! them straight into `journal` (clustered by instance) would dirty one leaf page or more
//! *per instance* in every commit, each a full 4 KiB WAL frame: measured without the log,
//! 13–15 KiB written per event under the server's event load (`weft-loadgen`), and most
//! of the writer's time in W4.
//! [`merge_log`] moves the log into `journal` in one sorted pass (each instance's leaf is
//! rewritten once per merge instead of once per commit); the store runs it every few
//! thousand rows and when it opens. Readers see both tables: every record is in exactly
//! one of them, and an instance's records in the log all come after those in `journal`
//! (a merge moves all of a log's rows in one transaction). The log has no index, so a read
//! scans it: it is kept to a few thousand records.
//!
//! ## A log row is a batch
//! A group commit writes one log row per partition it touches: its records of that
//! partition encoded as one blob ([`crate::batch`]), with their count. A row per record
//! would cost a statement's worth of SQLite work per record (binding seven values, building
//! the record, a b-tree insert); a batch is one insert of a blob that is mostly copied into
//! overflow pages. Reads and merges decode the batches in
//! Rust; a merge sorts the decoded records and inserts them into `journal` 32 per statement.
//!
//! ## Chain heads are written by the merge
//! Upserting an instance's `chain_heads` row on every append would be a b-tree write per
//! append and, with thousands of instances in flight, would dirty most of that table's
//! pages in every group commit (measured under W4-concurrent: about a fifth of the writer
//! thread). So the merge writes each merged instance's newest record there, once per merge,
//! and an instance's head
//! is the newer of its `chain_heads` row and its newest record in the log ([`head_row`]:
//! one read transaction; the writer thread keeps each partition's newest records in its
//! memory once read, [`crate::cache`]). The base still lives only in `chain_heads`, moved by
//! truncation, which writes the whole head with it: the records it makes dead may be the
//! instance's newest, and the merge drops dead records without moving the head.
//!
//! ## The log is partitioned
//! The log is [`LOG_PARTS`] tables (`journal_log_batch_0`, …), an instance's records always in the
//! same one ([`partition`], a stable hash of its id), each merged on its own. A merge
//! blocks the writer, and so every group commit queued behind it: one log of 8,192 rows
//! took 15–20 ms to merge, the server's p99 under event load. A partition holds an eighth
//! of the instances, so merging it at an eighth of the rows rewrites each of its instances'
//! leaf pages as rarely (the same rows per instance per merge) in an eighth of the time,
//! and a read scans an eighth of the log.
//!
//! ## The journal is clustered by partition
//! `journal`'s key is `(part, instance, seq)`, `part` being the instance's log partition
//! ([`part_sql`]; schema version 6). Keyed by `(instance, seq)` alone, the instances of one
//! partition would be spread over the whole table, so a merge of one partition would write
//! a leaf page per instance it moves: with W4-concurrent's 10,000 runs in flight, ~1,250
//! pages of 4 KiB for ~5,000 records, each page written again by the next merge. With the
//! partition first, a partition's instances are one contiguous range of the table and its
//! merge rewrites the leaves of that range only. `chain_heads`, which the merge upserts for
//! every instance it moves, is keyed by `(part, instance)` for the same reason. Measured on
//! W4-concurrent (the WAL of two repetitions with checkpoints switched off, frames counted
//! by the table owning each page): 8,504 journal frames with the partition first against
//! 25,723 keyed by instance alone, a WAL of 68 MB against 139 MB. Every statement on
//! either table names the partition, computed from the instance.
//!
//! ## Truncation never scans the log
//! Compaction (a snapshot, then [`truncate_before`]) runs often for a busy reactive
//! instance, inside the writer's batches. Deleting its rows from the unindexed log, or
//! looking a hash up there, would scan the whole log each time (measured under the server's
//! event load: 40% of the writer thread). So truncation moves the instance's chain base and
//! deletes from the indexed `journal` only; log rows at or below the base are dead, every
//! read of the log skips them (`seq > base_seq`), and the merge drops them instead of
//! moving them. The new base's hash is the covering snapshot's (checked when it was
//! stored); the snapshot is checked against the chain head, or, when the instance has
//! appended since, against its record found by scanning the log backwards from the newest
//! row (a few batches back).

use std::cell::RefCell;

use rusqlite::{Connection, OptionalExtension, params};
use weft_store::{Appended, Chaining, Error, GENESIS, Hash, NewRecord, Record, Result, Snapshot};

use crate::batch::{self, LogRecord};
use crate::cache;
use crate::schema::map_err;

thread_local! {
    /// How the writer thread hashes appends: its store's mode, set once when the store
    /// opens ([`set_chaining`]); the writer thread is the only one that appends.
    static CHAINING: RefCell<Chaining> = const { RefCell::new(Chaining::Plain) };
}

/// Sets the mode appends on this thread are hashed with (the writer thread, at open).
pub(crate) fn set_chaining(chaining: Chaining) {
    CHAINING.with(|c| *c.borrow_mut() = chaining);
}

/// How many tables the journal log is split into (see the module docs). Part of the schema:
/// changing it needs a migration that merges the old tables.
pub const LOG_PARTS: usize = 8;

/// The log tables, by partition.
pub(crate) const LOG_TABLES: [&str; LOG_PARTS] = [
    "journal_log_batch_0",
    "journal_log_batch_1",
    "journal_log_batch_2",
    "journal_log_batch_3",
    "journal_log_batch_4",
    "journal_log_batch_5",
    "journal_log_batch_6",
    "journal_log_batch_7",
];

/// A stable 64-bit hash of an instance id (FNV-1a): its log partition is `hash % LOG_PARTS`
/// in every process and every build, which is what makes rows findable after a restart.
pub(crate) fn instance_hash(instance: &str) -> u64 {
    instance.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The log partition of an instance.
pub fn partition(instance: &str) -> usize {
    (instance_hash(instance) % LOG_PARTS as u64) as usize
}

/// An instance's partition as the leading column of `journal`'s key (see the module docs).
pub(crate) fn part_sql(instance: &str) -> i64 {
    partition(instance) as i64
}

fn seq_to_sql(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| Error::invalid(format!("sequence number {seq} is too large")))
}

fn seq_from_sql(v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::Corrupt {
        message: format!("negative sequence number {v} in the journal"),
    })
}

fn hash_from_sql(bytes: &[u8], what: &str) -> Result<Hash> {
    Hash::from_slice(bytes).ok_or_else(|| Error::Corrupt {
        message: format!("{what} is not a 32-byte hash"),
    })
}

/// A chain-head row: (head_seq, head_hash, base_seq, base_hash).
type HeadRow = cache::Head;

/// Reads an instance's chain head row (on the writer thread, from its memory when it has
/// the row: [`crate::cache`]): its `chain_heads` row, with the head moved on to its newest
/// record in the log when that is newer (appends leave `chain_heads` to the merge: see the
/// module docs). One read transaction, so a merge cannot move the records in between.
pub(crate) fn head_row(conn: &Connection, instance: &str) -> Result<Option<HeadRow>> {
    if let Some(head) = cache::head(instance) {
        return Ok(Some(head));
    }
    let head = in_read_tx(conn, |c| {
        let stored = stored_head(c, instance)?;
        let newest = newest_in_log(c, instance)?;
        Ok(match (stored, newest) {
            (Some((hs, _, bs, bh)), Some((ls, lh))) if ls > hs => Some((ls, lh, bs, bh)),
            (None, Some((ls, lh))) => Some((ls, lh, 0, GENESIS)),
            (stored, _) => stored,
        })
    })?;
    if let Some(h) = head {
        cache::set_head(instance, h);
    }
    Ok(head)
}

/// An instance's `chain_heads` row (its head as of the last merge or truncation; its base).
pub(crate) fn stored_head(conn: &Connection, instance: &str) -> Result<Option<HeadRow>> {
    let row = conn
        .prepare_cached(
            "SELECT head_seq, head_hash, base_seq, base_hash FROM chain_heads
             WHERE part = ?1 AND instance = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![part_sql(instance), instance], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                ))
            })
            .optional()
        })
        .map_err(map_err)?;
    row.map(|(hs, hh, bs, bh)| {
        Ok((
            seq_from_sql(hs)?,
            hash_from_sql(&hh, "a chain head hash")?,
            seq_from_sql(bs)?,
            hash_from_sql(&bh, "a chain base hash")?,
        ))
    })
    .transpose()
}

/// An instance's newest record in the log: on the writer thread from its memory of the
/// partition's heads (read once, then kept up to date), elsewhere by a scan. Dead records
/// (at or below the chain base) never win against `chain_heads`, which truncation brings
/// up to the head.
fn newest_in_log(conn: &Connection, instance: &str) -> Result<Option<(u64, Hash)>> {
    let part = partition(instance);
    if let Some(known) = cache::log_head(part, instance) {
        return Ok(known);
    }
    // The whole partition's heads (at most a partition's records), which the writer keeps.
    let mut heads = cache::LogHeads::default();
    scan_log(conn, part, false, |r| {
        cache::keep_newest(&mut heads, r.instance, r.seq, r.hash);
        Ok(true)
    })?;
    let newest = heads.get(instance).copied();
    cache::set_log_heads(part, heads);
    Ok(newest)
}

/// Appends inside the current transaction, chaining from the stored head.
pub(crate) fn append(conn: &Connection, instance: &str, records: &[NewRecord]) -> Result<Appended> {
    append_many(conn, &[(instance, records)])?
        .into_iter()
        .next()
        .ok_or_else(|| Error::backend("an append returned no result"))
}

/// A journal row as SQLite returns it: (seq, kind, body, at_ms, prev_hash, hash).
type RawRecord = (i64, String, Vec<u8>, i64, Vec<u8>, Vec<u8>);

fn raw_record(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<RawRecord> {
    Ok((
        r.get(first)?,
        r.get(first + 1)?,
        r.get(first + 2)?,
        r.get(first + 3)?,
        r.get(first + 4)?,
        r.get(first + 5)?,
    ))
}

fn to_record((seq, kind, body, at_ms, prev, hash): RawRecord) -> Result<Record> {
    Ok(Record {
        seq: seq_from_sql(seq)?,
        kind,
        body,
        at_ms,
        prev_hash: hash_from_sql(&prev, "a record's prev_hash")?,
        hash: hash_from_sql(&hash, "a record's hash")?,
    })
}

/// Reads records in sequence order, from both tables, in one read transaction (one
/// consistent view even while a merge moves records between them). An instance's records
/// in the log all come after those in `journal`, so the log is scanned only when `journal`
/// had fewer than `limit`.
pub(crate) fn read(
    conn: &Connection,
    instance: &str,
    from: u64,
    limit: u32,
) -> Result<Vec<Record>> {
    in_read_tx(conn, |c| {
        let mut out = read_merged(c, instance, from, limit)?;
        if out.len() >= limit as usize {
            return Ok(out);
        }
        let mut log = read_log_many(c, &[(instance.to_string(), from)])?;
        out.extend(log.remove(instance).unwrap_or_default());
        out.truncate(limit as usize);
        Ok(out)
    })
}

/// Runs `f` inside a read transaction, unless the connection is in one already (the
/// writer's batch).
fn in_read_tx<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    if !conn.is_autocommit() {
        return f(conn);
    }
    let tx = conn.unchecked_transaction().map_err(map_err)?;
    let out = f(&tx)?;
    tx.commit().map_err(map_err)?;
    Ok(out)
}

/// An instance's chain base (0 when it has no chain yet): its log records at or below it
/// are dead. Truncation is the only thing that moves it, always in `chain_heads`.
pub(crate) fn base_seq(conn: &Connection, instance: &str) -> Result<u64> {
    let head = match cache::head(instance) {
        Some(h) => Some(h),
        None => stored_head(conn, instance)?,
    };
    Ok(head.map_or(0, |h| h.2))
}

/// The bytes of a log row's batch (column 0): anything but a blob is damage.
fn batch_bytes<'r>(row: &'r rusqlite::Row<'_>, table: &str) -> Result<&'r [u8]> {
    row.get_ref(0)
        .map_err(map_err)?
        .as_blob()
        .map_err(|_| Error::Corrupt {
            message: format!("{table} holds a batch that is not a blob"),
        })
}

/// Calls `f` on every record of log partition `part`, batch by batch in append order
/// (`newest_first`: newest batch first), until it returns `false`.
fn scan_log(
    conn: &Connection,
    part: usize,
    newest_first: bool,
    mut f: impl FnMut(LogRecord<'_>) -> Result<bool>,
) -> Result<()> {
    let Some(table) = LOG_TABLES.get(part) else {
        return Err(Error::invalid(format!("no journal log partition {part}")));
    };
    let order = if newest_first { "DESC" } else { "ASC" };
    let mut st = conn
        .prepare_cached(&format!("SELECT data FROM {table} ORDER BY rowid {order}"))
        .map_err(map_err)?;
    let mut rows = st.query([]).map_err(map_err)?;
    while let Some(row) = rows.next().map_err(map_err)? {
        for r in batch::decode(batch_bytes(row, table)?) {
            if !f(r?)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// [`read`] of the `journal` table alone (with [`read_log_many`] for a batch).
pub(crate) fn read_merged(
    conn: &Connection,
    instance: &str,
    from: u64,
    limit: u32,
) -> Result<Vec<Record>> {
    let mut st = conn
        .prepare_cached(
            "SELECT seq, kind, body, at_ms, prev_hash, hash FROM journal
             WHERE part = ?1 AND instance = ?2 AND seq >= ?3 ORDER BY seq LIMIT ?4",
        )
        .map_err(map_err)?;
    let rows = st
        .query_map(
            params![
                part_sql(instance),
                instance,
                seq_to_sql(from)?,
                i64::from(limit)
            ],
            |r| raw_record(r, 0),
        )
        .map_err(map_err)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(to_record(row.map_err(map_err)?)?);
    }
    Ok(out)
}

/// Every live record of the log (above its chain base) whose instance is one of `ids`
/// and whose seq is at least that instance's `from`, grouped per instance in sequence
/// order: one scan of the log for a whole batch (the batched load of recovery), instead of
/// one per instance.
pub(crate) fn read_log_many(
    conn: &Connection,
    ids: &[(String, u64)],
) -> Result<std::collections::HashMap<String, Vec<Record>>> {
    let want: std::collections::HashMap<&str, u64> =
        ids.iter().map(|(i, from)| (i.as_str(), *from)).collect();
    let mut parts = [false; LOG_PARTS];
    for id in want.keys() {
        parts[partition(id)] = true;
    }
    let mut bases: std::collections::HashMap<String, u64> = Default::default();
    let mut out: std::collections::HashMap<String, Vec<Record>> = Default::default();
    for part in (0..LOG_PARTS).filter(|p| parts[*p]) {
        scan_log(conn, part, false, |r| {
            let Some(&from) = want.get(r.instance) else {
                return Ok(true);
            };
            let base = match bases.get(r.instance) {
                Some(b) => *b,
                None => {
                    let b = base_seq(conn, r.instance)?;
                    bases.insert(r.instance.to_string(), b);
                    b
                }
            };
            if r.seq >= from && r.seq > base {
                out.entry(r.instance.to_string())
                    .or_default()
                    .push(r.to_record());
            }
            Ok(true)
        })?;
    }
    for recs in out.values_mut() {
        recs.sort_by_key(|r| r.seq);
    }
    Ok(out)
}

/// Moves every live row of log partition `part` into `journal` (sorted, so each
/// instance's leaf pages are written once), drops the dead ones (at or below their
/// instance's chain base: truncated while in the log) and empties the partition: how many
/// rows moved. Runs in the caller's transaction. A row already in `journal` (never written
/// by this store) fails it as damage.
///
/// Telling dead rows apart costs a chain-head lookup per row (about 10% of W4-concurrent,
/// which never truncates), so it is done only where a row can be dead: with `after_restart`
/// (the log may hold anything a previous process truncated) or when an instance of the
/// partition was truncated since its last merge (the writer connection's
/// [`TRUNCATED_SINCE_MERGE`] table, transactional like the rest: a rolled-back merge or
/// truncation leaves it as it was).
pub(crate) fn merge_log(conn: &Connection, part: usize, after_restart: bool) -> Result<u64> {
    let Some(table) = LOG_TABLES.get(part) else {
        return Err(Error::invalid(format!("no journal log partition {part}")));
    };
    let part_key = part as i64;
    let dead_possible = after_restart
        || conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM temp.truncated_since_merge WHERE part = ?1)",
            )
            .and_then(|mut s| s.query_row([part_key], |r| r.get::<_, bool>(0)))
            .map_err(map_err)?;
    let mut batches: Vec<Vec<u8>> = Vec::new();
    {
        let mut st = conn
            .prepare_cached(&format!("SELECT data FROM {table} ORDER BY rowid"))
            .map_err(map_err)?;
        let mut rows = st.query([]).map_err(map_err)?;
        while let Some(row) = rows.next().map_err(map_err)? {
            batches.push(batch_bytes(row, table)?.to_vec());
        }
    }
    use std::collections::hash_map::Entry;
    let mut recs: Vec<LogRecord<'_>> = Vec::new();
    let mut bases: std::collections::HashMap<&str, u64> = Default::default();
    for b in &batches {
        for r in batch::decode(b) {
            let r = r?;
            if dead_possible {
                let base = match bases.entry(r.instance) {
                    Entry::Occupied(e) => *e.get(),
                    Entry::Vacant(e) => *e.insert(base_seq(conn, r.instance)?),
                };
                if r.seq <= base {
                    continue;
                }
            }
            recs.push(r);
        }
    }
    // Sorted, so each instance's leaf pages are written once (stable: ties keep log order,
    // and a tie is a repeated record, which the insert reports).
    recs.sort_by(|a, b| (a.instance, a.seq).cmp(&(b.instance, b.seq)));
    insert_records(
        conn,
        part_key,
        (
            "INSERT OR FAIL INTO journal (part, instance, seq, kind, body, at_ms, prev_hash, hash) VALUES ",
            "(?,?,?,?,?,?,?,?)",
            "",
        ),
        &recs,
        |r, key, args| {
            args.extend([
                &key.part as &dyn rusqlite::ToSql,
                &r.instance,
                &key.seq,
                &r.kind,
                &r.body,
                &r.at_ms,
                &r.prev.0,
                &r.hash.0,
            ]);
        },
        |e| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::ConstraintViolation) => Error::Corrupt {
                message: format!("the journal log repeats a journal record: {e}"),
            },
            _ => map_err(e),
        },
    )?;
    // The chain heads the appends left to the merge: each instance's newest record (the
    // last of its run in sorted order).
    let newest: Vec<LogRecord<'_>> = recs
        .chunk_by(|a, b| a.instance == b.instance)
        .filter_map(|run| run.last().copied())
        .collect();
    insert_records(
        conn,
        part_key,
        (
            "INSERT OR FAIL INTO chain_heads (part, instance, head_seq, head_hash, base_seq, base_hash) VALUES ",
            "(?,?,?,?,0,?)",
            " ON CONFLICT (part, instance) DO UPDATE SET head_seq = excluded.head_seq,
               head_hash = excluded.head_hash WHERE excluded.head_seq > head_seq",
        ),
        &newest,
        |r, key, args| {
            args.extend([
                &key.part as &dyn rusqlite::ToSql,
                &r.instance,
                &key.seq,
                &r.hash.0,
                &GENESIS.0,
            ]);
        },
        map_err,
    )?;
    conn.prepare_cached(&format!("DELETE FROM {table}"))
        .and_then(|mut s| s.execute([]))
        .map_err(map_err)?;
    cache::log_merged(part);
    conn.prepare_cached("DELETE FROM temp.truncated_since_merge WHERE part = ?1")
        .and_then(|mut s| s.execute([part_key]))
        .map_err(map_err)?;
    Ok(recs.len() as u64)
}

/// The writer connection's record of instances truncated since their partition's last
/// merge (see [`merge_log`]): a temporary table, so it lives and dies with the connection.
pub(crate) const TRUNCATED_SINCE_MERGE: &str =
    "CREATE TEMP TABLE IF NOT EXISTS truncated_since_merge (
       part INTEGER NOT NULL, instance TEXT NOT NULL, PRIMARY KEY (part, instance))
     WITHOUT ROWID";

/// Records in each log partition (counted when the store opens).
pub(crate) fn log_rows(conn: &Connection) -> Result<[u64; LOG_PARTS]> {
    let mut out = [0; LOG_PARTS];
    for (n, table) in out.iter_mut().zip(LOG_TABLES) {
        *n = conn
            .query_row(
                &format!("SELECT coalesce(sum(n), 0) FROM {table}"),
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
            .map_err(map_err)?;
    }
    Ok(out)
}

/// The hash of one live record: an indexed lookup in `journal`, else a scan of the log from
/// its newest row back (the log has no index). Compaction asks for a record its instance
/// appended moments ago, so the scan stops within the last batches instead of crossing the
/// whole log (which, under load, would be most of the writer thread's time).
fn record_hash(conn: &Connection, instance: &str, seq: u64) -> Result<Option<Hash>> {
    let seq_sql = seq_to_sql(seq)?;
    let h: Option<Vec<u8>> = conn
        .prepare_cached("SELECT hash FROM journal WHERE part = ?1 AND instance = ?2 AND seq = ?3")
        .and_then(|mut s| {
            s.query_row(params![part_sql(instance), instance, seq_sql], |r| r.get(0))
                .optional()
        })
        .map_err(map_err)?;
    if let Some(h) = h {
        return hash_from_sql(&h, "a record's hash").map(Some);
    }
    let base = base_seq(conn, instance)?;
    if seq <= base {
        return Ok(None);
    }
    let mut found = None;
    scan_log(conn, partition(instance), true, |r| {
        if r.instance == instance && r.seq == seq {
            found = Some(r.hash);
        }
        Ok(found.is_none())
    })?;
    Ok(found)
}

/// Stores a snapshot after checking it against the journal.
pub(crate) fn put_snapshot(conn: &Connection, instance: &str, snap: &Snapshot) -> Result<()> {
    let (head_seq, head_hash, base_seq, base_hash) =
        head_row(conn, instance)?.unwrap_or((0, GENESIS, 0, GENESIS));
    let matches = if snap.seq > head_seq || snap.seq < base_seq {
        false
    } else if snap.seq == head_seq {
        snap.hash == head_hash
    } else if snap.seq == base_seq {
        snap.hash == base_hash
    } else {
        record_hash(conn, instance, snap.seq)? == Some(snap.hash)
    };
    if !matches {
        return Err(Error::invalid(format!(
            "snapshot of {instance} at seq {} does not match its journal (head {head_seq})",
            snap.seq
        )));
    }
    let seq = seq_to_sql(snap.seq)?;
    conn.prepare_cached(
        "INSERT OR REPLACE INTO snapshots (instance, seq, hash, state, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| {
        s.execute(params![
            instance,
            seq,
            &snap.hash.0[..],
            snap.state,
            snap.at_ms
        ])
    })
    .map_err(map_err)?;
    Ok(())
}

/// The latest snapshot.
pub(crate) fn latest_snapshot(conn: &Connection, instance: &str) -> Result<Option<Snapshot>> {
    let row = conn
        .prepare_cached(
            "SELECT seq, hash, state, at_ms FROM snapshots WHERE instance = ?1
             ORDER BY seq DESC LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row([instance], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })
            .optional()
        })
        .map_err(map_err)?;
    row.map(|(seq, hash, state, at_ms)| {
        Ok(Snapshot {
            seq: seq_from_sql(seq)?,
            hash: hash_from_sql(&hash, "a snapshot hash")?,
            state,
            at_ms,
        })
    })
    .transpose()
}

/// Drops records before `before` behind a covering snapshot: moves the chain base to
/// `before - 1` and deletes the records below it from `journal`; those still in the log
/// are dead from now on (see the module docs). Returns how many records were dropped.
pub(crate) fn truncate_before(conn: &Connection, instance: &str, before: u64) -> Result<u64> {
    let Some((head_seq, head_hash, base_seq, _)) = head_row(conn, instance)? else {
        return Ok(0);
    };
    if before <= base_seq + 1 {
        return Ok(0);
    }
    let new_base = before - 1;
    let snap: Option<(i64, Vec<u8>)> = conn
        .prepare_cached(
            "SELECT seq, hash FROM snapshots WHERE instance = ?1 ORDER BY seq DESC LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row([instance], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(map_err)?;
    let snap = snap
        .map(|(seq, hash)| {
            Ok::<_, Error>((seq_from_sql(seq)?, hash_from_sql(&hash, "a snapshot hash")?))
        })
        .transpose()?;
    let snap_seq = snap.map_or(0, |s| s.0);
    if snap_seq < new_base {
        return Err(Error::NoSnapshot {
            message: format!(
                "cannot drop {instance}'s journal before seq {before}: the latest snapshot is at seq {snap_seq}"
            ),
        });
    }
    // The usual compaction truncates right behind its snapshot, whose hash was checked
    // against the chain when it was stored.
    let base_hash = match snap {
        Some((seq, hash)) if seq == new_base => Some(hash),
        _ => record_hash(conn, instance, new_base)?,
    }
    .ok_or_else(|| Error::Corrupt {
        message: format!("{instance}: journal record {new_base} is missing"),
    })?;
    let (before_sql, base_sql) = (seq_to_sql(before)?, seq_to_sql(new_base)?);
    conn.prepare_cached("DELETE FROM journal WHERE part = ?1 AND instance = ?2 AND seq < ?3")
        .and_then(|mut s| s.execute(params![part_sql(instance), instance, before_sql]))
        .map_err(map_err)?;
    cache::forget_head(instance);
    // The whole head too: the instance's newest records may be in the log only, and once
    // they are dead the merge drops them instead of moving the head on.
    let head_sql = seq_to_sql(head_seq)?;
    conn.prepare_cached(
        "INSERT INTO chain_heads (part, instance, head_seq, head_hash, base_seq, base_hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (part, instance) DO UPDATE SET head_seq = excluded.head_seq,
           head_hash = excluded.head_hash, base_seq = excluded.base_seq,
           base_hash = excluded.base_hash",
    )
    .and_then(|mut s| {
        s.execute(params![
            part_sql(instance),
            instance,
            head_sql,
            &head_hash.0[..],
            base_sql,
            &base_hash.0[..]
        ])
    })
    .map_err(map_err)?;
    conn.prepare_cached("INSERT OR IGNORE INTO temp.truncated_since_merge VALUES (?1, ?2)")
        .and_then(|mut s| s.execute(params![partition(instance) as i64, instance]))
        .map_err(map_err)?;
    conn.prepare_cached("DELETE FROM snapshots WHERE instance = ?1 AND seq < ?2")
        .and_then(|mut s| s.execute(params![instance, base_sql]))
        .map_err(map_err)?;
    Ok(new_base - base_seq)
}

/// A record's key values as SQL binds them: its instance's partition and its seq.
struct SqlKey {
    part: i64,
    seq: i64,
}

/// Rows per multi-row `INSERT` of [`merge_log`] (its journal rows and chain heads).
const ROWS_PER_INSERT: usize = 32;

/// Runs `head` `tuple`,`tuple`,… `tail` over `rows` (records of log partition `part`),
/// [`ROWS_PER_INSERT`] rows per statement, each row's values given by `bind` (with the
/// row's partition and seq as SQL, [`SqlKey`]); a failure is mapped by `on_err`.
fn insert_records<'r>(
    conn: &Connection,
    part: i64,
    (head, tuple, tail): (&str, &str, &str),
    rows: &'r [LogRecord<'r>],
    bind: for<'b> fn(&'b LogRecord<'r>, &'b SqlKey, &mut Vec<&'b dyn rusqlite::ToSql>),
    on_err: fn(rusqlite::Error) -> Error,
) -> Result<()> {
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = values_sql(head, tuple, chunk.len(), tail);
        let seqs = chunk
            .iter()
            .map(|r| {
                Ok(SqlKey {
                    part,
                    seq: seq_to_sql(r.seq)?,
                })
            })
            .collect::<Result<Vec<SqlKey>>>()?;
        let mut args: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 8);
        for (r, seq) in chunk.iter().zip(&seqs) {
            bind(r, seq, &mut args);
        }
        conn.prepare_cached(&sql)
            .and_then(|mut st| st.execute(rusqlite::params_from_iter(args)))
            .map_err(on_err)?;
    }
    Ok(())
}

/// A log batch is cut at this size (a group commit of large records writes several).
const MAX_BATCH_BYTES: usize = 4 << 20;

/// Writes the records encoded in `b` as one row of log partition `part` and empties `b`
/// (nothing when it is empty).
fn insert_batch(conn: &Connection, part: usize, b: &mut (Vec<u8>, i64)) -> Result<()> {
    if b.1 == 0 {
        return Ok(());
    }
    conn.prepare_cached(&format!(
        "INSERT INTO {} (n, data) VALUES (?1, ?2)",
        LOG_TABLES[part]
    ))
    .and_then(|mut s| s.execute(params![b.1, &b.0]))
    .map_err(map_err)?;
    b.0.clear();
    b.1 = 0;
    Ok(())
}

fn values_sql(head: &str, tuple: &str, rows: usize, tail: &str) -> String {
    let mut sql = String::with_capacity(head.len() + rows * (tuple.len() + 1) + tail.len());
    sql.push_str(head);
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(tuple);
    }
    sql.push_str(tail);
    sql
}

/// Appends to many instances (each at most once) inside the current transaction: one log
/// batch per partition touched (cut at [`MAX_BATCH_BYTES`]), no chain-head write (the
/// merge's: see the module docs). Chains continue from [`head_row`]; an empty record list
/// only reports the head. The writer's memory learns the new heads.
pub(crate) fn append_many(
    conn: &Connection,
    items: &[(&str, &[NewRecord])],
) -> Result<Vec<Appended>> {
    let mut out = Vec::with_capacity(items.len());
    // Each partition's records of this append, encoded as one batch (see the module docs),
    // and how many there are.
    let mut batches: [(Vec<u8>, i64); LOG_PARTS] = Default::default();
    // (instance, head seq, head hash, base), remembered once all batches are written.
    let mut heads: Vec<(&str, i64, Hash, (u64, Hash))> = Vec::with_capacity(items.len());
    let chaining = CHAINING.with(|c| c.borrow().clone());
    for (instance, records) in items {
        let (mut seq, mut prev, base) = match head_row(conn, instance)? {
            Some((s, h, bs, bh)) => (s, h, (bs, bh)),
            None => (0, GENESIS, (0, GENESIS)),
        };
        let first_seq = seq + 1;
        let part = partition(instance);
        for r in records.iter() {
            if batches[part].0.len() >= MAX_BATCH_BYTES {
                insert_batch(conn, part, &mut batches[part])?;
            }
            seq += 1;
            // Fails before anything is written for a seq SQLite cannot hold.
            seq_to_sql(seq)?;
            let hash = chaining.record(&prev, seq, &r.kind, &r.body, r.at_ms)?;
            let (bytes, n) = &mut batches[part];
            batch::encode(bytes, instance, seq, r, &prev, &hash)?;
            *n += 1;
            prev = hash;
        }
        if !records.is_empty() {
            heads.push((instance, seq_to_sql(seq)?, prev, base));
        }
        out.push(Appended {
            first_seq,
            last_seq: seq,
            head: prev,
        });
    }
    for (part, b) in batches.iter_mut().enumerate() {
        insert_batch(conn, part, b)?;
    }
    for (instance, seq, hash, (base_seq, base_hash)) in &heads {
        // `seq` came from a u64 (`seq_to_sql`), so it is not negative.
        cache::set_head(instance, (*seq as u64, *hash, *base_seq, *base_hash));
        cache::note_log_head(partition(instance), instance, *seq as u64, *hash);
    }
    Ok(out)
}
