//! A [`Store`] wrapper for fault tests: journal writes (`append`, `write_batch`) can be
//! held until released, or made to fail a given number of times, and batches that update
//! instance statuses can be slowed down; everything else passes straight to the real store
//! underneath.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::Value;
use weft_store::{
    Appended, EffectRecorded, Error, Fence, Hash, InstanceRecord, InstanceStatus, Lease,
    LeaseTerms, NewRecord, Page, PlanInfo, PlanRecord, PlanStatus, Record, Result, Snapshot,
    StatusChange, Store, Timer,
};

pub(crate) struct FaultStore {
    inner: Arc<dyn Store>,
    open: tokio::sync::watch::Sender<bool>,
    fail_next: AtomicU32,
    /// Milliseconds a batch carrying status updates waits before it is written.
    status_delay_ms: AtomicU64,
    /// Journal writes refused so far.
    pub failed: AtomicU64,
    /// Journal writes that went through.
    pub passed: AtomicU64,
    /// Idempotency records removed through `delete_effects`.
    pub deleted_effects: AtomicU64,
}

impl FaultStore {
    pub(crate) fn new(inner: Arc<dyn Store>) -> Arc<FaultStore> {
        Arc::new(FaultStore {
            inner,
            open: tokio::sync::watch::channel(true).0,
            fail_next: AtomicU32::new(0),
            status_delay_ms: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            passed: AtomicU64::new(0),
            deleted_effects: AtomicU64::new(0),
        })
    }

    /// Journal writes wait from now on until [`FaultStore::release`].
    pub(crate) fn hold(&self) {
        self.open.send_replace(false);
    }

    pub(crate) fn release(&self) {
        self.open.send_replace(true);
    }

    /// Batches that update instance statuses wait `ms` before they are written (a slow
    /// commit).
    pub(crate) fn delay_statuses(&self, ms: u64) {
        self.status_delay_ms.store(ms, Ordering::SeqCst);
    }

    async fn status_delay(&self, statuses: usize) {
        let ms = self.status_delay_ms.load(Ordering::SeqCst);
        if statuses > 0 && ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
    }

    /// The next `n` journal writes fail with `store_unavailable`.
    pub(crate) fn fail_next(&self, n: u32) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    async fn gate(&self) -> Result<()> {
        let mut rx = self.open.subscribe();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                break;
            }
        }
        let refused = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refused {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(Error::Unavailable {
                message: "injected fault: the store refused the write".into(),
            });
        }
        self.passed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[async_trait]
