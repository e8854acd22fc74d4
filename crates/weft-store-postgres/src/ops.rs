//! Statements for everything but appends: reads, snapshots, compaction, plans, instance
//! records, timers, idempotency records and leases. Each is one statement or one short
//! transaction on a pooled connection.

use deadpool_postgres::Pool;
use deadpool_postgres::Transaction;
use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use weft_store::{
    CountRow, Counts, EffectRecorded, Error, Fence, GENESIS, Hash, InstanceRecord, InstanceStatus,
    Lease, Page, PlanInfo, PlanRecord, PlanStatus, Record, Result, Snapshot, Timer, ToolRecord,
};

use crate::schema::{is_unique_violation, map_err, map_pool};

/// Runs one statement returning rows.
pub(crate) async fn query(
    pool: &Pool,
    sql: &str,
    args: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let client = pool.get().await.map_err(map_pool)?;
    let st = client.prepare_cached(sql).await.map_err(map_err)?;
    client.query(&st, args).await.map_err(map_err)
}

/// Runs one statement returning the number of rows changed.
pub(crate) async fn execute(pool: &Pool, sql: &str, args: &[&(dyn ToSql + Sync)]) -> Result<u64> {
    let client = pool.get().await.map_err(map_pool)?;
    let st = client.prepare_cached(sql).await.map_err(map_err)?;
    client.execute(&st, args).await.map_err(map_err)
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T> {
    row.try_get(i).map_err(map_err)
}

fn seq_in(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| Error::invalid(format!("sequence number {seq} is too large")))
}

fn seq_out(v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::Corrupt {
        message: format!("negative sequence number {v}"),
    })
}

fn hash_out(v: &[u8]) -> Result<Hash> {
    Hash::from_slice(v).ok_or_else(|| Error::Corrupt {
        message: "a stored hash is not 32 bytes".into(),
    })
}

fn version_out(v: i64) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Corrupt {
        message: format!("plan version {v} out of range"),
    })
}

fn json_in(v: &Value) -> Result<String> {
    serde_json::to_string(v).map_err(Error::invalid)
}

fn json_out(s: &str, what: &str) -> Result<Value> {
    serde_json::from_str(s).map_err(|e| Error::Corrupt {
        message: format!("stored {what} is not JSON: {e}"),
    })
}

// --- journal -----------------------------------------------------------------------------

/// (head_seq, head_hash, base_seq, base_hash) of an instance.
pub(crate) type HeadRow = (u64, Hash, u64, Hash);

fn head_from(row: &Row) -> Result<HeadRow> {
    Ok((
        seq_out(get(row, 0)?)?,
        hash_out(&get::<Vec<u8>>(row, 1)?)?,
        seq_out(get(row, 2)?)?,
        hash_out(&get::<Vec<u8>>(row, 3)?)?,
    ))
}

/// The chain head row.
pub(crate) async fn head_row(pool: &Pool, instance: &str) -> Result<Option<HeadRow>> {
    let rows = query(
        pool,
        "SELECT head_seq, head_hash, base_seq, base_hash FROM chain_heads WHERE instance = $1",
        &[&instance],
    )
    .await?;
    rows.first().map(head_from).transpose()
}

/// Records in sequence order.
pub(crate) async fn read(
    pool: &Pool,
    instance: &str,
    from: u64,
    limit: u32,
) -> Result<Vec<Record>> {
    let rows = query(
        pool,
        "SELECT seq, kind, body, at_ms, prev_hash, hash FROM journal
         WHERE instance = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
        &[&instance, &seq_in(from)?, &i64::from(limit)],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Record {
                seq: seq_out(get(r, 0)?)?,
                kind: get(r, 1)?,
                body: get(r, 2)?,
                at_ms: get(r, 3)?,
                prev_hash: hash_out(&get::<Vec<u8>>(r, 4)?)?,
                hash: hash_out(&get::<Vec<u8>>(r, 5)?)?,
            })
        })
        .collect()
}

/// Stores a snapshot after checking it against the journal.
pub(crate) async fn put_snapshot(pool: &Pool, instance: &str, snap: &Snapshot) -> Result<()> {
    let (head_seq, _, base_seq, base_hash) = head_row(pool, instance)
        .await?
        .unwrap_or((0, GENESIS, 0, GENESIS));
    let seq = seq_in(snap.seq)?;
    let rows = query(
        pool,
        "SELECT hash FROM journal WHERE instance = $1 AND seq = $2",
        &[&instance, &seq],
    )
    .await?;
    let matches = match rows.first() {
        Some(r) => hash_out(&get::<Vec<u8>>(r, 0)?)? == snap.hash,
        None => snap.seq == base_seq && snap.hash == base_hash,
    };
    if snap.seq > head_seq || !matches {
        return Err(Error::invalid(format!(
            "snapshot of {instance} at seq {} does not match its journal (head {head_seq})",
            snap.seq
        )));
    }
    execute(
        pool,
        "INSERT INTO snapshots (instance, seq, hash, state, at_ms) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (instance, seq) DO UPDATE SET hash = excluded.hash, state = excluded.state,
           at_ms = excluded.at_ms",
        &[&instance, &seq, &&snap.hash.0[..], &snap.state, &snap.at_ms],
    )
    .await?;
    Ok(())
}

