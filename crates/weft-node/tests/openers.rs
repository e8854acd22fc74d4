//! A storage backend added through the openers table alone: the `toy:` scheme below lives
//! in this test, not in the product. The store conformance suite runs against stores opened
//! through the table, and a durable node runs a plan on one. The toy keeps its data in a
//! SQLite file of its own (`toy:NAME` is a file under the system temp dir) and counts the
//! calls that reach it, so the test can tell that the node really used it.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};
use weft_node::openers::StoreOpener;
use weft_node::{Builder, Config, Openers};
use weft_store::conformance::Fixture;
use weft_store::{
    Appended, EffectRecorded, Fence, Hash, InstanceRecord, InstanceStatus, Lease, LeaseTerms,
    NewRecord, Page, PlanInfo, PlanRecord, PlanStatus, Record, Result, Snapshot, StatusChange,
    Store, Timer, VerifyReport,
};

/// Calls that reached any toy store of this process.
static CALLS: AtomicU64 = AtomicU64::new(0);
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The toy backend: every call counted, then served by its own SQLite file.
struct Toy {
    inner: Arc<dyn Store>,
    calls: &'static AtomicU64,
}

#[async_trait]
impl Store for Toy {
    fn backend(&self) -> &'static str {
        "toy"
    }

    fn chaining(&self) -> &weft_store::Chaining {
        self.inner.chaining()
    }

    async fn status_seq(&self, instance: &str) -> Result<Option<u64>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.status_seq(instance).await
    }

    async fn append(&self, instance: &str, records: Vec<NewRecord>) -> Result<Appended> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.append(instance, records).await
    }

    async fn append_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        records: Vec<NewRecord>,
    ) -> Result<Appended> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.append_fenced(instance, fence, records).await
    }

    async fn read(&self, instance: &str, from_seq: u64, limit: u32) -> Result<Vec<Record>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.read(instance, from_seq, limit).await
    }

    async fn head(&self, instance: &str) -> Result<Option<(u64, Hash)>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.head(instance).await
    }

    async fn chain_base(&self, instance: &str) -> Result<(u64, Hash)> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.chain_base(instance).await
    }

    async fn truncate_before(&self, instance: &str, before: u64) -> Result<u64> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.truncate_before(instance, before).await
    }

    async fn last_seq(&self, instance: &str) -> Result<u64> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.last_seq(instance).await
    }

    async fn verify(&self, instance: &str) -> Result<VerifyReport> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.verify(instance).await
    }

    async fn write_batch(
        &self,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, Vec<NewRecord>)>,
        statuses: Vec<(String, InstanceStatus, Option<String>, i64)>,
    ) -> Result<Vec<Appended>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.write_batch(creates, appends, statuses).await
    }

    async fn write_batch_fenced(
        &self,
        terms: &LeaseTerms,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, u64, std::sync::Arc<[NewRecord]>)>,
        statuses: Vec<StatusChange>,
    ) -> Result<Vec<Result<Appended>>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner
            .write_batch_fenced(terms, creates, appends, statuses)
            .await
    }

    async fn load_many(
        &self,
        instances: &[String],
    ) -> Result<Vec<(Option<Snapshot>, Vec<Record>)>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.load_many(instances).await
    }

    async fn put_snapshot(&self, instance: &str, snapshot: Snapshot) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.put_snapshot(instance, snapshot).await
    }

    async fn latest_snapshot(&self, instance: &str) -> Result<Option<Snapshot>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.latest_snapshot(instance).await
    }

    async fn compact_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        snapshot: Snapshot,
    ) -> Result<u64> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.compact_fenced(instance, fence, snapshot).await
    }

    async fn put_plan(
        &self,
        tenant: &str,
        name: &str,
        document: Value,
        now_ms: i64,
    ) -> Result<u32> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.put_plan(tenant, name, document, now_ms).await
    }

    async fn get_plan(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<PlanRecord>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.get_plan(tenant, name, version).await
    }

    async fn put_tool(
        &self,
        tenant: &str,
        name: &str,
        definition: Option<Value>,
        now_ms: i64,
    ) -> Result<u32> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.put_tool(tenant, name, definition, now_ms).await
    }
    async fn list_tools(&self, tenant: Option<&str>) -> Result<Vec<weft_store::ToolRecord>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.list_tools(tenant).await
    }
    async fn list_plans(&self, tenant: &str) -> Result<Vec<PlanInfo>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.list_plans(tenant).await
    }

    async fn set_plan_status(
        &self,
        tenant: &str,
        name: &str,
        version: u32,
        status: PlanStatus,
    ) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner
            .set_plan_status(tenant, name, version, status)
            .await
    }

    async fn create_instance(&self, record: InstanceRecord) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.create_instance(record).await
    }

    async fn update_status(
        &self,
        id: &str,
        status: InstanceStatus,
        reason: Option<String>,
        now_ms: i64,
    ) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.update_status(id, status, reason, now_ms).await
    }

    async fn get_instance(&self, id: &str) -> Result<Option<InstanceRecord>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.get_instance(id).await
    }

    async fn list_instances(
        &self,
        tenant: &str,
        status: Option<InstanceStatus>,
        page: Page,
    ) -> Result<Vec<InstanceRecord>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.list_instances(tenant, status, page).await
    }

    async fn non_terminal_instances(&self, page: Page) -> Result<Vec<InstanceRecord>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.non_terminal_instances(page).await
    }

    async fn put_timer(&self, timer: Timer) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.put_timer(timer).await
    }

    async fn due_timers(&self, now_ms: i64, limit: u32) -> Result<Vec<Timer>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.due_timers(now_ms, limit).await
    }

    async fn list_timers(&self, after: Option<(String, String)>, limit: u32) -> Result<Vec<Timer>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.list_timers(after, limit).await
    }

    async fn delete_timer(&self, instance: &str, timer_id: &str) -> Result<bool> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.delete_timer(instance, timer_id).await
    }

    async fn record_effect(&self, key: &str, outcome: Value) -> Result<EffectRecorded> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.record_effect(key, outcome).await
    }

    async fn get_effect(&self, key: &str) -> Result<Option<Value>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.get_effect(key).await
    }

    async fn delete_effects(&self, from: &str, to: &str, limit: u32) -> Result<u64> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.delete_effects(from, to, limit).await
    }

    async fn acquire_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        self.calls.fetch_add(1, Ordering::Relaxed);
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
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner
            .renew_lease(instance, owner, ttl_ms, now_ms)
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
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner
            .acquire_leases(instances, owner, ttl_ms, now_ms, dead)
            .await
    }

    async fn renew_leases(
        &self,
        instances: &[String],
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<bool>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner
            .renew_leases(instances, owner, ttl_ms, now_ms)
            .await
    }

    async fn lease_owners(&self, now_ms: i64) -> Result<Vec<String>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.lease_owners(now_ms).await
    }

    async fn release_lease(&self, instance: &str, owner: &str) -> Result<bool> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.release_lease(instance, owner).await
    }

    async fn release_leases(&self, instances: &[String], owner: &str) -> Result<usize> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.release_leases(instances, owner).await
    }

    async fn owner_of(&self, instance: &str, now_ms: i64) -> Result<Option<Lease>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.owner_of(instance, now_ms).await
    }
    async fn add_counts(
        &self,
        rows: Vec<weft_store::CountRow>,
        now_ms: i64,
    ) -> Result<Vec<weft_store::Counts>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.add_counts(rows, now_ms).await
    }

    async fn live_counts(&self, now_ms: i64) -> Result<Vec<weft_store::CountRow>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.live_counts(now_ms).await
    }
}