impl Store for FaultStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn chaining(&self) -> &weft_store::Chaining {
        self.inner.chaining()
    }
    async fn status_seq(&self, instance: &str) -> Result<Option<u64>> {
        self.inner.status_seq(instance).await
    }
    async fn append(&self, instance: &str, records: Vec<NewRecord>) -> Result<Appended> {
        self.gate().await?;
        self.inner.append(instance, records).await
    }
    async fn append_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        records: Vec<NewRecord>,
    ) -> Result<Appended> {
        self.gate().await?;
        self.inner.append_fenced(instance, fence, records).await
    }
    async fn read(&self, instance: &str, from_seq: u64, limit: u32) -> Result<Vec<Record>> {
        self.inner.read(instance, from_seq, limit).await
    }
    async fn head(&self, instance: &str) -> Result<Option<(u64, Hash)>> {
        self.inner.head(instance).await
    }
    async fn chain_base(&self, instance: &str) -> Result<(u64, Hash)> {
        self.inner.chain_base(instance).await
    }
    async fn truncate_before(&self, instance: &str, before: u64) -> Result<u64> {
        self.inner.truncate_before(instance, before).await
    }
    async fn write_batch(
        &self,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, Vec<NewRecord>)>,
        statuses: Vec<(String, InstanceStatus, Option<String>, i64)>,
    ) -> Result<Vec<Appended>> {
        self.gate().await?;
        self.status_delay(statuses.len()).await;
        self.inner.write_batch(creates, appends, statuses).await
    }
    async fn write_batch_fenced(
        &self,
        terms: &LeaseTerms,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, u64, Arc<[NewRecord]>)>,
        statuses: Vec<StatusChange>,
    ) -> Result<Vec<Result<Appended>>> {
        self.gate().await?;
        self.status_delay(statuses.len()).await;
        self.inner
            .write_batch_fenced(terms, creates, appends, statuses)
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
        self.inner
            .acquire_leases(instances, owner, ttl_ms, now_ms, dead)
            .await
    }
    async fn lease_owners(&self, now_ms: i64) -> Result<Vec<String>> {
        self.inner.lease_owners(now_ms).await
    }
    async fn renew_leases(
        &self,
        instances: &[String],
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<bool>> {
        self.inner
            .renew_leases(instances, owner, ttl_ms, now_ms)
            .await
    }
    async fn list_timers(&self, after: Option<(String, String)>, limit: u32) -> Result<Vec<Timer>> {
        self.inner.list_timers(after, limit).await
    }
    async fn load_many(
        &self,
        instances: &[String],
    ) -> Result<Vec<(Option<Snapshot>, Vec<Record>)>> {
        self.inner.load_many(instances).await
    }
    async fn put_snapshot(&self, instance: &str, snapshot: Snapshot) -> Result<()> {
        self.inner.put_snapshot(instance, snapshot).await
    }
    async fn latest_snapshot(&self, instance: &str) -> Result<Option<Snapshot>> {
        self.inner.latest_snapshot(instance).await
    }
    async fn compact_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        snapshot: Snapshot,
    ) -> Result<u64> {
        self.gate().await?;
        self.inner.compact_fenced(instance, fence, snapshot).await
    }
    async fn put_plan(
        &self,
        tenant: &str,
        name: &str,
        document: Value,
        now_ms: i64,
    ) -> Result<u32> {
        self.inner.put_plan(tenant, name, document, now_ms).await
    }
    async fn get_plan(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<PlanRecord>> {
        self.inner.get_plan(tenant, name, version).await
    }
    async fn put_tool(
        &self,
        tenant: &str,
        name: &str,
        definition: Option<Value>,
        now_ms: i64,
    ) -> Result<u32> {
        self.inner.put_tool(tenant, name, definition, now_ms).await
    }
    async fn list_tools(&self, tenant: Option<&str>) -> Result<Vec<weft_store::ToolRecord>> {
        self.inner.list_tools(tenant).await
    }
    async fn list_plans(&self, tenant: &str) -> Result<Vec<PlanInfo>> {
        self.inner.list_plans(tenant).await
    }
    async fn set_plan_status(
        &self,
        tenant: &str,
        name: &str,
        version: u32,
        status: PlanStatus,
    ) -> Result<()> {
        self.inner
            .set_plan_status(tenant, name, version, status)
            .await
    }
    async fn create_instance(&self, record: InstanceRecord) -> Result<()> {
        self.inner.create_instance(record).await
    }
    async fn update_status(
        &self,
        id: &str,
        status: InstanceStatus,
        reason: Option<String>,
        now_ms: i64,
    ) -> Result<()> {
        self.inner.update_status(id, status, reason, now_ms).await
    }
    async fn get_instance(&self, id: &str) -> Result<Option<InstanceRecord>> {
        self.inner.get_instance(id).await
    }
    async fn list_instances(
        &self,
        tenant: &str,
        status: Option<InstanceStatus>,
        page: Page,
    ) -> Result<Vec<InstanceRecord>> {
        self.inner.list_instances(tenant, status, page).await
    }
    async fn non_terminal_instances(&self, page: Page) -> Result<Vec<InstanceRecord>> {
        self.inner.non_terminal_instances(page).await
    }
    async fn put_timer(&self, timer: Timer) -> Result<()> {
        self.inner.put_timer(timer).await
    }
    async fn due_timers(&self, now_ms: i64, limit: u32) -> Result<Vec<Timer>> {
        self.inner.due_timers(now_ms, limit).await
    }
    async fn delete_timer(&self, instance: &str, timer_id: &str) -> Result<bool> {
        self.inner.delete_timer(instance, timer_id).await
    }
    async fn record_effect(&self, key: &str, outcome: Value) -> Result<EffectRecorded> {
        self.inner.record_effect(key, outcome).await
    }
    async fn get_effect(&self, key: &str) -> Result<Option<Value>> {
        self.inner.get_effect(key).await
    }
    async fn delete_effects(&self, from: &str, to: &str, limit: u32) -> Result<u64> {
        let n = self.inner.delete_effects(from, to, limit).await?;
        self.deleted_effects.fetch_add(n, Ordering::SeqCst);
        Ok(n)
    }
    async fn acquire_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        self.inner
            .acquire_lease(instance, owner, ttl_ms, now_ms)
            .await
    }
    async fn renew_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        self.inner
            .renew_lease(instance, owner, ttl_ms, now_ms)
            .await
    }
    async fn release_lease(&self, instance: &str, owner: &str) -> Result<bool> {
        self.inner.release_lease(instance, owner).await
    }
    async fn release_leases(&self, instances: &[String], owner: &str) -> Result<usize> {
        self.inner.release_leases(instances, owner).await
    }
    async fn owner_of(&self, instance: &str, now_ms: i64) -> Result<Option<Lease>> {
        self.inner.owner_of(instance, now_ms).await
    }
    async fn add_counts(
        &self,
        rows: Vec<weft_store::CountRow>,
        now_ms: i64,
    ) -> Result<Vec<weft_store::Counts>> {
        self.inner.add_counts(rows, now_ms).await
    }

    async fn live_counts(&self, now_ms: i64) -> Result<Vec<weft_store::CountRow>> {
        self.inner.live_counts(now_ms).await
    }
}
