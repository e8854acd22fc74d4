//! weft-store-sqlite: the embedded, default [`weft_store::Store`]: one file under `./.weft/`,
//! WAL mode, `synchronous=FULL` (every commit is fsync'd), no setup.
//!
//! Writes go through one writer thread with **group commit** ([`writer`]): concurrent
//! appends from many instances share one transaction and one fsync, and each caller is
//! answered only after its batch committed. Reads use a pool of separate connections.
//!
//! ## Driver choice (measured)
//! `rusqlite` 0.41 (bundled SQLite) against `sqlx` 0.9's SQLite driver: journal-shaped rows
//! (WAL, `synchronous=FULL`, `WITHOUT ROWID`, 7 columns, 32-byte hashes) inserted in
//! transactions of 1, 100 and 1,000 rows; release build, 2 cores, other builds running
//! (load ≈ 2.7), two runs each, rows/s:
//!
//! | driver   | batch 1 (1,000 rows)     | batch 100 (10,000 rows) | batch 1,000 (10,000 rows) |
//! |----------|--------------------------|-------------------------|---------------------------|
//! | rusqlite | 205 – 234 (4.3–4.9 ms/commit) | 23,600 – 23,800    | 138,000 – 167,000         |
//! | sqlx     | 337 – 479 (2.1–3.0 ms/commit) | 18,900 – 21,600    | 29,000 – 45,000           |
//!
//! A commit of one row is an fsync either way (its spread is the machine's fsync under
//! load, not the driver). What group commit exercises is the per-row cost inside a large
//! transaction, where rusqlite is 3–5× faster (sqlx sends every statement through its
//! worker thread and a channel). rusqlite's synchronous API also fits the dedicated writer
//! thread directly. Chosen: rusqlite; hence `tokio-postgres` for PostgreSQL (sqlx and
//! rusqlite cannot both link libsqlite3-sys). The measurement programs were scratch crates
//! outside the workspace (one per driver, since they cannot be linked together).
//!
//! Architecture invariant: nothing but the writer thread writes to the file, so the chain
//! head read inside an append is never stale and chains cannot fork. The writer remembers
//! chain heads and lease rows between batches (`cache.rs`); a commit by any other connection
//! (another process on the same file) makes it forget them before its next batch.

mod batch;
mod cache;
mod checkpointer;
mod journal_log;
mod readers;
mod schema;
mod state;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::Value;
use weft_store::{
    Appended, EffectRecorded, Error, Fence, GENESIS, Hash, InstanceRecord, InstanceStatus, Lease,
    LeaseTerms, NewRecord, Page, PlanInfo, PlanRecord, PlanStatus, Record, Result, Snapshot,
    StatusChange, Store, Timer, ToolRecord, check_records,
};

pub use journal_log::{LOG_PARTS, partition as log_partition};
pub use schema::SCHEMA_VERSION;
pub use writer::WriterStats;

use readers::Readers;
use writer::Writer;

/// The embedded store.
pub struct SqliteStore {
    path: PathBuf,
    /// Declared before `writer`: stopped first, so the writer's connection is the last to
    /// close (and checkpoints and removes the WAL).
    _checkpointer: checkpointer::Checkpointer,
    writer: Writer,
    readers: Readers,
    log: Arc<LogState>,
    /// How the journal is hashed (the writer thread has its own copy).
    chaining: weft_store::Chaining,
}

/// Rows appended to a journal log partition before it is merged into the journal (see the
/// `journal_log` module): large enough that a merge rewrites each of the partition's live
/// instances' leaf pages once for many commits, and that a busy reactive instance is
/// compacted (every 100 records by default) while most of its rows are still in the log,
/// which the merge then drops instead of moving; small enough that a merge (which holds up
/// the group commits queued behind it) and a read's scan of the partition stay short.
pub const DEFAULT_LOG_MERGE_ROWS: u64 = 2_048;

/// A merge rewrites the last leaf pages of every instance in the partition, so it is put
/// off while the partition holds fewer than this many rows per instance (10,000 concurrent
/// runs of W4 put one or two rows each into it)...
const MIN_ROWS_PER_INSTANCE: u64 = 4;

