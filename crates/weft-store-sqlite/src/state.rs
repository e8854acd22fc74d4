//! Statements for everything beside the journal: plans, instance records, timers,
//! idempotency records and leases.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;
use weft_store::{
    CountRow, Counts, EffectRecorded, Error, Fence, InstanceRecord, InstanceStatus, Lease, Page,
    PlanInfo, PlanRecord, PlanStatus, Result, Timer, ToolRecord,
};

use crate::cache;
use crate::schema::map_err;

fn to_json_text(v: &Value) -> Result<String> {
    serde_json::to_string(v).map_err(Error::invalid)
}

fn from_json_text(s: &str, what: &str) -> Result<Value> {
    serde_json::from_str(s).map_err(|e| Error::Corrupt {
        message: format!("stored {what} is not valid JSON: {e}"),
    })
}

fn version_from_sql(v: i64) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Corrupt {
        message: format!("plan version {v} out of range"),
    })
}

// --- plans -------------------------------------------------------------------------------

/// Stores the next version of a plan.
pub(crate) fn put_plan(
    conn: &Connection,
    tenant: &str,
    name: &str,
    doc: &Value,
    now: i64,
) -> Result<u32> {
    let next: i64 = conn
        .prepare_cached(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM plans WHERE tenant = ?1 AND name = ?2",
        )
        .and_then(|mut s| s.query_row([tenant, name], |r| r.get(0)))
        .map_err(map_err)?;
    let doc = to_json_text(doc)?;
    conn.prepare_cached(
        "INSERT INTO plans (tenant, name, version, status, document, created_at_ms)
         VALUES (?1, ?2, ?3, 'template', ?4, ?5)",
    )
    .and_then(|mut s| s.execute(params![tenant, name, next, doc, now]))
    .map_err(map_err)?;
    version_from_sql(next)
}

fn plan_info(r: &Row<'_>) -> rusqlite::Result<(String, String, i64, String, i64)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn to_info(row: (String, String, i64, String, i64)) -> Result<PlanInfo> {
    let (tenant, name, version, status, created_at_ms) = row;
    Ok(PlanInfo {
        tenant,
        name,
        version: version_from_sql(version)?,
        status: PlanStatus::parse(&status)?,
        created_at_ms,
    })
}

/// A plan version (latest when `version` is `None`).
pub(crate) fn get_plan(
    conn: &Connection,
    tenant: &str,
    name: &str,
    version: Option<u32>,
) -> Result<Option<PlanRecord>> {
    let sql = "SELECT tenant, name, version, status, created_at_ms, document FROM plans
               WHERE tenant = ?1 AND name = ?2 AND (?3 IS NULL OR version = ?3)
               ORDER BY version DESC LIMIT 1";
    let row = conn
        .prepare_cached(sql)
        .and_then(|mut s| {
            s.query_row(params![tenant, name, version.map(i64::from)], |r| {
                Ok((plan_info(r)?, r.get::<_, String>(5)?))
            })
            .optional()
        })
        .map_err(map_err)?;
    row.map(|(info, doc)| {
        Ok(PlanRecord {
            info: to_info(info)?,
            document: from_json_text(&doc, "plan document")?,
        })
    })
    .transpose()
}

/// Every version of a tenant's plans.
pub(crate) fn list_plans(conn: &Connection, tenant: &str) -> Result<Vec<PlanInfo>> {
    let mut st = conn
        .prepare_cached(
            "SELECT tenant, name, version, status, created_at_ms FROM plans WHERE tenant = ?1
             ORDER BY name, version",
        )
        .map_err(map_err)?;
    let rows = st.query_map([tenant], plan_info).map_err(map_err)?;
    rows.map(|r| to_info(r.map_err(map_err)?)).collect()
}