/// The latest snapshot.
pub(crate) async fn latest_snapshot(pool: &Pool, instance: &str) -> Result<Option<Snapshot>> {
    let rows = query(
        pool,
        "SELECT seq, hash, state, at_ms FROM snapshots WHERE instance = $1 ORDER BY seq DESC LIMIT 1",
        &[&instance],
    )
    .await?;
    rows.first()
        .map(|r| {
            Ok(Snapshot {
                seq: seq_out(get(r, 0)?)?,
                hash: hash_out(&get::<Vec<u8>>(r, 1)?)?,
                state: get(r, 2)?,
                at_ms: get(r, 3)?,
            })
        })
        .transpose()
}

/// Drops records before `before` behind a covering snapshot, holding the chain-head lock.
pub(crate) async fn truncate_before(pool: &Pool, instance: &str, before: u64) -> Result<u64> {
    let mut client = pool.get().await.map_err(map_pool)?;
    let tx = client.transaction().await.map_err(map_err)?;
    let removed = truncate_in(&tx, instance, before).await?;
    tx.commit().await.map_err(map_err)?;
    Ok(removed)
}

/// The chain-head row, locked for the rest of the transaction.
async fn head_for_update(tx: &Transaction<'_>, instance: &str) -> Result<Option<HeadRow>> {
    let rows = tx
        .query(
            "SELECT head_seq, head_hash, base_seq, base_hash FROM chain_heads WHERE instance = $1 FOR UPDATE",
            &[&instance],
        )
        .await
        .map_err(map_err)?;
    rows.first().map(head_from).transpose()
}

/// [`truncate_before`] inside `tx`.
async fn truncate_in(tx: &Transaction<'_>, instance: &str, before: u64) -> Result<u64> {
    let Some((_, _, base_seq, _)) = head_for_update(tx, instance).await? else {
        return Ok(0);
    };
    if before <= base_seq + 1 {
        return Ok(0);
    }
    let new_base = before - 1;
    let snap: Option<i64> = tx
        .query_one(
            "SELECT MAX(seq) FROM snapshots WHERE instance = $1",
            &[&instance],
        )
        .await
        .map_err(map_err)?
        .try_get(0)
        .map_err(map_err)?;
    let snap_seq = snap.map(seq_out).transpose()?.unwrap_or(0);
    if snap_seq < new_base {
        return Err(Error::NoSnapshot {
            message: format!(
                "cannot drop {instance}'s journal before seq {before}: the latest snapshot is at seq {snap_seq}"
            ),
        });
    }
    let (before_sql, base_sql) = (seq_in(before)?, seq_in(new_base)?);
    let row = tx
        .query_opt(
            "SELECT hash FROM journal WHERE instance = $1 AND seq = $2",
            &[&instance, &base_sql],
        )
        .await
        .map_err(map_err)?
        .ok_or_else(|| Error::Corrupt {
            message: format!("{instance}: journal record {new_base} is missing"),
        })?;
    let base_hash: Vec<u8> = get(&row, 0)?;
    let removed = tx
        .execute(
            "DELETE FROM journal WHERE instance = $1 AND seq < $2",
            &[&instance, &before_sql],
        )
        .await
        .map_err(map_err)?;
    tx.execute(
        "UPDATE chain_heads SET base_seq = $2, base_hash = $3 WHERE instance = $1",
        &[&instance, &base_sql, &base_hash],
    )
    .await
    .map_err(map_err)?;
    tx.execute(
        "DELETE FROM snapshots WHERE instance = $1 AND seq < $2",
        &[&instance, &base_sql],
    )
    .await
    .map_err(map_err)?;
    Ok(removed)
}

/// What recovery folds for many instances, in one statement (one consistent view): each
/// one's latest snapshot and every kept record after it, in the order of `instances`.
pub(crate) async fn load_many(
    pool: &Pool,
    instances: &[String],
) -> Result<Vec<(Option<Snapshot>, Vec<Record>)>> {
    let rows = query(
        pool,
        "WITH snap AS (
           SELECT DISTINCT ON (instance) instance, seq, hash, state, at_ms FROM snapshots
           WHERE instance = ANY($1) ORDER BY instance, seq DESC)
         SELECT 0 AS part, instance, seq, hash, state, at_ms, NULL::text, NULL::bytea FROM snap
         UNION ALL
         SELECT 1, j.instance, j.seq, j.hash, j.body, j.at_ms, j.kind, j.prev_hash
         FROM journal j LEFT JOIN snap s ON s.instance = j.instance
         WHERE j.instance = ANY($1) AND j.seq > COALESCE(s.seq, 0)
         ORDER BY 2, 1, 3",
        &[&instances],
    )
    .await?;
    let mut by: std::collections::HashMap<String, (Option<Snapshot>, Vec<Record>)> =
        std::collections::HashMap::with_capacity(instances.len());
    for r in &rows {
        let part: i32 = get(r, 0)?;
        let slot = by.entry(get::<String>(r, 1)?).or_default();
        let seq = seq_out(get(r, 2)?)?;
        let hash = hash_out(&get::<Vec<u8>>(r, 3)?)?;
        let at_ms: i64 = get(r, 5)?;
        if part == 0 {
            slot.0 = Some(Snapshot {
                seq,
                hash,
                state: get(r, 4)?,
                at_ms,
            });
        } else {
            slot.1.push(Record {
                seq,
                kind: get(r, 6)?,
                body: get(r, 4)?,
                at_ms,
                prev_hash: hash_out(&get::<Vec<u8>>(r, 7)?)?,
                hash,
            });
        }
    }
    // An instance asked twice gets its answer twice (moved out at its last mention).
    let mut left: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for i in instances {
        *left.entry(i.as_str()).or_default() += 1;
    }
    Ok(instances
        .iter()
        .map(|i| {
            let n = left.entry(i.as_str()).or_default();
            *n = n.saturating_sub(1);
            if *n == 0 {
                by.remove(i).unwrap_or_default()
            } else {
                by.get(i).cloned().unwrap_or_default()
            }
        })
        .collect())
}

