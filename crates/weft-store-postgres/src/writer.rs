//! Group commit of journal appends on PostgreSQL.
//!
//! One task drains queued append requests into one transaction per batch with a fixed number
//! of round trips whatever the batch size: create missing chain heads, lock all the batch's
//! heads (`SELECT … FOR UPDATE`, in instance order so two `weft` processes cannot deadlock),
//! compute seqs and hashes, insert all records with one `unnest`, move the heads, commit.
//! The row locks are what keep concurrent appenders in other processes from forking a chain.

use std::collections::BTreeMap;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};
use weft_store::{Appended, Chaining, Error, Fence, GENESIS, Hash, NewRecord, Result};

use crate::schema::{is_transient, map_err, map_pool};

/// Most requests committed together.
const MAX_BATCH: usize = 2_048;
/// Tries of a batch that hit a deadlock or serialisation failure.
const TRIES: usize = 5;

struct Request {
    instance: String,
    records: std::sync::Arc<[NewRecord]>,
    /// Append only if the instance's lease still matches (`append_fenced`).
    fence: Option<Fence>,
    reply: oneshot::Sender<Result<Appended>>,
}

/// Counters of the writer's work, for measurements.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub commits: u64,
    /// Append requests committed.
    pub appends: u64,
}

/// Handle to the append task; the task ends when the handle is dropped.
pub struct Writer {
    tx: mpsc::UnboundedSender<Request>,
    stats: std::sync::Arc<std::sync::Mutex<WriterStats>>,
}

impl Writer {
    /// Starts the task on the current runtime, hashing records under `chaining`.
    pub fn start(pool: Pool, chaining: Chaining) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = std::sync::Arc::new(std::sync::Mutex::new(WriterStats::default()));
        tokio::spawn(run(pool, chaining, rx, stats.clone()));
        Writer { tx, stats }
    }

    /// Commit counters so far.
    pub fn stats(&self) -> WriterStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// Appends in the next batch; resolves after it committed.
    pub async fn append(
        &self,
        instance: &str,
        records: Vec<NewRecord>,
        fence: Option<Fence>,
    ) -> Result<Appended> {
        self.append_shared(instance, records.into(), fence).await
    }

    /// [`Writer::append`] of records the caller keeps a share of (for a retry).
    pub async fn append_shared(
        &self,
        instance: &str,
        records: std::sync::Arc<[NewRecord]>,
        fence: Option<Fence>,
    ) -> Result<Appended> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Request {
                instance: instance.to_string(),
                records,
                fence,
                reply,
            })
            .map_err(|_| Error::Closed)?;
        answer.await.map_err(|_| Error::Closed)?
    }
}

