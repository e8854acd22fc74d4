//! weft-store-postgres: the [`weft_store::Store`] for scale-out, where several `weft`
//! processes share one PostgreSQL database.
//!
//! Appends go through a group-commit task ([`writer`]): one transaction per batch, chain
//! heads locked with `SELECT … FOR UPDATE` (in instance order, so processes cannot deadlock),
//! so appenders in different processes serialise per instance and never fork a chain.
//! Leases are single atomic upserts (`… ON CONFLICT DO UPDATE … WHERE owner = me OR
//! expired`). Everything else is one statement or one short transaction on a pooled
//! connection. Bodies and hashes are `BYTEA` and JSON documents `TEXT`, so what is hashed
//! and what is read back are the same bytes (`JSONB` would reorder keys).
//!
//! Durability: each commit is durable under PostgreSQL's default `synchronous_commit = on`.

mod ops;
mod schema;
pub mod writer;

use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde_json::Value;
use weft_store::{
    Appended, EffectRecorded, Error, Fence, GENESIS, Hash, InstanceRecord, InstanceStatus, Lease,
    LeaseTerms, NewRecord, Page, PlanInfo, PlanRecord, PlanStatus, Record, Result, Snapshot,
    StatusChange, Store, Timer, ToolRecord, check_records,
};

pub use schema::SCHEMA_VERSION;
pub use writer::WriterStats;

use writer::Writer;

/// Pooled connections per store.
const POOL_SIZE: usize = 8;

/// The PostgreSQL store.
pub struct PgStore {
    pool: Pool,
    writer: Writer,
    /// How the journal is hashed.
    chaining: weft_store::Chaining,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

fn valid_schema_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

impl PgStore {
    /// Connects to `url` (`postgres://user@host:port/db`), creating the schema if needed.
    /// Must be called inside a tokio runtime.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_in_schema(url, None).await
    }

    /// Like [`PgStore::open`], with every table in the PostgreSQL schema `schema` (created
    /// if missing): several stores can share one database (the tests use one per case).
    pub async fn open_in_schema(url: &str, schema: Option<&str>) -> Result<Self> {
        Self::open_in_schema_keyed(url, schema, None).await
    }

    /// [`PgStore::open_in_schema`] with the journal key of a keyed chain (`None`: none
    /// configured); see [`weft_store::Chaining::resolve`] for what an existing store
    /// accepts (`chain_key_mismatch` otherwise).
    pub async fn open_in_schema_keyed(
        url: &str,
        schema: Option<&str>,
        key: Option<weft_store::ChainKey>,
    ) -> Result<Self> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| Error::InvalidUrl {
            message: format!("bad PostgreSQL URL: {e}"),
        })?;
        if let Some(schema) = schema {
            if !valid_schema_name(schema) {
                return Err(Error::InvalidUrl {
                    message: format!("bad PostgreSQL schema name `{schema}`"),
                });
            }
            let (client, conn) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(schema::map_err)?;
            let task = tokio::spawn(conn);
            client
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .await
                .map_err(schema::map_err)?;
            drop(client);
            let _ = task.await;
            config.options(format!("-c search_path={schema}"));
        }
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| Error::backend(format!("PostgreSQL pool: {e}")))?;
        schema::migrate(&pool).await?;
        let chaining = schema::resolve_chaining(&pool, key.as_ref()).await?;
        Ok(PgStore {
            writer: Writer::start(pool.clone(), chaining.clone()),
            chaining,
            pool,
        })
    }

    /// Drops the PostgreSQL schema `schema` and everything in it (what
    /// [`PgStore::open_in_schema`] created): for benchmarks and tests that made a
    /// throw-away schema. Close the stores using it first.
    pub async fn drop_schema(url: &str, schema: &str) -> Result<()> {
        if !valid_schema_name(schema) {
            return Err(Error::InvalidUrl {
                message: format!("bad PostgreSQL schema name `{schema}`"),
            });
        }
        let config: tokio_postgres::Config = url.parse().map_err(|e| Error::InvalidUrl {
            message: format!("bad PostgreSQL URL: {e}"),
        })?;
        let (client, conn) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(schema::map_err)?;
        let task = tokio::spawn(conn);
        let r = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await
            .map_err(schema::map_err);
        drop(client);
        let _ = task.await;
        r
    }

    /// Commits and appends so far, for measurements.
    pub fn writer_stats(&self) -> WriterStats {
        self.writer.stats()
    }
}

/// Opens a store from a `postgres://…` (or `postgresql://…`) URL.
pub async fn open(location: &str) -> Result<Arc<dyn Store>> {
    open_keyed(location, None).await
}