/// Compaction by a lease holder in one transaction: the lease row is share-locked and
/// checked against `fence` (as the journal writer's fenced batches do), then the snapshot is
/// checked and stored and the records it covers are dropped, under the chain-head lock.
pub(crate) async fn compact_fenced(
    pool: &Pool,
    instance: &str,
    fence: &Fence,
    snap: &Snapshot,
) -> Result<u64> {
    let mut client = pool.get().await.map_err(map_pool)?;
    let tx = client.transaction().await.map_err(map_err)?;
    let lease = tx
        .query_opt(
            "SELECT owner, epoch FROM leases WHERE instance = $1 FOR SHARE",
            &[&instance],
        )
        .await
        .map_err(map_err)?;
    let found = match &lease {
        Some(r) => Some((get::<String>(r, 0)?, get::<i64>(r, 1)?.max(0) as u64)),
        None => None,
    };
    if found
        .as_ref()
        .is_none_or(|(o, e)| *o != fence.owner || *e != fence.epoch)
    {
        return Err(Error::lease_lost(
            instance,
            fence,
            found.as_ref().map(|(o, e)| (o.as_str(), *e)),
        ));
    }
    let (head_seq, _, base_seq, base_hash) = head_for_update(&tx, instance)
        .await?
        .unwrap_or((0, GENESIS, 0, GENESIS));
    let seq = seq_in(snap.seq)?;
    let row = tx
        .query_opt(
            "SELECT hash FROM journal WHERE instance = $1 AND seq = $2",
            &[&instance, &seq],
        )
        .await
        .map_err(map_err)?;
    let matches = match &row {
        Some(r) => hash_out(&get::<Vec<u8>>(r, 0)?)? == snap.hash,
        None => snap.seq == base_seq && snap.hash == base_hash,
    };
    if snap.seq > head_seq || !matches {
        return Err(Error::invalid(format!(
            "snapshot of {instance} at seq {} does not match its journal (head {head_seq})",
            snap.seq
        )));
    }
    tx.execute(
        "INSERT INTO snapshots (instance, seq, hash, state, at_ms) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (instance, seq) DO UPDATE SET hash = excluded.hash, state = excluded.state,
           at_ms = excluded.at_ms",
        &[&instance, &seq, &&snap.hash.0[..], &snap.state, &snap.at_ms],
    )
    .await
    .map_err(map_err)?;
    let removed = truncate_in(&tx, instance, snap.seq + 1).await?;
    tx.commit().await.map_err(map_err)?;
    Ok(removed)
}

// --- plans -------------------------------------------------------------------------------

/// Stores the next version (retrying if another process took the same number).
pub(crate) async fn put_plan(
    pool: &Pool,
    tenant: &str,
    name: &str,
    doc: &Value,
    now: i64,
) -> Result<u32> {
    let doc = json_in(doc)?;
    let client = pool.get().await.map_err(map_pool)?;
    let mut last = None;
    for _ in 0..10 {
        let r = client
            .query_one(
                "INSERT INTO plans (tenant, name, version, status, document, created_at_ms)
                 SELECT $1, $2, COALESCE(MAX(version), 0) + 1, 'template', $3, $4
                 FROM plans WHERE tenant = $1 AND name = $2 RETURNING version",
                &[&tenant, &name, &doc, &now],
            )
            .await;
        match r {
            Ok(row) => return version_out(get(&row, 0)?),
            Err(e) if is_unique_violation(&e) => last = Some(e),
            Err(e) => return Err(map_err(e)),
        }
    }
    Err(last.map_or_else(|| Error::backend("put_plan kept conflicting"), map_err))
}

fn info_from(r: &Row) -> Result<PlanInfo> {
    Ok(PlanInfo {
        tenant: get(r, 0)?,
        name: get(r, 1)?,
        version: version_out(get(r, 2)?)?,
        status: PlanStatus::parse(&get::<String>(r, 3)?)?,
        created_at_ms: get(r, 4)?,
    })
}