/// Stores a new version of a tenant's tool (`None`: deleted).
pub(crate) fn put_tool(
    conn: &Connection,
    tenant: &str,
    name: &str,
    definition: Option<&Value>,
    now: i64,
) -> Result<u32> {
    let next: i64 = conn
        .prepare_cached(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM tools WHERE tenant = ?1 AND name = ?2",
        )
        .and_then(|mut s| s.query_row([tenant, name], |r| r.get(0)))
        .map_err(map_err)?;
    let text = definition.map(to_json_text).transpose()?;
    conn.prepare_cached(
        "INSERT INTO tools (tenant, name, version, definition, created_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| s.execute(params![tenant, name, next, text, now]))
    .map_err(map_err)?;
    version_from_sql(next)
}

/// Every tool version of `tenant` (every tenant's when `None`).
pub(crate) fn list_tools(conn: &Connection, tenant: Option<&str>) -> Result<Vec<ToolRecord>> {
    let mut st = conn
        .prepare_cached(
            "SELECT tenant, name, version, definition, created_at_ms FROM tools
             WHERE ?1 IS NULL OR tenant = ?1 ORDER BY tenant, name, version",
        )
        .map_err(map_err)?;
    let rows = st
        .query_map([tenant], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })
        .map_err(map_err)?;
    rows.map(|r| {
        let (tenant, name, version, definition, created_at_ms) = r.map_err(map_err)?;
        Ok(ToolRecord {
            tenant,
            name,
            version: version_from_sql(version)?,
            definition: definition
                .as_deref()
                .map(|d| from_json_text(d, "tool definition"))
                .transpose()?,
            created_at_ms,
        })
    })
    .collect()
}

/// Changes a plan version's status.
pub(crate) fn set_plan_status(
    conn: &Connection,
    tenant: &str,
    name: &str,
    version: u32,
    status: PlanStatus,
) -> Result<()> {
    let n = conn
        .prepare_cached(
            "UPDATE plans SET status = ?4 WHERE tenant = ?1 AND name = ?2 AND version = ?3",
        )
        .and_then(|mut s| s.execute(params![tenant, name, i64::from(version), status.as_str()]))
        .map_err(map_err)?;
    if n == 0 {
        return Err(Error::not_found(format!(
            "plan {tenant}/{name} version {version}"
        )));
    }
    Ok(())
}

// --- instances ---------------------------------------------------------------------------

const INSTANCE_COLS: &str =
    "id, tenant, plan_name, plan_version, status, reason, created_at_ms, updated_at_ms, parent";

type InstanceRow = (
    String,
    String,
    String,
    i64,
    String,
    Option<String>,
    i64,
    i64,
    Option<String>,
);