/// ... but never past this many rows, which bounds a read's scan of the partition (with
/// 16,384, recovering 100,000 instances took 1.8–2.2 s instead of 1.35–1.45 s:
/// `weft bench durable_recovery`).
const MAX_LOG_ROWS: u64 = 8_192;

/// When to merge one log partition.
#[derive(Debug, Default)]
struct LogPart {
    /// Rows appended since the last merge (an estimate: rows of a batch that did not
    /// commit are counted too, which only merges a little early).
    rows: AtomicU64,
    /// Hashes of the instances appended to since the last merge.
    instances: std::sync::Mutex<std::collections::HashSet<u64, foldhash::fast::RandomState>>,
}

/// When to merge the journal log's partitions.
#[derive(Debug)]
struct LogState {
    parts: [LogPart; journal_log::LOG_PARTS],
    /// Merge a partition once its `rows` reach this.
    merge_at: AtomicU64,
    /// Whether merges wait for enough rows per instance (off once an interval is set).
    adaptive: AtomicBool,
    /// A merge of some partition is queued or running. Partitions fill at about the same
    /// rate, so without this they would all come due together and their merges would land
    /// in one batch: as long a pause as one merge of the whole log.
    merging: AtomicBool,
}

impl LogState {
    fn new() -> Self {
        LogState {
            parts: Default::default(),
            merge_at: AtomicU64::new(DEFAULT_LOG_MERGE_ROWS),
            adaptive: AtomicBool::new(true),
            merging: AtomicBool::new(false),
        }
    }

    /// Rows in the log's partitions, all together.
    fn rows(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| p.rows.load(Ordering::Relaxed))
            .sum()
    }

    /// The writer job that merges partition `part`, unless a merge (of any partition) is
    /// already queued or running.
    fn claim_merge(
        self: &Arc<Self>,
        part: usize,
    ) -> Option<impl FnOnce(&rusqlite::Connection) -> Result<()> + Send + use<>> {
        self.parts.get(part)?;
        if self.merging.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(merge_job(Arc::clone(self), part))
    }

    /// Whether partition `part` is due for a merge: [`Self::merge_at`] rows, and (adaptive)
    /// [`MIN_ROWS_PER_INSTANCE`] per instance in it or [`MAX_LOG_ROWS`].
    fn due(&self, part: &LogPart) -> bool {
        let rows = part.rows.load(Ordering::Relaxed);
        if rows == 0 || rows < self.merge_at.load(Ordering::Relaxed) {
            return false;
        }
        if !self.adaptive.load(Ordering::Relaxed) || rows >= MAX_LOG_ROWS {
            return true;
        }
        let distinct = part
            .instances
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len() as u64;
        rows >= MIN_ROWS_PER_INSTANCE.saturating_mul(distinct)
    }

    /// The merge job of the first partition that is due, unless a merge is queued or
    /// running.
    fn claim_due(
        self: &Arc<Self>,
    ) -> Option<impl FnOnce(&rusqlite::Connection) -> Result<()> + Send + use<>> {
        if self.merging.load(Ordering::Acquire) {
            return None;
        }
        let part = self.parts.iter().position(|p| self.due(p))?;
        self.claim_merge(part)
    }
}

/// A claimed merge: releases `merging` when dropped, whether its job ran or was dropped
/// unrun (a batch that could not begin fails its jobs without running them; the flag must
/// not stay set, or no partition would ever be merged again).
struct Claim(Arc<LogState>);

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.merging.store(false, Ordering::Release);
    }
}