/// A plan version (latest when `None`).
pub(crate) async fn get_plan(
    pool: &Pool,
    tenant: &str,
    name: &str,
    version: Option<u32>,
) -> Result<Option<PlanRecord>> {
    let v = version.map(i64::from);
    let rows = query(
        pool,
        "SELECT tenant, name, version, status, created_at_ms, document FROM plans
         WHERE tenant = $1 AND name = $2 AND ($3::int8 IS NULL OR version = $3)
         ORDER BY version DESC LIMIT 1",
        &[&tenant, &name, &v],
    )
    .await?;
    rows.first()
        .map(|r| {
            Ok(PlanRecord {
                info: info_from(r)?,
                document: json_out(&get::<String>(r, 5)?, "plan document")?,
            })
        })
        .transpose()
}

/// Every version of a tenant's plans.
pub(crate) async fn list_plans(pool: &Pool, tenant: &str) -> Result<Vec<PlanInfo>> {
    let rows = query(
        pool,
        "SELECT tenant, name, version, status, created_at_ms FROM plans WHERE tenant = $1
         ORDER BY name, version",
        &[&tenant],
    )
    .await?;
    rows.iter().map(info_from).collect()
}

/// Stores a new version of a tenant's tool (`None`: deleted).
pub(crate) async fn put_tool(
    pool: &Pool,
    tenant: &str,
    name: &str,
    definition: Option<&Value>,
    now: i64,
) -> Result<u32> {
    let text = definition.map(json_in).transpose()?;
    let client = pool.get().await.map_err(map_pool)?;
    let mut last = None;
    for _ in 0..10 {
        let r = client
            .query_one(
                "INSERT INTO tools (tenant, name, version, definition, created_at_ms)
                 SELECT $1, $2, COALESCE(MAX(version), 0) + 1, $3, $4
                 FROM tools WHERE tenant = $1 AND name = $2 RETURNING version",
                &[&tenant, &name, &text, &now],
            )
            .await;
        match r {
            Ok(row) => return version_out(get(&row, 0)?),
            Err(e) if is_unique_violation(&e) => last = Some(e),
            Err(e) => return Err(map_err(e)),
        }
    }
    Err(last.map_or_else(|| Error::backend("put_tool kept conflicting"), map_err))
}

/// Every tool version of `tenant` (every tenant's when `None`).
pub(crate) async fn list_tools(pool: &Pool, tenant: Option<&str>) -> Result<Vec<ToolRecord>> {
    let rows = query(
        pool,
        "SELECT tenant, name, version, definition, created_at_ms FROM tools
         WHERE $1::TEXT IS NULL OR tenant = $1 ORDER BY tenant, name, version",
        &[&tenant],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(ToolRecord {
                tenant: get(r, 0)?,
                name: get(r, 1)?,
                version: version_out(get(r, 2)?)?,
                definition: get::<Option<String>>(r, 3)?
                    .map(|d| json_out(&d, "tool definition"))
                    .transpose()?,
                created_at_ms: get(r, 4)?,
            })
        })
        .collect()
}

/// Changes a version's status.
pub(crate) async fn set_plan_status(
    pool: &Pool,
    tenant: &str,
    name: &str,
    version: u32,
    status: PlanStatus,
) -> Result<()> {
    let n = execute(
        pool,
        "UPDATE plans SET status = $4 WHERE tenant = $1 AND name = $2 AND version = $3",
        &[&tenant, &name, &i64::from(version), &status.as_str()],
    )
    .await?;
    if n == 0 {
        return Err(Error::not_found(format!(
            "plan {tenant}/{name} version {version}"
        )));
    }
    Ok(())
}

// --- instances ---------------------------------------------------------------------------

const COLS: &str =
    "id, tenant, plan_name, plan_version, status, reason, created_at_ms, updated_at_ms, parent";

fn instance_from(r: &Row) -> Result<InstanceRecord> {
    Ok(InstanceRecord {
        id: get(r, 0)?,
        tenant: get(r, 1)?,
        plan_name: get(r, 2)?,
        plan_version: version_out(get(r, 3)?)?,
        status: InstanceStatus::parse(&get::<String>(r, 4)?)?,
        reason: get(r, 5)?,
        created_at_ms: get(r, 6)?,
        updated_at_ms: get(r, 7)?,
        parent: get(r, 8)?,
    })
}

/// Creates an instance record.
pub(crate) async fn create_instance(pool: &Pool, r: &InstanceRecord) -> Result<()> {
    let n = execute(
        pool,
        &format!("INSERT INTO instances ({COLS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT (id) DO NOTHING"),
        &[
            &r.id,
            &r.tenant,
            &r.plan_name,
            &i64::from(r.plan_version),
            &r.status.as_str(),
            &r.reason,
            &r.created_at_ms,
            &r.updated_at_ms,
            &r.parent,
        ],
    )
    .await?;
    if n == 0 {
        return Err(Error::Conflict {
            what: format!("instance {} already exists", r.id),
        });
    }
    Ok(())
}