fn instance_row(r: &Row<'_>) -> rusqlite::Result<InstanceRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

fn to_instance(row: InstanceRow) -> Result<InstanceRecord> {
    let (id, tenant, plan_name, v, status, reason, created_at_ms, updated_at_ms, parent) = row;
    Ok(InstanceRecord {
        id,
        tenant,
        plan_name,
        plan_version: version_from_sql(v)?,
        status: InstanceStatus::parse(&status)?,
        reason,
        created_at_ms,
        updated_at_ms,
        parent,
    })
}

/// Creates an instance record.
pub(crate) fn create_instance(conn: &Connection, r: &InstanceRecord) -> Result<()> {
    let n = conn
        .prepare_cached(&format!(
            "INSERT OR IGNORE INTO instances ({INSTANCE_COLS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)"
        ))
        .and_then(|mut s| {
            s.execute(params![
                r.id,
                r.tenant,
                r.plan_name,
                i64::from(r.plan_version),
                r.status.as_str(),
                r.reason,
                r.created_at_ms,
                r.updated_at_ms,
                r.parent
            ])
        })
        .map_err(map_err)?;
    if n == 0 {
        return Err(Error::Conflict {
            what: format!("instance {} already exists", r.id),
        });
    }
    Ok(())
}

/// The chain head's seq, as the `status_seq` of a status set now (on the writer thread,
/// usually from its memory of heads: the instance appended in the same batch).
fn status_seq_now(conn: &Connection, id: &str) -> Result<i64> {
    let seq = crate::journal_log::head_row(conn, id)?.map_or(0, |h| h.0);
    i64::try_from(seq).map_err(|_| Error::invalid(format!("sequence number {seq} is too large")))
}

/// The head seq an instance's status was last set at (`None`: no such instance).
pub(crate) fn status_seq(conn: &Connection, id: &str) -> Result<Option<u64>> {
    let v: Option<i64> = conn
        .prepare_cached("SELECT status_seq FROM instances WHERE id = ?1")
        .and_then(|mut s| s.query_row(params![id], |r| r.get(0)).optional())
        .map_err(map_err)?;
    v.map(|v| {
        u64::try_from(v).map_err(|_| Error::Corrupt {
            message: format!("negative status seq {v} for instance {id}"),
        })
    })
    .transpose()
}

/// Updates an instance's status.
pub(crate) fn update_status(
    conn: &Connection,
    id: &str,
    status: InstanceStatus,
    reason: Option<&str>,
    now: i64,
) -> Result<()> {
    let seq = status_seq_now(conn, id)?;
    let n = conn
        .prepare_cached(
            "UPDATE instances SET status = ?2, reason = ?3, updated_at_ms = ?4, status_seq = ?5
             WHERE id = ?1",
        )
        .and_then(|mut s| s.execute(params![id, status.as_str(), reason, now, seq]))
        .map_err(map_err)?;
    if n == 0 {
        return Err(Error::not_found(format!("instance {id}")));
    }
    Ok(())
}

fn query_instances(
    conn: &Connection,
    where_sql: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<InstanceRecord>> {
    let sql = format!("SELECT {INSTANCE_COLS} FROM instances WHERE {where_sql}");
    let mut st = conn.prepare_cached(&sql).map_err(map_err)?;
    let rows = st.query_map(args, instance_row).map_err(map_err)?;
    rows.map(|r| to_instance(r.map_err(map_err)?)).collect()
}

/// One instance record.
pub(crate) fn get_instance(conn: &Connection, id: &str) -> Result<Option<InstanceRecord>> {
    Ok(query_instances(conn, "id = ?1", &[&id])?.into_iter().next())
}

/// A tenant's instances, by id, one page.
pub(crate) fn list_instances(
    conn: &Connection,
    tenant: &str,
    status: Option<InstanceStatus>,
    page: &Page,
) -> Result<Vec<InstanceRecord>> {
    let limit = i64::from(page.checked_limit()?);
    let status = status.map(InstanceStatus::as_str);
    query_instances(
        conn,
        "tenant = ?1 AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR id > ?3)
         ORDER BY id LIMIT ?4",
        &[&tenant, &status, &page.after, &limit],
    )
}

/// Non-terminal instances of all tenants, by id, one page.
pub(crate) fn non_terminal(conn: &Connection, page: &Page) -> Result<Vec<InstanceRecord>> {
    let limit = i64::from(page.checked_limit()?);
    query_instances(
        conn,
        "status IN ('running', 'waiting', 'stuck', 'paused') AND (?1 IS NULL OR id > ?1)
         ORDER BY id LIMIT ?2",
        &[&page.after, &limit],
    )
}

// --- timers ------------------------------------------------------------------------------

/// Sets or moves a timer.
pub(crate) fn put_timer(conn: &Connection, t: &Timer) -> Result<()> {
    let payload = to_json_text(&t.payload)?;
    conn.prepare_cached(
        "INSERT OR REPLACE INTO timers (instance, timer_id, due_ms, payload) VALUES (?1,?2,?3,?4)",
    )
    .and_then(|mut s| s.execute(params![t.instance, t.timer_id, t.due_ms, payload]))
    .map_err(map_err)?;
    Ok(())
}

/// Due timers, earliest first.
pub(crate) fn due_timers(conn: &Connection, now: i64, limit: u32) -> Result<Vec<Timer>> {
    let mut st = conn
        .prepare_cached(
            "SELECT instance, timer_id, due_ms, payload FROM timers WHERE due_ms <= ?1
             ORDER BY due_ms, instance, timer_id LIMIT ?2",
        )
        .map_err(map_err)?;
    let rows = st
        .query_map(params![now, i64::from(limit)], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
            ))
        })
        .map_err(map_err)?;
    rows.map(|r| {
        let (instance, timer_id, due_ms, payload) = r.map_err(map_err)?;
        Ok(Timer {
            instance,
            timer_id,
            due_ms,
            payload: from_json_text(&payload, "timer payload")?,
        })
    })
    .collect()
}