/// The writer job that merges log partition `part` (the caller has set `log.merging`).
fn merge_job(
    log: Arc<LogState>,
    part: usize,
) -> impl FnOnce(&rusqlite::Connection) -> Result<()> + Send {
    let claim = Claim(log);
    move |c| {
        let log = &claim.0;
        // Everything in the partition now moves (appends run on this thread too); a batch
        // that fails to commit leaves rows behind, merged next time.
        let r = journal_log::merge_log(c, part, false);
        if let (Ok(_), Some(p)) = (&r, log.parts.get(part)) {
            p.rows.store(0, Ordering::Relaxed);
            p.instances
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
        }
        // Dropping `claim` releases the flag. A partition that came due meanwhile is
        // claimed by the next append, so merges are at least a batch apart (queued from
        // here, they would run back to back: measured under the server's event load, a p99
        // of 5.0–5.2 ms instead of 3.7–4.0 ms).
        drop(claim);
        r.map(|_| ())
    }
}

/// Above this many rows in the log, a batched load ([`Store::load_many`]) merges it
/// first: recovery loads hundreds of batches, and each would scan the log.
const LOAD_MERGE_ROWS: u64 = 1_024;

/// An instance's log hash ([`journal_log::instance_hash`]) and how many rows were appended to it.
type Appends = (u64, usize);

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating the file and its directories if needed) the store at `path`.
    /// Errors: `store_corrupt` for a file that is not a (weft) database, `schema_too_new`
    /// for one written by a newer weft, `store_unavailable` if it cannot be created.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        SqliteStore::open_keyed(path, None).await
    }

    /// [`SqliteStore::open`] with the journal key of a keyed chain (`None`: none
    /// configured). A new store given a key is keyed for good; see
    /// [`weft_store::Chaining::resolve`] for what an existing store accepts
    /// (`chain_key_mismatch` otherwise).
    pub async fn open_keyed(
        path: impl AsRef<Path>,
        key: Option<weft_store::ChainKey>,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let p = path.clone();
        let (conn, chaining) = tokio::task::spawn_blocking(move || {
            let conn = schema::open_writer(&p)?;
            // Whatever the last process left in the log goes into the journal now, so
            // recovery's reads find everything in the indexed table.
            let rows = journal_log::log_rows(&conn)?;
            if rows.iter().any(|n| *n > 0) {
                // Immediate: the write lock is taken (waiting out the busy timeout) before
                // the merge reads, so a process still writing to the file delays the open
                // instead of failing it with `database is locked`.
                let tx = rusqlite::Transaction::new_unchecked(
                    &conn,
                    rusqlite::TransactionBehavior::Immediate,
                )
                .map_err(schema::map_err)?;
                for (part, n) in rows.iter().enumerate() {
                    if *n > 0 {
                        journal_log::merge_log(&tx, part, true)?;
                    }
                }
                tx.commit().map_err(schema::map_err)?;
            }
            let chaining = schema::resolve_chaining(&conn, key.as_ref())?;
            Ok::<_, Error>((conn, chaining))
        })
        .await
        .map_err(|e| Error::backend(format!("opening the SQLite store failed: {e}")))??;
        let writer = Writer::start(conn)?;
        let ch = chaining.clone();
        writer
            .submit(move |_| {
                journal_log::set_chaining(ch);
                Ok(())
            })
            .await?;
        Ok(SqliteStore {
            chaining,
            _checkpointer: checkpointer::Checkpointer::start(&path)?,
            writer,
            readers: Readers::new(path.clone()),
            path,
            log: Arc::new(LogState::new()),
        })
    }

    /// Merges each partition of the journal log into the journal exactly every `rows` rows
    /// appended to it (1: after every append). By default a partition is merged every
    /// [`DEFAULT_LOG_MERGE_ROWS`] rows once it holds at least four rows per instance in
    /// it, and at 8,192 rows in any case. Reads see the same records either way: this only
    /// trades write amplification against read scans and merge pauses.
    pub fn set_log_merge_rows(&self, rows: u64) {
        self.log.merge_at.store(rows.max(1), Ordering::Relaxed);
        self.log.adaptive.store(false, Ordering::Relaxed);
    }

    /// Counts the rows appended to instances ([`Appends`]) and queues the merge of a log
    /// partition if one is due.
    fn appended(&self, appends: &[Appends]) {
        let log = &self.log;
        for &(hash, n) in appends {
            let part = (hash % journal_log::LOG_PARTS as u64) as usize;
            if let Some(p) = log.parts.get(part) {
                p.rows.fetch_add(n as u64, Ordering::Relaxed);
                p.instances
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(hash);
            }
        }
        if let Some(job) = log.claim_due() {
            self.writer.submit_detached(job);
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Caps the database at `pages` pages (`PRAGMA max_page_count`, 4 KiB pages by
    /// default): a write that needs more fails with `disk full`, exactly as on a full disk
    /// (the full-disk tests use it; operators can use it as a hard size limit). Lasts while
    /// the store is open. Returns the cap in effect (never below the current size).
    pub async fn set_max_pages(&self, pages: u64) -> Result<u64> {
        let pages = i64::try_from(pages).unwrap_or(i64::MAX);
        self.writer
            .submit(move |c| {
                c.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                    r.get::<_, i64>(0)
                })
                .map(|n| n.max(0) as u64)
                .map_err(schema::map_err)
            })
            .await
    }

    /// The database's size in pages (`PRAGMA page_count`).
    pub async fn page_count(&self) -> Result<u64> {
        self.writer
            .submit(|c| {
                c.query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0))
                    .map(|n| n.max(0) as u64)
                    .map_err(schema::map_err)
            })
            .await
    }

    /// Commits and jobs so far (commits are fsyncs), for measurements.
    pub fn writer_stats(&self) -> WriterStats {
        self.writer.stats()
    }
}