/// Creates many instances in one statement (`conflict` if any id exists; then none is
/// created).
pub(crate) async fn create_instances(pool: &Pool, rs: &[InstanceRecord]) -> Result<()> {
    let col = |f: &dyn Fn(&InstanceRecord) -> String| rs.iter().map(f).collect::<Vec<String>>();
    let ids = col(&|r| r.id.clone());
    let tenants = col(&|r| r.tenant.clone());
    let plans = col(&|r| r.plan_name.clone());
    let statuses = col(&|r| r.status.as_str().to_string());
    let versions: Vec<i64> = rs.iter().map(|r| i64::from(r.plan_version)).collect();
    let reasons: Vec<Option<String>> = rs.iter().map(|r| r.reason.clone()).collect();
    let created: Vec<i64> = rs.iter().map(|r| r.created_at_ms).collect();
    let updated: Vec<i64> = rs.iter().map(|r| r.updated_at_ms).collect();
    let parents: Vec<Option<String>> = rs.iter().map(|r| r.parent.clone()).collect();
    let n = execute(
        pool,
        &format!(
            "INSERT INTO instances ({COLS}) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::text[]) ON CONFLICT (id) DO NOTHING"
        ),
        &[
            &ids, &tenants, &plans, &versions, &statuses, &reasons, &created, &updated, &parents,
        ],
    )
    .await?;
    if n != rs.len() as u64 {
        return Err(Error::Conflict {
            what: format!(
                "{} of {} instances already existed",
                rs.len() as u64 - n,
                rs.len()
            ),
        });
    }
    Ok(())
}

/// Sets many instances' statuses in one statement (missing ids are skipped).
pub(crate) async fn update_statuses(
    pool: &Pool,
    rows: &[(String, InstanceStatus, Option<String>, i64)],
) -> Result<()> {
    let ids: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    let sts: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    let reasons: Vec<Option<&str>> = rows.iter().map(|r| r.2.as_deref()).collect();
    let nows: Vec<i64> = rows.iter().map(|r| r.3).collect();
    execute(
        pool,
        "UPDATE instances AS i SET status = u.status, reason = u.reason, updated_at_ms = u.now,
           status_seq = coalesce((SELECT h.head_seq FROM chain_heads h WHERE h.instance = u.id), 0)
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS u(id, status, reason, now)
         WHERE i.id = u.id",
        &[&ids, &sts, &reasons, &nows],
    )
    .await?;
    Ok(())
}

/// The head seq an instance's status was last set at (`None`: no such instance).
pub(crate) async fn status_seq(pool: &Pool, id: &str) -> Result<Option<u64>> {
    let rows = query(
        pool,
        "SELECT status_seq FROM instances WHERE id = $1",
        &[&id],
    )
    .await?;
    Ok(rows
        .first()
        .map(|r| r.get::<_, i64>(0))
        .map(|v| v.max(0) as u64))
}

/// Updates an instance's status.
pub(crate) async fn update_status(
    pool: &Pool,
    id: &str,
    status: InstanceStatus,
    reason: Option<&str>,
    now: i64,
) -> Result<()> {
    let n = execute(
        pool,
        "UPDATE instances SET status = $2, reason = $3, updated_at_ms = $4,
           status_seq = coalesce((SELECT h.head_seq FROM chain_heads h WHERE h.instance = $1), 0)
         WHERE id = $1",
        &[&id, &status.as_str(), &reason, &now],
    )
    .await?;
    if n == 0 {
        return Err(Error::not_found(format!("instance {id}")));
    }
    Ok(())
}

/// Instances matching a WHERE clause.
pub(crate) async fn instances(
    pool: &Pool,
    where_sql: &str,
    args: &[&(dyn ToSql + Sync)],
) -> Result<Vec<InstanceRecord>> {
    let rows = query(
        pool,
        &format!("SELECT {COLS} FROM instances WHERE {where_sql}"),
        args,
    )
    .await?;
    rows.iter().map(instance_from).collect()
}

/// A tenant's instances, one page.
pub(crate) async fn list_instances(
    pool: &Pool,
    tenant: &str,
    status: Option<InstanceStatus>,
    page: &Page,
) -> Result<Vec<InstanceRecord>> {
    let limit = i64::from(page.checked_limit()?);
    let status = status.map(InstanceStatus::as_str);
    instances(
        pool,
        "tenant = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR id > $3)
         ORDER BY id LIMIT $4",
        &[&tenant, &status, &page.after, &limit],
    )
    .await
}

/// Non-terminal instances, one page.
pub(crate) async fn non_terminal(pool: &Pool, page: &Page) -> Result<Vec<InstanceRecord>> {
    let limit = i64::from(page.checked_limit()?);
    instances(
        pool,
        "status IN ('running', 'waiting', 'stuck', 'paused') AND ($1::text IS NULL OR id > $1)
         ORDER BY id LIMIT $2",
        &[&page.after, &limit],
    )
    .await
}

// --- timers, effects, leases -------------------------------------------------------------

/// Sets or moves a timer.
pub(crate) async fn put_timer(pool: &Pool, t: &Timer) -> Result<()> {
    execute(
        pool,
        "INSERT INTO timers (instance, timer_id, due_ms, payload) VALUES ($1, $2, $3, $4)
         ON CONFLICT (instance, timer_id) DO UPDATE SET due_ms = excluded.due_ms,
           payload = excluded.payload",
        &[&t.instance, &t.timer_id, &t.due_ms, &json_in(&t.payload)?],
    )
    .await?;
    Ok(())
}