/// Removes a timer.
pub(crate) fn delete_timer(conn: &Connection, instance: &str, timer_id: &str) -> Result<bool> {
    let n = conn
        .prepare_cached("DELETE FROM timers WHERE instance = ?1 AND timer_id = ?2")
        .and_then(|mut s| s.execute([instance, timer_id]))
        .map_err(map_err)?;
    Ok(n > 0)
}

// --- effects -----------------------------------------------------------------------------

/// Records an effect outcome unless the key exists.
pub(crate) fn record_effect(
    conn: &Connection,
    key: &str,
    outcome: &Value,
) -> Result<EffectRecorded> {
    let outcome = to_json_text(outcome)?;
    let n = conn
        .prepare_cached("INSERT OR IGNORE INTO effects (key, outcome) VALUES (?1, ?2)")
        .and_then(|mut s| s.execute(params![key, outcome]))
        .map_err(map_err)?;
    if n > 0 {
        return Ok(EffectRecorded::Inserted);
    }
    match get_effect(conn, key)? {
        Some(v) => Ok(EffectRecorded::AlreadyExists(v)),
        None => Err(Error::backend(format!(
            "effect {key} vanished while being recorded"
        ))),
    }
}

/// An effect's recorded outcome.
pub(crate) fn get_effect(conn: &Connection, key: &str) -> Result<Option<Value>> {
    let s: Option<String> = conn
        .prepare_cached("SELECT outcome FROM effects WHERE key = ?1")
        .and_then(|mut s| s.query_row([key], |r| r.get(0)).optional())
        .map_err(map_err)?;
    s.map(|s| from_json_text(&s, "effect outcome")).transpose()
}

/// Removes up to `limit` effects with keys in `[from, to)` (SQLite's BINARY collation:
/// byte order, through the primary key).
pub(crate) fn delete_effects(conn: &Connection, from: &str, to: &str, limit: u32) -> Result<u64> {
    let n = conn
        .prepare_cached(
            "DELETE FROM effects WHERE key IN \
             (SELECT key FROM effects WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT ?3)",
        )
        .and_then(|mut s| s.execute(params![from, to, limit]))
        .map_err(map_err)?;
    Ok(n as u64)
}

// --- leases ------------------------------------------------------------------------------

fn expiry(now: i64, ttl: i64) -> Result<i64> {
    if ttl <= 0 {
        return Err(Error::invalid(format!(
            "lease ttl {ttl} ms must be positive"
        )));
    }
    Ok(now.saturating_add(ttl))
}

/// Takes or extends a lease.
pub(crate) fn acquire_lease(
    conn: &Connection,
    instance: &str,
    owner: &str,
    ttl: i64,
    now: i64,
) -> Result<bool> {
    let expires = expiry(now, ttl)?;
    cache::forget_fence(instance);
    let n = conn
        .prepare_cached(
            "INSERT INTO leases (instance, owner, expires_at_ms, epoch) VALUES (?1, ?2, ?3, 1)
             ON CONFLICT (instance) DO UPDATE SET owner = excluded.owner,
               expires_at_ms = excluded.expires_at_ms,
               epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch
                            ELSE leases.epoch + 1 END
             WHERE leases.owner = excluded.owner OR leases.expires_at_ms <= ?4",
        )
        .and_then(|mut s| s.execute(params![instance, owner, expires, now]))
        .map_err(map_err)?;
    Ok(n > 0)
}

/// Extends a live lease held by `owner`.
pub(crate) fn renew_lease(
    conn: &Connection,
    instance: &str,
    owner: &str,
    ttl: i64,
    now: i64,
) -> Result<bool> {
    let expires = expiry(now, ttl)?;
    let n = conn
        .prepare_cached(
            "UPDATE leases SET expires_at_ms = ?3
             WHERE instance = ?1 AND owner = ?2 AND expires_at_ms <> ?4",
        )
        .and_then(|mut s| s.execute(params![instance, owner, expires, i64::MIN]))
        .map_err(map_err)?;
    Ok(n > 0)
}