/// Appends to several instances in the current transaction: multi-row statements
/// ([`journal_log::append_many`]) unless an instance appears twice (then one at a time, so the
/// second append chains from the first).
fn append_all(c: &rusqlite::Connection, items: &[(&str, &[NewRecord])]) -> Result<Vec<Appended>> {
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    if items.iter().all(|(i, _)| seen.insert(*i)) {
        return journal_log::append_many(c, items);
    }
    items
        .iter()
        .map(|(i, recs)| {
            journal_log::append_many(c, &[(i, recs)])?
                .into_iter()
                .next()
                .ok_or_else(|| Error::backend("an append returned no result"))
        })
        .collect()
}

/// The file a location names: `sqlite://PATH`, `sqlite:PATH` or a bare path (empty: the
/// default `.weft/weft.db`).
pub fn path_of(location: &str) -> Result<std::path::PathBuf> {
    let s = location.trim();
    if s.is_empty() {
        return Ok(weft_store::DEFAULT_SQLITE_PATH.into());
    }
    let path = s
        .strip_prefix("sqlite://")
        .or_else(|| s.strip_prefix("sqlite:"))
        .unwrap_or(s);
    if path.is_empty() {
        return Err(Error::InvalidUrl {
            message: format!("`{s}` names no file"),
        });
    }
    Ok(path.into())
}

/// Opens a store from a location string (`sqlite://PATH`, `sqlite:PATH` or a bare path).
pub async fn open(location: &str) -> Result<Arc<dyn Store>> {
    open_keyed(location, None).await
}