fn toy_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("weft-toy-{}-{name}", std::process::id()))
}

/// The one entry a new backend needs: its scheme and how to open a URL of it.
fn openers() -> Openers {
    let toy: StoreOpener = Arc::new(|url: String| {
        Box::pin(async move {
            let name = url.trim_start_matches("toy:").to_string();
            let dir = toy_dir(&name);
            let inner = weft_store_sqlite::open(&dir.join("toy.db").display().to_string()).await?;
            Ok(Arc::new(Toy {
                inner,
                calls: &CALLS,
            }) as Arc<dyn Store>)
        })
    });
    Openers::default().store("toy", toy)
}

async fn fresh() -> Option<Fixture> {
    let name = format!("case-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let store = openers().open_store(&format!("toy:{name}")).await.unwrap();
    assert_eq!(store.backend(), "toy");
    Some(Fixture::with_cleanup(store, move || {
        Box::pin(async move {
            let _ = std::fs::remove_dir_all(toy_dir(&name));
        })
    }))
}

weft_store::conformance_tests!(fresh);

fn chain() -> Value {
    json!({"plan_name": "two", "graph_type": "acyclic",
        "events": {"start": {}, "mid": {}, "done": {"kind": "output"}},
        "steps": {
            "a": {"on": ["start"], "action": "echo", "args": {"x": 1}, "emits": ["mid"]},
            "b": {"on": ["mid"], "action": "echo", "args": {"y": 2}, "emits": ["done"]}}})
}

/// A node configured with `store.url = "toy:…"` opens its store through the toy entry, and
/// an instance's journal lands there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_runs_on_a_backend_added_through_the_openers_table() {
    let mut config = Config::default();
    config.store.url = "toy:node".into();
    let before = CALLS.load(Ordering::Relaxed);
    let node = Builder::new(config.clone())
        .openers(openers())
        .open()
        .await
        .unwrap();
    let durable = node.durable().unwrap();
    assert_eq!(durable.store().backend(), "toy");
    durable.register("local", chain()).await.unwrap();
    let h = durable.start("local", "two", json!({})).unwrap();
    let o = durable.wait(&h).await.unwrap();
    assert_eq!(o.status, weft_core::Status::Completed, "{o:?}");
    let report = weft_durable::verify(durable.store().as_ref(), h.id())
        .await
        .unwrap();
    assert!(report.records >= 3, "{report:?}");
    assert!(CALLS.load(Ordering::Relaxed) > before);
    // Without the entry, the same configuration is refused with the schemes there are.
    let err = Builder::new(config).open().await.err().unwrap();
    assert_eq!(err.code(), "invalid_store_url");
    assert!(err.to_string().contains("sqlite"), "{err}");
    let _ = std::fs::remove_dir_all(toy_dir("node"));
}