async fn run(
    pool: Pool,
    chaining: Chaining,
    mut rx: mpsc::UnboundedReceiver<Request>,
    stats: std::sync::Arc<std::sync::Mutex<WriterStats>>,
) {
    let mut batch = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let mut outcome: std::result::Result<Vec<Result<Appended>>, Retry> = Err(Retry::Transient);
        for _ in 0..TRIES {
            outcome = commit_batch(&pool, &chaining, &batch).await;
            match &outcome {
                Err(Retry::Transient) => continue,
                _ => break,
            }
        }
        let outcome = outcome.map_err(|r| match r {
            Retry::Transient => Error::backend("PostgreSQL: append kept deadlocking; giving up"),
            Retry::Fatal(e) => e,
        });
        match outcome {
            Ok(results) => {
                if let Ok(mut s) = stats.lock() {
                    s.commits += 1;
                    s.appends += batch.len() as u64;
                }
                for (req, res) in batch.drain(..).zip(results) {
                    let _ = req.reply.send(res);
                }
            }
            Err(e) => {
                for req in batch.drain(..) {
                    let _ = req.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

enum Retry {
    Transient,
    Fatal(Error),
}

impl From<tokio_postgres::Error> for Retry {
    fn from(e: tokio_postgres::Error) -> Self {
        if is_transient(&e) {
            Retry::Transient
        } else {
            Retry::Fatal(map_err(e))
        }
    }
}

fn to_i64(seq: u64) -> std::result::Result<i64, Retry> {
    i64::try_from(seq).map_err(|_| Retry::Fatal(Error::invalid("sequence number too large")))
}

/// One transaction for the batch; the results are in request order.
async fn commit_batch(
    pool: &Pool,
    chaining: &Chaining,
    batch: &[Request],
) -> std::result::Result<Vec<Result<Appended>>, Retry> {
    let mut client = pool.get().await.map_err(|e| Retry::Fatal(map_pool(e)))?;
    let tx = client.transaction().await?;
    // Fenced requests: the lease rows, share-locked so no takeover commits in between.
    let fenced: Vec<&str> = batch
        .iter()
        .filter(|r| r.fence.is_some())
        .map(|r| r.instance.as_str())
        .collect();
    let mut leases: BTreeMap<String, (String, u64)> = BTreeMap::new();
    if !fenced.is_empty() {
        let rows = tx
            .query(
                "SELECT instance, owner, epoch FROM leases WHERE instance = ANY($1)
                 ORDER BY instance FOR SHARE",
                &[&fenced],
            )
            .await?;
        for row in rows {
            let epoch: i64 = row.try_get(2)?;
            leases.insert(row.try_get(0)?, (row.try_get(1)?, epoch.max(0) as u64));
        }
    }
    // A refused request writes nothing (not even an empty chain head).
    let refused: Vec<Option<Error>> = batch
        .iter()
        .map(|r| {
            let f = r.fence.as_ref()?;
            let found = leases.get(&r.instance);
            found
                .is_none_or(|(o, e)| *o != f.owner || *e != f.epoch)
                .then(|| Error::lease_lost(&r.instance, f, found.map(|(o, e)| (o.as_str(), *e))))
        })
        .collect();
    let instances: Vec<&str> = {
        let mut v: Vec<&str> = batch
            .iter()
            .zip(&refused)
            .filter(|(_, x)| x.is_none())
            .map(|(r, _)| r.instance.as_str())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    tx.execute(
        "INSERT INTO chain_heads (instance, head_seq, head_hash, base_seq, base_hash)
         SELECT i, 0, $2, 0, $2 FROM unnest($1::text[]) AS i ORDER BY i
         ON CONFLICT (instance) DO NOTHING",
        &[&instances, &&GENESIS.0[..]],
    )
    .await?;
    let rows = tx
        .query(
            "SELECT instance, head_seq, head_hash FROM chain_heads WHERE instance = ANY($1)
             ORDER BY instance FOR UPDATE",
            &[&instances],
        )
        .await?;
    let mut heads: BTreeMap<String, (u64, Hash)> = BTreeMap::new();
    for row in rows {
        let seq: i64 = row.try_get(1)?;
        let hash: Vec<u8> = row.try_get(2)?;
        let seq = u64::try_from(seq).map_err(|_| {
            Retry::Fatal(Error::Corrupt {
                message: "negative chain head".into(),
            })
        })?;
        let hash = Hash::from_slice(&hash).ok_or_else(|| {
            Retry::Fatal(Error::Corrupt {
                message: "chain head hash is not 32 bytes".into(),
            })
        })?;
        heads.insert(row.try_get(0)?, (seq, hash));
    }
    let total: usize = batch.iter().map(|r| r.records.len()).sum();
    let (mut c_inst, mut c_seq, mut c_kind, mut c_body, mut c_at, mut c_prev, mut c_hash) = (
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
    );
    let mut results = Vec::with_capacity(batch.len());
    for (req, refused) in batch.iter().zip(refused) {
        if let Some(e) = refused {
            results.push(Err(e));
            continue;
        }
        let (mut seq, mut prev) = heads.get(&req.instance).copied().unwrap_or((0, GENESIS));
        let first_seq = seq + 1;
        for r in req.records.iter() {
            seq += 1;
            let hash = chaining
                .record(&prev, seq, &r.kind, &r.body, r.at_ms)
                .map_err(Retry::Fatal)?;
            c_inst.push(req.instance.as_str());
            c_seq.push(to_i64(seq)?);
            c_kind.push(r.kind.as_str());
            c_body.push(r.body.as_slice());
            c_at.push(r.at_ms);
            c_prev.push(prev.0.to_vec());
            c_hash.push(hash.0.to_vec());
            prev = hash;
        }
        heads.insert(req.instance.clone(), (seq, prev));
        results.push(Ok(Appended {
            first_seq,
            last_seq: seq,
            head: prev,
        }));
    }
    tx.execute(
        "INSERT INTO journal (instance, seq, kind, body, at_ms, prev_hash, hash)
         SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::bytea[], $5::int8[],
                              $6::bytea[], $7::bytea[])",
        &[&c_inst, &c_seq, &c_kind, &c_body, &c_at, &c_prev, &c_hash],
    )
    .await?;
    let mut h_inst = Vec::with_capacity(instances.len());
    let mut h_seq = Vec::with_capacity(instances.len());
    let mut h_hash = Vec::with_capacity(instances.len());
    for i in &instances {
        if let Some((seq, hash)) = heads.get(*i) {
            h_inst.push(*i);
            h_seq.push(to_i64(*seq)?);
            h_hash.push(hash.0.to_vec());
        }
    }
    tx.execute(
        "UPDATE chain_heads h SET head_seq = u.seq, head_hash = u.hash
         FROM unnest($1::text[], $2::int8[], $3::bytea[]) AS u(instance, seq, hash)
         WHERE h.instance = u.instance",
        &[&h_inst, &h_seq, &h_hash],
    )
    .await?;
    tx.commit().await?;
    Ok(results)
}