/// Due timers, earliest first.
pub(crate) async fn due_timers(pool: &Pool, now: i64, limit: u32) -> Result<Vec<Timer>> {
    let rows = query(
        pool,
        "SELECT instance, timer_id, due_ms, payload FROM timers WHERE due_ms <= $1
         ORDER BY due_ms, instance, timer_id LIMIT $2",
        &[&now, &i64::from(limit)],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Timer {
                instance: get(r, 0)?,
                timer_id: get(r, 1)?,
                due_ms: get(r, 2)?,
                payload: json_out(&get::<String>(r, 3)?, "timer payload")?,
            })
        })
        .collect()
}

/// Removes a timer.
pub(crate) async fn delete_timer(pool: &Pool, instance: &str, timer_id: &str) -> Result<bool> {
    Ok(execute(
        pool,
        "DELETE FROM timers WHERE instance = $1 AND timer_id = $2",
        &[&instance, &timer_id],
    )
    .await?
        > 0)
}

/// Records an effect unless its key exists.
pub(crate) async fn record_effect(
    pool: &Pool,
    key: &str,
    outcome: &Value,
) -> Result<EffectRecorded> {
    let n = execute(
        pool,
        "INSERT INTO effects (key, outcome) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        &[&key, &json_in(outcome)?],
    )
    .await?;
    if n > 0 {
        return Ok(EffectRecorded::Inserted);
    }
    match get_effect(pool, key).await? {
        Some(v) => Ok(EffectRecorded::AlreadyExists(v)),
        None => Err(Error::backend(format!(
            "effect {key} vanished while being recorded"
        ))),
    }
}

/// An effect's outcome.
pub(crate) async fn get_effect(pool: &Pool, key: &str) -> Result<Option<Value>> {
    let rows = query(pool, "SELECT outcome FROM effects WHERE key = $1", &[&key]).await?;
    rows.first()
        .map(|r| json_out(&get::<String>(r, 0)?, "effect outcome"))
        .transpose()
}

/// Removes up to `limit` effects with keys in `[from, to)`, in byte order whatever the
/// database's collation (`COLLATE "C"`).
pub(crate) async fn delete_effects(pool: &Pool, from: &str, to: &str, limit: u32) -> Result<u64> {
    execute(
        pool,
        "DELETE FROM effects WHERE key IN (SELECT key FROM effects \
         WHERE key COLLATE \"C\" >= $1 AND key COLLATE \"C\" < $2 LIMIT $3)",
        &[&from, &to, &i64::from(limit)],
    )
    .await
}

fn expiry(now: i64, ttl: i64) -> Result<i64> {
    if ttl <= 0 {
        return Err(Error::invalid(format!(
            "lease ttl {ttl} ms must be positive"
        )));
    }
    Ok(now.saturating_add(ttl))
}

/// Takes or extends a lease: one atomic upsert, so two processes cannot both win.
pub(crate) async fn acquire_lease(
    pool: &Pool,
    instance: &str,
    owner: &str,
    ttl: i64,
    now: i64,
) -> Result<bool> {
    let n = execute(
        pool,
        "INSERT INTO leases (instance, owner, expires_at_ms, epoch) VALUES ($1, $2, $3, 1)
         ON CONFLICT (instance) DO UPDATE SET owner = excluded.owner,
           expires_at_ms = excluded.expires_at_ms,
           epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch
                        ELSE leases.epoch + 1 END
         WHERE leases.owner = excluded.owner OR leases.expires_at_ms <= $4",
        &[&instance, &owner, &expiry(now, ttl)?, &now],
    )
    .await?;
    Ok(n > 0)
}

/// Extends `owner`'s lease unless it was released or taken over (see `Store::renew_lease`).
pub(crate) async fn renew_lease(
    pool: &Pool,
    instance: &str,
    owner: &str,
    ttl: i64,
    now: i64,
) -> Result<bool> {
    let n = execute(
        pool,
        "UPDATE leases SET expires_at_ms = $3 WHERE instance = $1 AND owner = $2 AND expires_at_ms <> $4",
        &[&instance, &owner, &expiry(now, ttl)?, &i64::MIN],
    )
    .await?;
    Ok(n > 0)
}

/// Gives a lease up: it expires at once; the row (and its epoch) stays, so the next
/// owner's epoch is higher.
pub(crate) async fn release_lease(pool: &Pool, instance: &str, owner: &str) -> Result<bool> {
    Ok(execute(
        pool,
        "UPDATE leases SET expires_at_ms = $3
         WHERE instance = $1 AND owner = $2 AND expires_at_ms <> $3",
        &[&instance, &owner, &i64::MIN],
    )
    .await?
        > 0)
}