/// Gives a lease up: it expires at once; the row (and its epoch) stays, so the next
/// owner's epoch is higher.
pub(crate) fn release_lease(conn: &Connection, instance: &str, owner: &str) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE leases SET expires_at_ms = ?3
             WHERE instance = ?1 AND owner = ?2 AND expires_at_ms <> ?3",
        )
        .and_then(|mut s| s.execute(params![instance, owner, i64::MIN]))
        .map_err(map_err)?;
    Ok(n > 0)
}

/// Refuses with `lease_lost` unless `fence` matches the instance's lease row.
pub(crate) fn check_fence(conn: &Connection, instance: &str, fence: &Fence) -> Result<()> {
    // The writer thread remembers lease rows ([`crate::cache`]); a mismatch is read again
    // for its error message.
    if cache::fence_matches(instance, &fence.owner, fence.epoch) == Some(true) {
        return Ok(());
    }
    let row: Option<(String, i64)> = conn
        .prepare_cached("SELECT owner, epoch FROM leases WHERE instance = ?1")
        .and_then(|mut s| {
            s.query_row([instance], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(map_err)?;
    if let Some((owner, epoch)) = &row {
        cache::set_fence(instance, owner, (*epoch).max(0) as u64);
    }
    match row {
        Some((owner, epoch)) if owner == fence.owner && epoch as u64 == fence.epoch => Ok(()),
        Some((owner, epoch)) => Err(Error::lease_lost(
            instance,
            fence,
            Some((&owner, epoch.max(0) as u64)),
        )),
        None => Err(Error::lease_lost(instance, fence, None)),
    }
}

/// The live lease.
pub(crate) fn owner_of(conn: &Connection, instance: &str, now: i64) -> Result<Option<Lease>> {
    conn.prepare_cached(
        "SELECT owner, expires_at_ms, epoch FROM leases WHERE instance = ?1 AND expires_at_ms > ?2",
    )
    .and_then(|mut s| {
        s.query_row(params![instance, now], |r| {
            Ok(Lease {
                owner: r.get(0)?,
                expires_at_ms: r.get(1)?,
                epoch: r.get::<_, i64>(2)?.max(0) as u64,
            })
        })
        .optional()
    })
    .map_err(map_err)
}

/// Takes the lease of a just-created instance (epoch 1); an existing row is left alone.
pub(crate) fn lease_new(
    conn: &Connection,
    instance: &str,
    owner: &str,
    ttl: i64,
    now: i64,
) -> Result<()> {
    let expires = expiry(now, ttl)?;
    let n = conn
        .prepare_cached(
            "INSERT INTO leases (instance, owner, expires_at_ms, epoch) VALUES (?1, ?2, ?3, 1)
             ON CONFLICT (instance) DO NOTHING",
        )
        .and_then(|mut s| s.execute(params![instance, owner, expires]))
        .map_err(map_err)?;
    if n == 1 {
        cache::set_fence(instance, owner, 1);
    }
    Ok(())
}

/// Sets an instance's status only if `owner` holds its lease row; a missing or foreign
/// row changes nothing.
pub(crate) fn update_status_owned(
    conn: &Connection,
    id: &str,
    status: InstanceStatus,
    reason: Option<&str>,
    now: i64,
    owner: &str,
) -> Result<()> {
    // The writer thread remembers lease rows ([`crate::cache`]): a lease it knows is
    // `owner`'s needs no search of `leases` (with the search, these updates take 8% of the
    // writer thread under W4-concurrent, one per finished instance).
    if cache::owned_by(id, owner) == Some(true) {
        return match update_status(conn, id, status, reason, now) {
            Err(Error::NotFound { .. }) => Ok(()),
            r => r,
        };
    }
    let seq = status_seq_now(conn, id)?;
    conn.prepare_cached(
        "UPDATE instances SET status = ?2, reason = ?3, updated_at_ms = ?4, status_seq = ?6
         WHERE id = ?1 AND EXISTS (SELECT 1 FROM leases WHERE instance = ?1 AND owner = ?5)",
    )
    .and_then(|mut s| s.execute(params![id, status.as_str(), reason, now, owner, seq]))
    .map_err(map_err)?;
    Ok(())
}

/// The epoch of `owner`'s lease row, if it has one.
pub(crate) fn lease_epoch(conn: &Connection, instance: &str, owner: &str) -> Result<Option<u64>> {
    let e: Option<i64> = conn
        .prepare_cached("SELECT epoch FROM leases WHERE instance = ?1 AND owner = ?2")
        .and_then(|mut s| s.query_row([instance, owner], |r| r.get(0)).optional())
        .map_err(map_err)?;
    Ok(e.map(|e| e.max(0) as u64))
}

/// A page of the timer table by (instance, timer id), strictly after `after`.
pub(crate) fn list_timers(
    conn: &Connection,
    after: Option<&(String, String)>,
    limit: u32,
) -> Result<Vec<Timer>> {
    let limit = Page::first(limit).checked_limit()?;
    let (ai, at) = match after {
        Some((i, t)) => (Some(i.as_str()), Some(t.as_str())),
        None => (None, None),
    };
    let mut st = conn
        .prepare_cached(
            "SELECT instance, timer_id, due_ms, payload FROM timers
             WHERE ?1 IS NULL OR (instance, timer_id) > (?1, ?2)
             ORDER BY instance, timer_id LIMIT ?3",
        )
        .map_err(map_err)?;
    let rows = st
        .query_map(params![ai, at, i64::from(limit)], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
            ))
        })
        .map_err(map_err)?;
    rows.map(|r| {
        let (instance, timer_id, due_ms, payload) = r.map_err(map_err)?;
        Ok(Timer {
            instance,
            timer_id,
            due_ms,
            payload: from_json_text(&payload, "timer payload")?,
        })
    })
    .collect()
}