/// [`open`] with the journal key of a keyed chain ([`SqliteStore::open_keyed`]).
pub async fn open_keyed(
    location: &str,
    key: Option<weft_store::ChainKey>,
) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(
        SqliteStore::open_keyed(path_of(location)?, key).await?,
    ))
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn chaining(&self) -> &weft_store::Chaining {
        &self.chaining
    }

    async fn status_seq(&self, instance: &str) -> Result<Option<u64>> {
        let instance = instance.to_string();
        self.readers
            .run(move |c| state::status_seq(c, &instance))
            .await
    }

    async fn append(&self, instance: &str, records: Vec<NewRecord>) -> Result<Appended> {
        check_records(&records)?;
        if records.is_empty() {
            let head = self.head(instance).await?;
            let (seq, hash) = head.unwrap_or((0, GENESIS));
            return Ok(Appended {
                first_seq: seq + 1,
                last_seq: seq,
                head: hash,
            });
        }
        let appends = [(journal_log::instance_hash(instance), records.len())];
        let instance = instance.to_string();
        let out = self
            .writer
            .submit(move |c| journal_log::append(c, &instance, &records))
            .await?;
        self.appended(&appends);
        Ok(out)
    }

    async fn append_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        records: Vec<NewRecord>,
    ) -> Result<Appended> {
        check_records(&records)?;
        let appends = [(journal_log::instance_hash(instance), records.len())];
        let instance = instance.to_string();
        let fence = fence.clone();
        // The writer thread is the only writer: the check and the append are one job.
        let out = self
            .writer
            .submit(move |c| {
                state::check_fence(c, &instance, &fence)?;
                if records.is_empty() {
                    let (seq, hash) =
                        journal_log::head_row(c, &instance)?.map_or((0, GENESIS), |h| (h.0, h.1));
                    return Ok(Appended {
                        first_seq: seq + 1,
                        last_seq: seq,
                        head: hash,
                    });
                }
                journal_log::append(c, &instance, &records)
            })
            .await?;
        self.appended(&appends);
        Ok(out)
    }

    async fn read(&self, instance: &str, from_seq: u64, limit: u32) -> Result<Vec<Record>> {
        let instance = instance.to_string();
        self.readers
            .run(move |c| journal_log::read(c, &instance, from_seq, limit))
            .await
    }

    async fn head(&self, instance: &str) -> Result<Option<(u64, Hash)>> {
        let instance = instance.to_string();
        let row = self
            .readers
            .run(move |c| journal_log::head_row(c, &instance))
            .await?;
        Ok(row.map(|(s, h, _, _)| (s, h)))
    }

    async fn chain_base(&self, instance: &str) -> Result<(u64, Hash)> {
        let instance = instance.to_string();
        let row = self
            .readers
            .run(move |c| journal_log::stored_head(c, &instance))
            .await?;
        // Truncation is the only thing that moves the base, always in `chain_heads`.
        Ok(row.map_or((0, GENESIS), |(_, _, s, h)| (s, h)))
    }

    async fn truncate_before(&self, instance: &str, before: u64) -> Result<u64> {
        let instance = instance.to_string();
        self.writer
            .submit(move |c| journal_log::truncate_before(c, &instance, before))
            .await
    }

    async fn put_snapshot(&self, instance: &str, snapshot: Snapshot) -> Result<()> {
        let instance = instance.to_string();
        self.writer
            .submit(move |c| journal_log::put_snapshot(c, &instance, &snapshot))
            .await
    }

    async fn write_batch(
        &self,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, Vec<NewRecord>)>,
        statuses: Vec<(String, InstanceStatus, Option<String>, i64)>,
    ) -> Result<Vec<Appended>> {
        for (_, recs) in &appends {
            check_records(recs)?;
        }
        let counts: Vec<Appends> = appends
            .iter()
            .map(|(i, r)| (journal_log::instance_hash(i), r.len()))
            .collect();
        // One job (one savepoint) for the whole batch: the writer's cost is per job.
        let out = self
            .writer
            .submit(move |c| {
                for r in &creates {
                    state::create_instance(c, r)?;
                }
                let items: Vec<(&str, &[NewRecord])> = appends
                    .iter()
                    .map(|(i, r)| (i.as_str(), r.as_slice()))
                    .collect();
                let out = append_all(c, &items)?;
                for (id, st, reason, now) in &statuses {
                    // A missing instance must not fail everyone else's records.
                    match state::update_status(c, id, *st, reason.as_deref(), *now) {
                        Ok(()) | Err(Error::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(out)
            })
            .await?;
        self.appended(&counts);
        Ok(out)
    }

    async fn write_batch_fenced(
        &self,
        terms: &LeaseTerms,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, u64, Arc<[NewRecord]>)>,
        statuses: Vec<StatusChange>,
    ) -> Result<Vec<Result<Appended>>> {
        for (_, _, recs) in &appends {
            check_records(recs)?;
        }
        let counts: Vec<Appends> = appends
            .iter()
            .map(|(i, _, r)| (journal_log::instance_hash(i), r.len()))
            .collect();
        let terms = terms.clone();
        // One job, as `write_batch`: the fence checks are point reads in the same
        // transaction (the writer thread is the only writer). Reading the batch's leases
        // and chain heads 32 keys per statement (`instance IN (?, …)`) instead takes 16–28%
        // more instructions for both (callgrind, W4-concurrent: SQLite builds and sorts an
        // ephemeral index of the list, which costs more than the statements it saves).
        let out = self
            .writer
            .submit(move |c| {
                for r in &creates {
                    state::create_instance(c, r)?;
                    state::lease_new(c, &r.id, &terms.owner, terms.ttl_ms, terms.now_ms)?;
                }
                let mut out: Vec<Result<Appended>> = Vec::with_capacity(appends.len());
                let mut allowed: Vec<(&str, &[NewRecord])> = Vec::with_capacity(appends.len());
                for (instance, epoch, recs) in &appends {
                    let fence = Fence {
                        owner: terms.owner.clone(),
                        epoch: *epoch,
                    };
                    match state::check_fence(c, instance, &fence) {
                        Ok(()) => {
                            allowed.push((instance, &**recs));
                            // Placeholder, replaced below in order.
                            out.push(Err(Error::Closed));
                        }
                        Err(e @ Error::LeaseLost { .. }) => out.push(Err(e)),
                        Err(e) => return Err(e),
                    }
                }
                let mut written = append_all(c, &allowed)?.into_iter();
                for slot in out.iter_mut() {
                    if matches!(slot, Err(Error::Closed)) {
                        *slot = written.next().map(Ok).unwrap_or(Err(Error::Closed));
                    }
                }
                for (id, st, reason, now) in &statuses {
                    state::update_status_owned(c, id, *st, reason.as_deref(), *now, &terms.owner)?;
                }
                Ok(out)
            })
            .await?;
        self.appended(&counts);
        Ok(out)
    }

    async fn load_many(
        &self,
        instances: &[String],
    ) -> Result<Vec<(Option<Snapshot>, Vec<Record>)>> {
        // One reader task and one read transaction for the whole batch (one consistent
        // view, one WAL read lock instead of two per instance): recovery of many
        // instances is bound by round trips, not by SQLite.
        if self.log.rows() > LOAD_MERGE_ROWS {
            for (part, p) in self.log.parts.iter().enumerate() {
                if p.rows.load(Ordering::Relaxed) == 0 {
                    continue;
                }
                if let Some(job) = self.log.claim_merge(part) {
                    self.writer.submit(job).await?;
                }
            }
        }
        let ids = instances.to_vec();
        self.readers
            .run(move |c| {
                let tx = c.unchecked_transaction().map_err(schema::map_err)?;
                let out = (|| {
                    let mut out = Vec::with_capacity(ids.len());
                    let mut from = Vec::with_capacity(ids.len());
                    for id in &ids {
                        let snap = journal_log::latest_snapshot(&tx, id)?;
                        let f = snap.as_ref().map_or(1, |s| s.seq + 1);
                        out.push((snap, journal_log::read_merged(&tx, id, f, u32::MAX)?));
                        from.push((id.clone(), f));
                    }
                    // The log's records come after the journal's: one scan for the batch.
                    let log = journal_log::read_log_many(&tx, &from)?;
                    for (id, (_, recs)) in ids.iter().zip(out.iter_mut()) {
                        if let Some(more) = log.get(id) {
                            recs.extend(more.iter().cloned());
                        }
                    }
                    Ok(out)
                })();
                // Read-only: ending it either way releases the snapshot.
                let _ = tx.commit();
                out
            })
            .await
    }

    async fn compact_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        snapshot: Snapshot,
    ) -> Result<u64> {
        let (instance, fence) = (instance.to_string(), fence.clone());
        // One job: the fence check, the snapshot and the truncation commit together or not
        // at all (a failed job's writes are rolled back).
        self.writer
            .submit(move |c| {
                state::check_fence(c, &instance, &fence)?;
                journal_log::put_snapshot(c, &instance, &snapshot)?;
                journal_log::truncate_before(c, &instance, snapshot.seq + 1)
            })
            .await
    }

    async fn latest_snapshot(&self, instance: &str) -> Result<Option<Snapshot>> {
        let instance = instance.to_string();
        self.readers
            .run(move |c| journal_log::latest_snapshot(c, &instance))
            .await
    }

    async fn put_plan(
        &self,
        tenant: &str,
        name: &str,
        document: Value,
        now_ms: i64,
    ) -> Result<u32> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.writer
            .submit(move |c| state::put_plan(c, &tenant, &name, &document, now_ms))
            .await
    }

    async fn get_plan(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<PlanRecord>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.readers
            .run(move |c| state::get_plan(c, &tenant, &name, version))
            .await
    }

    async fn list_plans(&self, tenant: &str) -> Result<Vec<PlanInfo>> {
        let tenant = tenant.to_string();
        self.readers
            .run(move |c| state::list_plans(c, &tenant))
            .await
    }

    async fn set_plan_status(
        &self,
        tenant: &str,
        name: &str,
        version: u32,
        status: PlanStatus,
    ) -> Result<()> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.writer
            .submit(move |c| state::set_plan_status(c, &tenant, &name, version, status))
            .await
    }

    async fn put_tool(
        &self,
        tenant: &str,
        name: &str,
        definition: Option<Value>,
        now_ms: i64,
    ) -> Result<u32> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.writer
            .submit(move |c| state::put_tool(c, &tenant, &name, definition.as_ref(), now_ms))
            .await
    }

    async fn list_tools(&self, tenant: Option<&str>) -> Result<Vec<ToolRecord>> {
        let tenant = tenant.map(str::to_string);
        self.readers
            .run(move |c| state::list_tools(c, tenant.as_deref()))
            .await
    }

    async fn create_instance(&self, record: InstanceRecord) -> Result<()> {
        self.writer
            .submit(move |c| state::create_instance(c, &record))
            .await
    }

    async fn update_status(
        &self,
        id: &str,
        status: InstanceStatus,
        reason: Option<String>,
        now_ms: i64,
    ) -> Result<()> {
        let id = id.to_string();
        self.writer
            .submit(move |c| state::update_status(c, &id, status, reason.as_deref(), now_ms))
            .await
    }

    async fn get_instance(&self, id: &str) -> Result<Option<InstanceRecord>> {
        let id = id.to_string();
        self.readers.run(move |c| state::get_instance(c, &id)).await
    }

    async fn list_instances(
        &self,
        tenant: &str,
        status: Option<InstanceStatus>,
        page: Page,
    ) -> Result<Vec<InstanceRecord>> {
        let tenant = tenant.to_string();
        self.readers
            .run(move |c| state::list_instances(c, &tenant, status, &page))
            .await
    }

    async fn non_terminal_instances(&self, page: Page) -> Result<Vec<InstanceRecord>> {
        self.readers
            .run(move |c| state::non_terminal(c, &page))
            .await
    }

    async fn put_timer(&self, timer: Timer) -> Result<()> {
        self.writer
            .submit(move |c| state::put_timer(c, &timer))
            .await
    }

    async fn due_timers(&self, now_ms: i64, limit: u32) -> Result<Vec<Timer>> {
        self.readers
            .run(move |c| state::due_timers(c, now_ms, limit))
            .await
    }

    async fn list_timers(&self, after: Option<(String, String)>, limit: u32) -> Result<Vec<Timer>> {
        self.readers
            .run(move |c| state::list_timers(c, after.as_ref(), limit))
            .await
    }

    async fn delete_timer(&self, instance: &str, timer_id: &str) -> Result<bool> {
        let (instance, timer_id) = (instance.to_string(), timer_id.to_string());
        self.writer
            .submit(move |c| state::delete_timer(c, &instance, &timer_id))
            .await
    }

    async fn record_effect(&self, key: &str, outcome: Value) -> Result<EffectRecorded> {
        let key = key.to_string();
        self.writer
            .submit(move |c| state::record_effect(c, &key, &outcome))
            .await
    }

    async fn get_effect(&self, key: &str) -> Result<Option<Value>> {
        let key = key.to_string();
        self.readers.run(move |c| state::get_effect(c, &key)).await
    }

    async fn delete_effects(&self, from: &str, to: &str, limit: u32) -> Result<u64> {
        let (from, to) = (from.to_string(), to.to_string());
        self.writer
            .submit(move |c| state::delete_effects(c, &from, &to, limit))
            .await
    }

    async fn acquire_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let (instance, owner) = (instance.to_string(), owner.to_string());
        self.writer
            .submit(move |c| state::acquire_lease(c, &instance, &owner, ttl_ms, now_ms))
            .await
    }

    async fn renew_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let (instance, owner) = (instance.to_string(), owner.to_string());
        self.writer
            .submit(move |c| state::renew_lease(c, &instance, &owner, ttl_ms, now_ms))
            .await
    }

    async fn acquire_leases(
        &self,
        instances: &[String],
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
        dead: &[String],
    ) -> Result<Vec<Option<u64>>> {
        if instances.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, owner, dead) = (instances.to_vec(), owner.to_string(), dead.to_vec());
        self.writer
            .submit(move |c| {
                ids.iter()
                    .map(|id| state::acquire_lease_epoch(c, id, &owner, ttl_ms, now_ms, &dead))
                    .collect()
            })
            .await
    }

    async fn renew_leases(
        &self,
        instances: &[String],
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<bool>> {
        if instances.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, owner) = (instances.to_vec(), owner.to_string());
        self.writer
            .submit(move |c| {
                ids.iter()
                    .map(|id| state::renew_lease(c, id, &owner, ttl_ms, now_ms))
                    .collect()
            })
            .await
    }

    async fn lease_owners(&self, now_ms: i64) -> Result<Vec<String>> {
        self.readers
            .run(move |c| state::lease_owners(c, now_ms))
            .await
    }

    async fn release_lease(&self, instance: &str, owner: &str) -> Result<bool> {
        let (instance, owner) = (instance.to_string(), owner.to_string());
        self.writer
            .submit(move |c| state::release_lease(c, &instance, &owner))
            .await
    }

    async fn release_leases(&self, instances: &[String], owner: &str) -> Result<usize> {
        if instances.is_empty() {
            return Ok(0);
        }
        let (ids, owner) = (instances.to_vec(), owner.to_string());
        self.writer
            .submit(move |c| {
                let mut n = 0;
                for id in &ids {
                    if state::release_lease(c, id, &owner)? {
                        n += 1;
                    }
                }
                Ok(n)
            })
            .await
    }

    async fn owner_of(&self, instance: &str, now_ms: i64) -> Result<Option<Lease>> {
        let instance = instance.to_string();
        self.readers
            .run(move |c| state::owner_of(c, &instance, now_ms))
            .await
    }
    async fn add_counts(
        &self,
        rows: Vec<weft_store::CountRow>,
        now_ms: i64,
    ) -> Result<Vec<weft_store::Counts>> {
        weft_store::check_count_rows(&rows)?;
        self.writer
            .submit(move |c| state::add_counts(c, &rows, now_ms))
            .await
    }

    async fn live_counts(&self, now_ms: i64) -> Result<Vec<weft_store::CountRow>> {
        self.readers
            .run(move |c| state::live_counts(c, now_ms))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One merge at a time, and a claim whose job is dropped unrun (its batch failed to
    /// begin) releases the flag.
    #[test]
    fn a_merge_claim_is_released_even_if_its_job_never_runs() {
        let log = Arc::new(LogState::new());
        let job = log.claim_merge(0).expect("free");
        assert!(log.claim_merge(1).is_none(), "one merge at a time");
        drop(job);
        assert!(log.claim_merge(1).is_some(), "released by the dropped job");
        assert!(log.claim_merge(LOG_PARTS).is_none(), "no such partition");
    }
}