/// Gives up many leases of `owner` in one statement: how many it held.
pub(crate) async fn release_leases(
    pool: &Pool,
    instances: &[String],
    owner: &str,
) -> Result<usize> {
    let n = execute(
        pool,
        "UPDATE leases SET expires_at_ms = $3
         WHERE instance = ANY($1) AND owner = $2 AND expires_at_ms <> $3",
        &[&instances, &owner, &i64::MIN],
    )
    .await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// The live lease.
pub(crate) async fn owner_of(pool: &Pool, instance: &str, now: i64) -> Result<Option<Lease>> {
    let rows = query(
        pool,
        "SELECT owner, expires_at_ms, epoch FROM leases WHERE instance = $1 AND expires_at_ms > $2",
        &[&instance, &now],
    )
    .await?;
    rows.first()
        .map(|r| {
            Ok(Lease {
                owner: get(r, 0)?,
                expires_at_ms: get(r, 1)?,
                epoch: get::<i64>(r, 2)?.max(0) as u64,
            })
        })
        .transpose()
}

/// Creates many instances and takes their leases (owner, epoch 1) in one statement
/// (`conflict` if any id exists; then nothing is created).
pub(crate) async fn create_instances_leased(
    pool: &Pool,
    rs: &[InstanceRecord],
    owner: &str,
    expires: i64,
) -> Result<()> {
    let col = |f: &dyn Fn(&InstanceRecord) -> String| rs.iter().map(f).collect::<Vec<String>>();
    let ids = col(&|r| r.id.clone());
    let tenants = col(&|r| r.tenant.clone());
    let plans = col(&|r| r.plan_name.clone());
    let statuses = col(&|r| r.status.as_str().to_string());
    let versions: Vec<i64> = rs.iter().map(|r| i64::from(r.plan_version)).collect();
    let reasons: Vec<Option<String>> = rs.iter().map(|r| r.reason.clone()).collect();
    let created: Vec<i64> = rs.iter().map(|r| r.created_at_ms).collect();
    let updated: Vec<i64> = rs.iter().map(|r| r.updated_at_ms).collect();
    let parents: Vec<Option<String>> = rs.iter().map(|r| r.parent.clone()).collect();
    let rows = query(
        pool,
        &format!(
            "WITH ins AS (INSERT INTO instances ({COLS}) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::text[]) ON CONFLICT (id) DO NOTHING RETURNING id),
             l AS (INSERT INTO leases (instance, owner, expires_at_ms, epoch) SELECT id, $10, $11, 1 FROM ins ON CONFLICT (instance) DO NOTHING)
             SELECT count(*) FROM ins"
        ),
        &[
            &ids, &tenants, &plans, &versions, &statuses, &reasons, &created, &updated, &parents,
            &owner, &expires,
        ],
    )
    .await?;
    let n: i64 = rows.first().map(|r| get(r, 0)).transpose()?.unwrap_or(0);
    if n != rs.len() as i64 {
        return Err(Error::Conflict {
            what: format!(
                "{} of {} instances already existed",
                rs.len() as i64 - n,
                rs.len()
            ),
        });
    }
    Ok(())
}

/// Sets many instances' statuses in one statement, only where `owner` holds the lease row.
pub(crate) async fn update_statuses_owned(
    pool: &Pool,
    rows: &[(String, InstanceStatus, Option<String>, i64)],
    owner: &str,
) -> Result<()> {
    let ids: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    let sts: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    let reasons: Vec<Option<&str>> = rows.iter().map(|r| r.2.as_deref()).collect();
    let nows: Vec<i64> = rows.iter().map(|r| r.3).collect();
    execute(
        pool,
        "UPDATE instances AS i SET status = u.status, reason = u.reason, updated_at_ms = u.now,
           status_seq = coalesce((SELECT h.head_seq FROM chain_heads h WHERE h.instance = u.id), 0)
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS u(id, status, reason, now)
         WHERE i.id = u.id
           AND EXISTS (SELECT 1 FROM leases l WHERE l.instance = u.id AND l.owner = $5)",
        &[&ids, &sts, &reasons, &nows, &owner],
    )
    .await?;
    Ok(())
}

/// Takes or extends many leases in one statement: the epoch of each lease `owner` holds
/// afterwards, `None` where another owner's live lease kept it.
pub(crate) async fn acquire_leases(
    pool: &Pool,
    instances: &[String],
    owner: &str,
    ttl: i64,
    now: i64,
    dead: &[String],
) -> Result<Vec<Option<u64>>> {
    let rows = query(
        pool,
        "INSERT INTO leases (instance, owner, expires_at_ms, epoch)
         SELECT i, $2, $3, 1 FROM unnest($1::text[]) AS i ORDER BY i
         ON CONFLICT (instance) DO UPDATE SET owner = excluded.owner,
           expires_at_ms = excluded.expires_at_ms,
           epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch
                        ELSE leases.epoch + 1 END
         WHERE leases.owner = excluded.owner OR leases.expires_at_ms <= $4
           OR leases.owner = ANY($5)
         RETURNING instance, epoch",
        &[&instances, &owner, &expiry(now, ttl)?, &now, &dead],
    )
    .await?;
    let mut got = std::collections::HashMap::with_capacity(rows.len());
    for r in &rows {
        got.insert(get::<String>(r, 0)?, get::<i64>(r, 1)?.max(0) as u64);
    }
    Ok(instances.iter().map(|i| got.get(i).copied()).collect())
}

/// Extends many leases of `owner` in one statement (as [`renew_lease`]): which ones were.
pub(crate) async fn renew_leases(
    pool: &Pool,
    instances: &[String],
    owner: &str,
    ttl: i64,
    now: i64,
) -> Result<Vec<bool>> {
    let rows = query(
        pool,
        "UPDATE leases SET expires_at_ms = $3
         WHERE instance = ANY($1) AND owner = $2 AND expires_at_ms <> $4
         RETURNING instance",
        &[&instances, &owner, &expiry(now, ttl)?, &i64::MIN],
    )
    .await?;
    let mut got = std::collections::HashSet::with_capacity(rows.len());
    for r in &rows {
        got.insert(get::<String>(r, 0)?);
    }
    Ok(instances.iter().map(|i| got.contains(i)).collect())
}

/// A page of the timer table by (instance, timer id), strictly after `after`.
pub(crate) async fn list_timers(
    pool: &Pool,
    after: Option<&(String, String)>,
    limit: u32,
) -> Result<Vec<Timer>> {
    let limit = i64::from(Page::first(limit).checked_limit()?);
    let (ai, at) = match after {
        Some((i, t)) => (Some(i.as_str()), Some(t.as_str())),
        None => (None, None),
    };
    let rows = query(
        pool,
        "SELECT instance, timer_id, due_ms, payload FROM timers
         WHERE $1::text IS NULL OR (instance, timer_id) > ($1::text, $2::text)
         ORDER BY instance, timer_id LIMIT $3",
        &[&ai, &at, &limit],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Timer {
                instance: get(r, 0)?,
                timer_id: get(r, 1)?,
                due_ms: get(r, 2)?,
                payload: json_out(&get::<String>(r, 3)?, "timer payload")?,
            })
        })
        .collect()
}