/// Takes a lease whatever its expiry if its row names one of `dead`; otherwise as
/// [`acquire_lease`]. Returns whether `owner` holds it now.
pub(crate) fn acquire_lease_from(
    conn: &Connection,
    instance: &str,
    owner: &str,
    ttl: i64,
    now: i64,
    dead: &[String],
) -> Result<bool> {
    if !dead.is_empty() {
        let holder: Option<String> = conn
            .prepare_cached("SELECT owner FROM leases WHERE instance = ?1")
            .and_then(|mut s| s.query_row([instance], |r| r.get(0)).optional())
            .map_err(map_err)?;
        if holder.is_some_and(|h| h != owner && dead.contains(&h)) {
            let expires = expiry(now, ttl)?;
            cache::forget_fence(instance);
            conn.prepare_cached(
                "UPDATE leases SET owner = ?2, expires_at_ms = ?3, epoch = epoch + 1
                 WHERE instance = ?1",
            )
            .and_then(|mut s| s.execute(params![instance, owner, expires]))
            .map_err(map_err)?;
            return Ok(true);
        }
    }
    acquire_lease(conn, instance, owner, ttl, now)
}

/// [`acquire_lease_from`] answering the epoch `owner` holds the lease at (`None`: another
/// owner's live lease kept it), with one statement in the usual case (`RETURNING`).
pub(crate) fn acquire_lease_epoch(
    conn: &Connection,
    instance: &str,
    owner: &str,
    ttl: i64,
    now: i64,
    dead: &[String],
) -> Result<Option<u64>> {
    if !dead.is_empty() {
        return if acquire_lease_from(conn, instance, owner, ttl, now, dead)? {
            lease_epoch(conn, instance, owner)
        } else {
            Ok(None)
        };
    }
    let expires = expiry(now, ttl)?;
    cache::forget_fence(instance);
    let epoch: Option<i64> = conn
        .prepare_cached(
            "INSERT INTO leases (instance, owner, expires_at_ms, epoch) VALUES (?1, ?2, ?3, 1)
             ON CONFLICT (instance) DO UPDATE SET owner = excluded.owner,
               expires_at_ms = excluded.expires_at_ms,
               epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch
                            ELSE leases.epoch + 1 END
             WHERE leases.owner = excluded.owner OR leases.expires_at_ms <= ?4
             RETURNING epoch",
        )
        .and_then(|mut s| {
            s.query_row(params![instance, owner, expires, now], |r| r.get(0))
                .optional()
        })
        .map_err(map_err)?;
    Ok(epoch.map(|e| e.max(0) as u64))
}