/// [`open`] with the journal key of a keyed chain.
pub async fn open_keyed(
    location: &str,
    key: Option<weft_store::ChainKey>,
) -> Result<Arc<dyn Store>> {
    let url = location.trim();
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(Error::InvalidUrl {
            message: format!("`{url}` is not a postgres:// URL"),
        });
    }
    Ok(Arc::new(
        PgStore::open_in_schema_keyed(url, None, key).await?,
    ))
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn chaining(&self) -> &weft_store::Chaining {
        &self.chaining
    }

    async fn status_seq(&self, instance: &str) -> Result<Option<u64>> {
        ops::status_seq(&self.pool, instance).await
    }

    async fn append(&self, instance: &str, records: Vec<NewRecord>) -> Result<Appended> {
        check_records(&records)?;
        if records.is_empty() {
            let (seq, hash) = self.head(instance).await?.unwrap_or((0, GENESIS));
            return Ok(Appended {
                first_seq: seq + 1,
                last_seq: seq,
                head: hash,
            });
        }
        self.writer.append(instance, records, None).await
    }

    async fn append_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        records: Vec<NewRecord>,
    ) -> Result<Appended> {
        check_records(&records)?;
        // The lease check runs in the append's transaction (writer.rs).
        self.writer
            .append(instance, records, Some(fence.clone()))
            .await
    }

    async fn read(&self, instance: &str, from_seq: u64, limit: u32) -> Result<Vec<Record>> {
        ops::read(&self.pool, instance, from_seq, limit).await
    }

    async fn head(&self, instance: &str) -> Result<Option<(u64, Hash)>> {
        Ok(ops::head_row(&self.pool, instance)
            .await?
            .map(|(s, h, _, _)| (s, h)))
    }

    async fn chain_base(&self, instance: &str) -> Result<(u64, Hash)> {
        Ok(ops::head_row(&self.pool, instance)
            .await?
            .map_or((0, GENESIS), |(_, _, s, h)| (s, h)))
    }

    async fn truncate_before(&self, instance: &str, before: u64) -> Result<u64> {
        ops::truncate_before(&self.pool, instance, before).await
    }

    async fn put_snapshot(&self, instance: &str, snapshot: Snapshot) -> Result<()> {
        ops::put_snapshot(&self.pool, instance, &snapshot).await
    }

    async fn load_many(
        &self,
        instances: &[String],
    ) -> Result<Vec<(Option<Snapshot>, Vec<Record>)>> {
        // One round trip for the whole batch instead of two per instance.
        if instances.is_empty() {
            return Ok(Vec::new());
        }
        ops::load_many(&self.pool, instances).await
    }

    async fn compact_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        snapshot: Snapshot,
    ) -> Result<u64> {
        ops::compact_fenced(&self.pool, instance, fence, &snapshot).await
    }

    async fn latest_snapshot(&self, instance: &str) -> Result<Option<Snapshot>> {
        ops::latest_snapshot(&self.pool, instance).await
    }

    async fn put_plan(
        &self,
        tenant: &str,
        name: &str,
        document: Value,
        now_ms: i64,
    ) -> Result<u32> {
        ops::put_plan(&self.pool, tenant, name, &document, now_ms).await
    }

    async fn get_plan(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<PlanRecord>> {
        ops::get_plan(&self.pool, tenant, name, version).await
    }

    async fn list_plans(&self, tenant: &str) -> Result<Vec<PlanInfo>> {
        ops::list_plans(&self.pool, tenant).await
    }

    async fn set_plan_status(
        &self,
        tenant: &str,
        name: &str,
        version: u32,
        status: PlanStatus,
    ) -> Result<()> {
        ops::set_plan_status(&self.pool, tenant, name, version, status).await
    }

    async fn put_tool(
        &self,
        tenant: &str,
        name: &str,
        definition: Option<Value>,
        now_ms: i64,
    ) -> Result<u32> {
        ops::put_tool(&self.pool, tenant, name, definition.as_ref(), now_ms).await
    }

    async fn list_tools(&self, tenant: Option<&str>) -> Result<Vec<ToolRecord>> {
        ops::list_tools(&self.pool, tenant).await
    }

    async fn write_batch(
        &self,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, Vec<NewRecord>)>,
        statuses: Vec<(String, InstanceStatus, Option<String>, i64)>,
    ) -> Result<Vec<Appended>> {
        // Three transactions per batch whatever its size: the creates in one statement,
        // the appends through the writer's group commit, the statuses in one statement.
        if !creates.is_empty() {
            ops::create_instances(&self.pool, &creates).await?;
        }
        let results = futures::future::join_all(
            appends
                .into_iter()
                .map(|(i, recs)| async move { self.append(&i, recs).await }),
        )
        .await;
        if !statuses.is_empty() {
            ops::update_statuses(&self.pool, &statuses).await?;
        }
        results.into_iter().collect()
    }

    async fn write_batch_fenced(
        &self,
        terms: &LeaseTerms,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, u64, Arc<[NewRecord]>)>,
        statuses: Vec<StatusChange>,
    ) -> Result<Vec<Result<Appended>>> {
        // As `write_batch`, three transactions: creates with their leases in one
        // statement, the fenced appends in the writer's group commit (lease rows
        // share-locked in its transaction), the owned statuses in one statement.
        for (_, _, recs) in &appends {
            check_records(recs)?;
        }
        if !creates.is_empty() {
            let expires = terms.now_ms.saturating_add(terms.ttl_ms.max(1));
            ops::create_instances_leased(&self.pool, &creates, &terms.owner, expires).await?;
        }
        let results = futures::future::join_all(appends.into_iter().map(|(i, epoch, recs)| {
            let fence = Fence {
                owner: terms.owner.clone(),
                epoch,
            };
            async move { self.writer.append_shared(&i, recs, Some(fence)).await }
        }))
        .await;
        // A whole-batch failure (not one instance's lost lease) fails the batch.
        if let Some(Err(e)) = results
            .iter()
            .find(|r| matches!(r, Err(e) if !matches!(e, Error::LeaseLost { .. })))
        {
            return Err(e.clone());
        }
        if !statuses.is_empty() {
            ops::update_statuses_owned(&self.pool, &statuses, &terms.owner).await?;
        }
        Ok(results)
    }

    async fn create_instance(&self, record: InstanceRecord) -> Result<()> {
        ops::create_instance(&self.pool, &record).await
    }

    async fn update_status(
        &self,
        id: &str,
        status: InstanceStatus,
        reason: Option<String>,
        now_ms: i64,
    ) -> Result<()> {
        ops::update_status(&self.pool, id, status, reason.as_deref(), now_ms).await
    }

    async fn get_instance(&self, id: &str) -> Result<Option<InstanceRecord>> {
        Ok(ops::instances(&self.pool, "id = $1", &[&id])
            .await?
            .into_iter()
            .next())
    }

    async fn list_instances(
        &self,
        tenant: &str,
        status: Option<InstanceStatus>,
        page: Page,
    ) -> Result<Vec<InstanceRecord>> {
        ops::list_instances(&self.pool, tenant, status, &page).await
    }

    async fn non_terminal_instances(&self, page: Page) -> Result<Vec<InstanceRecord>> {
        ops::non_terminal(&self.pool, &page).await
    }

    async fn put_timer(&self, timer: Timer) -> Result<()> {
        ops::put_timer(&self.pool, &timer).await
    }

    async fn due_timers(&self, now_ms: i64, limit: u32) -> Result<Vec<Timer>> {
        ops::due_timers(&self.pool, now_ms, limit).await
    }

    async fn list_timers(&self, after: Option<(String, String)>, limit: u32) -> Result<Vec<Timer>> {
        ops::list_timers(&self.pool, after.as_ref(), limit).await
    }

    async fn delete_timer(&self, instance: &str, timer_id: &str) -> Result<bool> {
        ops::delete_timer(&self.pool, instance, timer_id).await
    }

    async fn record_effect(&self, key: &str, outcome: Value) -> Result<EffectRecorded> {
        ops::record_effect(&self.pool, key, &outcome).await
    }

    async fn get_effect(&self, key: &str) -> Result<Option<Value>> {
        ops::get_effect(&self.pool, key).await
    }

    async fn delete_effects(&self, from: &str, to: &str, limit: u32) -> Result<u64> {
        ops::delete_effects(&self.pool, from, to, limit).await
    }

    async fn acquire_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        ops::acquire_lease(&self.pool, instance, owner, ttl_ms, now_ms).await
    }

    async fn renew_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        ops::renew_lease(&self.pool, instance, owner, ttl_ms, now_ms).await
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
        ops::acquire_leases(&self.pool, instances, owner, ttl_ms, now_ms, dead).await
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
        ops::renew_leases(&self.pool, instances, owner, ttl_ms, now_ms).await
    }

    async fn lease_owners(&self, now_ms: i64) -> Result<Vec<String>> {
        ops::lease_owners(&self.pool, now_ms).await
    }

    async fn release_lease(&self, instance: &str, owner: &str) -> Result<bool> {
        ops::release_lease(&self.pool, instance, owner).await
    }

    async fn release_leases(&self, instances: &[String], owner: &str) -> Result<usize> {
        if instances.is_empty() {
            return Ok(0);
        }
        ops::release_leases(&self.pool, instances, owner).await
    }

    async fn owner_of(&self, instance: &str, now_ms: i64) -> Result<Option<Lease>> {
        ops::owner_of(&self.pool, instance, now_ms).await
    }
    async fn add_counts(
        &self,
        rows: Vec<weft_store::CountRow>,
        now_ms: i64,
    ) -> Result<Vec<weft_store::Counts>> {
        weft_store::check_count_rows(&rows)?;
        ops::add_counts(&self.pool, &rows, now_ms).await
    }

    async fn live_counts(&self, now_ms: i64) -> Result<Vec<weft_store::CountRow>> {
        ops::live_counts(&self.pool, now_ms).await
    }
}