/// Owners of live leases, each once.
pub(crate) async fn lease_owners(pool: &Pool, now: i64) -> Result<Vec<String>> {
    let rows = query(
        pool,
        "SELECT DISTINCT owner FROM leases WHERE expires_at_ms > $1 ORDER BY owner",
        &[&now],
    )
    .await?;
    rows.iter().map(|r| get(r, 0)).collect()
}

// --- shared counters ---------------------------------------------------------------------

/// A count as PostgreSQL stores it (`BIGINT`; larger counts stop at its maximum).
fn stored(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn counts_of(r: &Row, from: usize) -> Result<Counts> {
    let n = |i| get::<i64>(r, i).map(|v| u64::try_from(v).unwrap_or(0));
    Ok(Counts {
        tool_calls: n(from)?,
        llm_calls: n(from + 1)?,
        llm_tokens: n(from + 2)?,
        cost: get(r, from + 3)?,
    })
}

/// Adds `rows` to their counters in one transaction and returns the totals (see
/// `Store::add_counts`). The counters are locked in key order, so two processes adding to
/// the same counters never deadlock.
pub(crate) async fn add_counts(pool: &Pool, rows: &[CountRow], now: i64) -> Result<Vec<Counts>> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| (&rows[a].key, rows[a].period).cmp(&(&rows[b].key, rows[b].period)));
    let mut client = pool.get().await.map_err(map_pool)?;
    let tx = client.transaction().await.map_err(map_err)?;
    tx.execute("DELETE FROM counters WHERE ends_ms <= $1", &[&now])
        .await
        .map_err(map_err)?;
    let st = tx
        .prepare_cached(
            "INSERT INTO counters (key, period, ends_ms, tool_calls, llm_calls, llm_tokens, cost)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (key, period) DO UPDATE SET
               tool_calls = LEAST(counters.tool_calls::numeric + excluded.tool_calls,
                                  9223372036854775807)::bigint,
               llm_calls = LEAST(counters.llm_calls::numeric + excluded.llm_calls,
                                 9223372036854775807)::bigint,
               llm_tokens = LEAST(counters.llm_tokens::numeric + excluded.llm_tokens,
                                  9223372036854775807)::bigint,
               cost = counters.cost + excluded.cost
             RETURNING tool_calls, llm_calls, llm_tokens, cost",
        )
        .await
        .map_err(map_err)?;
    let mut totals = vec![Counts::default(); rows.len()];
    for i in order {
        let r = &rows[i];
        let c = &r.counts;
        let row = tx
            .query_one(
                &st,
                &[
                    &r.key,
                    &stored(r.period),
                    &r.ends_ms,
                    &stored(c.tool_calls),
                    &stored(c.llm_calls),
                    &stored(c.llm_tokens),
                    &c.cost,
                ],
            )
            .await
            .map_err(map_err)?;
        totals[i] = counts_of(&row, 0)?;
    }
    tx.commit().await.map_err(map_err)?;
    Ok(totals)
}

/// The counters whose period has not ended by `now`.
pub(crate) async fn live_counts(pool: &Pool, now: i64) -> Result<Vec<CountRow>> {
    let rows = query(
        pool,
        "SELECT key, period, ends_ms, tool_calls, llm_calls, llm_tokens, cost FROM counters
         WHERE ends_ms > $1 ORDER BY key, period",
        &[&now],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(CountRow {
                key: get(r, 0)?,
                period: u64::try_from(get::<i64>(r, 1)?).unwrap_or(0),
                ends_ms: get(r, 2)?,
                counts: counts_of(r, 3)?,
            })
        })
        .collect()
}