/// Owners of live leases, each once.
pub(crate) fn lease_owners(conn: &Connection, now: i64) -> Result<Vec<String>> {
    let mut st = conn
        .prepare_cached("SELECT DISTINCT owner FROM leases WHERE expires_at_ms > ?1 ORDER BY owner")
        .map_err(map_err)?;
    let rows = st.query_map([now], |r| r.get(0)).map_err(map_err)?;
    rows.map(|r| r.map_err(map_err)).collect()
}

// --- shared counters ---------------------------------------------------------------------

/// A count as SQLite stores it (a signed 64-bit integer; larger counts stop at its maximum).
fn stored(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stored count (a negative one is damage).
fn count_of(row: &Row<'_>, i: usize) -> rusqlite::Result<u64> {
    let n: i64 = row.get(i)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn counts_of(row: &Row<'_>, from: usize) -> rusqlite::Result<Counts> {
    Ok(Counts {
        tool_calls: count_of(row, from)?,
        llm_calls: count_of(row, from + 1)?,
        llm_tokens: count_of(row, from + 2)?,
        cost: row.get(from + 3)?,
    })
}

/// Adds `rows` to their counters and returns the totals (see `Store::add_counts`); runs
/// inside the writer's transaction, so the whole call is atomic.
pub(crate) fn add_counts(conn: &Connection, rows: &[CountRow], now_ms: i64) -> Result<Vec<Counts>> {
    conn.prepare_cached("DELETE FROM counters WHERE ends_ms <= ?1")
        .and_then(|mut s| s.execute([now_ms]))
        .map_err(map_err)?;
    let mut totals = Vec::with_capacity(rows.len());
    for r in rows {
        let c = &r.counts;
        let total = conn
            .prepare_cached(
                "INSERT INTO counters (key, period, ends_ms, tool_calls, llm_calls, llm_tokens, cost)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (key, period) DO UPDATE SET
                   tool_calls = min(tool_calls + excluded.tool_calls, 9223372036854775807),
                   llm_calls = min(llm_calls + excluded.llm_calls, 9223372036854775807),
                   llm_tokens = min(llm_tokens + excluded.llm_tokens, 9223372036854775807),
                   cost = cost + excluded.cost
                 RETURNING tool_calls, llm_calls, llm_tokens, cost",
            )
            .and_then(|mut s| {
                s.query_row(
                    params![
                        r.key,
                        stored(r.period),
                        r.ends_ms,
                        stored(c.tool_calls),
                        stored(c.llm_calls),
                        stored(c.llm_tokens),
                        c.cost
                    ],
                    |row| counts_of(row, 0),
                )
            })
            .map_err(map_err)?;
        totals.push(total);
    }
    Ok(totals)
}

/// The counters whose period has not ended by `now_ms`.
pub(crate) fn live_counts(conn: &Connection, now_ms: i64) -> Result<Vec<CountRow>> {
    let mut s = conn
        .prepare_cached(
            "SELECT key, period, ends_ms, tool_calls, llm_calls, llm_tokens, cost FROM counters
             WHERE ends_ms > ?1 ORDER BY key, period",
        )
        .map_err(map_err)?;
    let rows = s
        .query_map([now_ms], |row| {
            let period: i64 = row.get(1)?;
            Ok(CountRow {
                key: row.get(0)?,
                period: u64::try_from(period).unwrap_or(0),
                ends_ms: row.get(2)?,
                counts: counts_of(row, 3)?,
            })
        })
        .map_err(map_err)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(map_err)
}
