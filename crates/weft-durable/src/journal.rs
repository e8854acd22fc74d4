//! [`StoreJournal`]: the runtime's [`Journal`] hook over a [`Store`], and the **dispatch
//! gate** that makes the W4 durability rule hold without slowing in-memory runs.
//!
//! The runtime calls [`Journal::record`] synchronously, before it applies an input and
//! dispatches what the input enables. Blocking there on an fsync would serialise every
//! instance behind the disk, so `record` only appends the encoded record to the instance's
//! *lane* (an in-memory buffer). Durability is enforced where it matters, at the effect:
//! every tool of a durable engine is wrapped in a [`Gate`] that first records
//! `action.dispatched` in the lane and then waits until everything the lane holds is
//! committed (the lane's flush task calls [`Store::append`], which resolves only after the
//! fsync; concurrent lanes share the store's group commit). Only then is the real tool
//! called. The final result of a run is made durable by [`StoreJournal::barrier`] before the
//! run is reported (`Durable::wait`). An engine without a durable journal has no gates and
//! no lanes: its hot path is untouched.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::task::{Poll, Waker};

use serde_json::Value;
use weft_core::GraphType;
use weft_runtime::{CompiledPlan, Input, Journal};
use weft_store::{InstanceRecord, InstanceStatus, NewRecord, Snapshot, Store, now_ms};
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError, ToolSpec};

use crate::error::DurableError;
use crate::record::{Entry, Folded};

const SHARDS: usize = 32;
/// Committer tasks (batches in flight at once).
const COMMITTERS: usize = 2;
/// Most instances per batch.
const MAX_BATCH_LANES: usize = 4_096;

type Status = (String, InstanceStatus, Option<String>, i64);

/// What the committers take from.
#[derive(Default)]
struct Queue {
    lanes: Vec<(Arc<str>, Arc<Lane>)>,
    statuses: Vec<Status>,
    committers: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A plan the journal knows: compiled, with its stored version.
#[derive(Clone)]
pub(crate) struct PlanEntry {
    pub plan: Arc<CompiledPlan>,
    pub version: u32,
}

#[derive(Default)]
struct LaneState {
    plan: Option<PlanEntry>,
    /// The net after a repair (records name events of the revised plan).
    repaired: Option<Arc<weft_core::Net>>,
    buf: Vec<NewRecord>,
    recorded: u64,
    durable: u64,
    flushing: bool,
    wakers: Vec<Waker>,
    failed: Option<String>,
    create: Option<InstanceRecord>,
    /// The folded state, kept only for reactive instances when compaction is on.
    shadow: Option<Folded>,
    since_snapshot: u64,
}

#[derive(Default)]
struct Lane {
    st: Mutex<LaneState>,
}

/// Counters of the journal's work (for `extra` in benchmarks).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct JournalStats {
    /// Store appends issued.
    pub appends: u64,
    /// Records appended.
    pub records: u64,
    /// Record body bytes appended.
    pub bytes: u64,
    /// Snapshots taken for compaction.
    pub snapshots: u64,
    /// Records removed by compaction.
    pub truncated: u64,
}

#[derive(Default)]
struct Counters {
    appends: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    snapshots: AtomicU64,
    truncated: AtomicU64,
}

/// The runtime's journal over a store.
pub struct StoreJournal {
    store: Arc<dyn Store>,
    rt: tokio::runtime::Handle,
    plans: RwLock<HashMap<String, PlanEntry>>,
    lanes: Vec<Mutex<HashMap<Arc<str>, Arc<Lane>>>>,
    hasher: std::collections::hash_map::RandomState,
    snapshot_every: Option<u64>,
    dispatch_idempotent: std::sync::atomic::AtomicBool,
    queue: Mutex<Queue>,
    counters: Counters,
}

impl std::fmt::Debug for StoreJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreJournal")
            .field("backend", &self.store.backend())
            .finish_non_exhaustive()
    }
}

impl StoreJournal {
    /// A journal writing to `store`; flushes run on `rt`. `snapshot_every`: compact
    /// reactive instances every that many records (`None`: never).
    pub fn new(
        store: Arc<dyn Store>,
        rt: tokio::runtime::Handle,
        snapshot_every: Option<u64>,
    ) -> Self {
        StoreJournal {
            store,
            rt,
            plans: RwLock::new(HashMap::new()),
            lanes: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            snapshot_every: snapshot_every.filter(|n| *n > 0),
            dispatch_idempotent: std::sync::atomic::AtomicBool::new(false),
            queue: Mutex::new(Queue::default()),
            counters: Counters::default(),
        }
    }

    /// Also journal `action.dispatched` for idempotent tools (off by default; makes
    /// `weft inspect` show their dispatch at the cost of one record per step).
    pub fn set_record_idempotent_dispatch(&self, on: bool) {
        self.dispatch_idempotent.store(on, Ordering::Relaxed);
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Work done so far.
    pub fn stats(&self) -> JournalStats {
        let c = &self.counters;
        JournalStats {
            appends: c.appends.load(Ordering::Relaxed),
            records: c.records.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            snapshots: c.snapshots.load(Ordering::Relaxed),
            truncated: c.truncated.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn add_plan(&self, plan: Arc<CompiledPlan>, version: u32) {
        self.plans
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(plan.name.to_string(), PlanEntry { plan, version });
    }

    fn shard(&self, instance: &str) -> &Mutex<HashMap<Arc<str>, Arc<Lane>>> {
        &self.lanes[(self.hasher.hash_one(instance) as usize) % SHARDS]
    }

    fn lane(&self, instance: &str) -> Arc<Lane> {
        let mut m = lock(self.shard(instance));
        if let Some(l) = m.get(instance) {
            return Arc::clone(l);
        }
        let l = Arc::new(Lane::default());
        m.insert(Arc::from(instance), Arc::clone(&l));
        l
    }

    fn existing(&self, instance: &str) -> Option<Arc<Lane>> {
        lock(self.shard(instance)).get(instance).cloned()
    }

    /// Forgets an instance's lane (after its last record is durable).
    pub(crate) fn forget(&self, instance: &str) {
        lock(self.shard(instance)).remove(instance);
    }

    /// Prepares the lane of a restored instance (its records go after the stored ones).
    pub(crate) fn adopt(&self, instance: &str, plan: PlanEntry, folded: Option<Folded>) {
        let lane = self.lane(instance);
        let mut s = lock(&lane.st);
        if self.snapshot_every.is_some() && plan.plan.net.graph_type == GraphType::Reactive {
            s.shadow = folded;
        }
        s.plan = Some(plan);
    }

    fn push(&self, s: &mut LaneState, instance: &str, entry: &Entry) {
        if let (Some(sh), Some(p)) = (s.shadow.as_mut(), s.plan.as_ref()) {
            let _ = sh.apply_entry(&p.plan.net, instance, entry);
        }
        s.buf.push(entry.to_record(now_ms()));
        s.recorded += 1;
        s.since_snapshot += 1;
    }

    /// Records `action.dispatched` for a gate. Skipped for idempotent tools unless
    /// [`StoreJournal::set_record_idempotent_dispatch`] asked for it: recovery dispatches
    /// an idempotent action again whether or not its dispatch was recorded, so the record
    /// would only cost a journal row per step.
    fn record_dispatch(&self, ctx: &ToolContext, idempotent: bool) -> Arc<Lane> {
        let lane = self.lane(&ctx.instance);
        if idempotent && !self.dispatch_idempotent.load(Ordering::Relaxed) {
            return lane;
        }
        let firing = ctx
            .idempotency_key
            .rsplit('/')
            .next()
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        let e = Entry::Dispatched {
            firing,
            step: ctx.step.to_string(),
            key: ctx.idempotency_key.to_string(),
            attempt: ctx.attempt,
            idempotent,
        };
        {
            let mut s = lock(&lane.st);
            self.push(&mut s, &ctx.instance, &e);
        }
        lane
    }

    /// Resolves once everything recorded for `instance` so far is durable.
    pub async fn barrier(self: &Arc<Self>, instance: &str) -> Result<(), DurableError> {
        match self.existing(instance) {
            Some(lane) => self.wait_lane(Arc::from(instance), lane).await,
            None => Ok(()),
        }
    }

    async fn wait_lane(
        self: &Arc<Self>,
        name: Arc<str>,
        lane: Arc<Lane>,
    ) -> Result<(), DurableError> {
        let target = lock(&lane.st).recorded;
        std::future::poll_fn(|cx| {
            let mut s = lock(&lane.st);
            if let Some(f) = &s.failed {
                return Poll::Ready(Err(DurableError::Unavailable { message: f.clone() }));
            }
            if s.durable >= target {
                return Poll::Ready(Ok(()));
            }
            s.wakers.push(cx.waker().clone());
            if !s.flushing && !s.buf.is_empty() {
                s.flushing = true;
                drop(s);
                self.enqueue(Arc::clone(&name), Arc::clone(&lane));
            }
            Poll::Pending
        })
        .await
    }

    /// Queues a lane for the next batch and makes sure a committer runs.
    fn enqueue(self: &Arc<Self>, name: Arc<str>, lane: Arc<Lane>) {
        let mut q = lock(&self.queue);
        q.lanes.push((name, lane));
        self.kick(&mut q);
    }

    /// Starts a committer unless enough are running (one batch in flight per committer;
    /// two let one batch be built while the other commits).
    fn kick(self: &Arc<Self>, q: &mut Queue) {
        if q.committers < COMMITTERS {
            q.committers += 1;
            let me = Arc::clone(self);
            self.rt.spawn(async move { me.commit_loop().await });
        }
    }

    /// Queues an instance status update for the next batch.
    pub(crate) fn queue_status(
        self: &Arc<Self>,
        instance: &str,
        status: InstanceStatus,
        reason: Option<String>,
    ) {
        let mut q = lock(&self.queue);
        q.statuses
            .push((instance.to_string(), status, reason, now_ms()));
        self.kick(&mut q);
    }

    /// Takes everything queued, writes it as one batch (`Store::write_batch`: one job, one
    /// transaction, shared fsync), wakes the lanes' waiters; until the queue is empty.
    async fn commit_loop(self: Arc<Self>) {
        loop {
            let (lanes, statuses) = {
                let mut q = lock(&self.queue);
                if q.lanes.is_empty() && q.statuses.is_empty() {
                    q.committers -= 1;
                    return;
                }
                let n = q.lanes.len().min(MAX_BATCH_LANES);
                let lanes: Vec<_> = q.lanes.drain(..n).collect();
                (lanes, std::mem::take(&mut q.statuses))
            };
            let mut creates = Vec::new();
            let mut appends = Vec::with_capacity(lanes.len());
            let mut taken = Vec::with_capacity(lanes.len());
            for (name, lane) in &lanes {
                let mut s = lock(&lane.st);
                let records = std::mem::take(&mut s.buf);
                let due = self
                    .snapshot_every
                    .is_some_and(|every| s.since_snapshot >= every);
                let snap = match s.shadow.as_ref() {
                    Some(sh) if due => serde_json::to_vec(sh).ok(),
                    _ => None,
                };
                if snap.is_some() {
                    s.since_snapshot = 0;
                }
                if let Some(c) = s.create.take() {
                    creates.push(c);
                }
                let n = records.len() as u64;
                let bytes: u64 = records.iter().map(|r| r.body.len() as u64).sum();
                self.counters.records.fetch_add(n, Ordering::Relaxed);
                self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
                appends.push((name.to_string(), records));
                taken.push((n, snap));
            }
            self.counters.appends.fetch_add(1, Ordering::Relaxed);
            let res = self.store.write_batch(creates, appends, statuses).await;
            match res {
                Ok(done) => {
                    for (((name, lane), (n, snap)), app) in lanes.into_iter().zip(taken).zip(done) {
                        {
                            let mut s = lock(&lane.st);
                            s.durable += n;
                            for w in s.wakers.drain(..) {
                                w.wake();
                            }
                            if s.buf.is_empty() {
                                s.flushing = false;
                            } else {
                                drop(s);
                                lock(&self.queue)
                                    .lanes
                                    .push((Arc::clone(&name), Arc::clone(&lane)));
                            }
                        }
                        if let Some(state) = snap {
                            let me = Arc::clone(&self);
                            self.rt.spawn(async move {
                                me.compact(&name, app.last_seq, app.head, state).await;
                            });
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, message = "Journal write failed");
                    for (_, lane) in lanes {
                        let mut s = lock(&lane.st);
                        s.failed = Some(e.to_string());
                        s.flushing = false;
                        for w in s.wakers.drain(..) {
                            w.wake();
                        }
                    }
                }
            }
        }
    }

    /// Snapshot at `seq`, then drop the records it covers.
    async fn compact(&self, name: &str, seq: u64, hash: weft_store::Hash, state: Vec<u8>) {
        let snap = Snapshot {
            seq,
            hash,
            state,
            at_ms: now_ms(),
        };
        match self.store.put_snapshot(name, snap).await {
            Ok(()) => {
                self.counters.snapshots.fetch_add(1, Ordering::Relaxed);
                match self.store.truncate_before(name, seq + 1).await {
                    Ok(n) => {
                        self.counters.truncated.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::warn!(weft.instance = %name, error = %e, message = "Journal truncation failed")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(weft.instance = %name, error = %e, message = "Snapshot failed")
            }
        }
    }

    /// Updates the instance record's status (after its records are durable).
    pub(crate) async fn set_status(
        &self,
        instance: &str,
        status: InstanceStatus,
        reason: Option<String>,
    ) -> Result<(), DurableError> {
        self.store
            .update_status(instance, status, reason, now_ms())
            .await
            .map_err(DurableError::from)
    }
}

impl Journal for StoreJournal {
    /// The last durable records plus those still buffered, bodies cut at 400 bytes.
    fn excerpt(
        &self,
        _tenant: &str,
        instance: &str,
        max: usize,
    ) -> BoxFuture<'static, Option<String>> {
        let store = Arc::clone(&self.store);
        let name = instance.to_string();
        let pending: Vec<String> = self
            .existing(instance)
            .map(|l| {
                lock(&l.st)
                    .buf
                    .iter()
                    .map(|r| excerpt_line(None, &r.kind, &r.body))
                    .collect()
            })
            .unwrap_or_default();
        Box::pin(async move {
            let head = store.last_seq(&name).await.ok()?;
            let want = max.saturating_sub(pending.len()) as u64;
            let from = head.saturating_sub(want.saturating_sub(1)).max(1);
            let recs = if want == 0 || head == 0 {
                Vec::new()
            } else {
                store.read(&name, from, want as u32).await.ok()?
            };
            let mut lines: Vec<String> = recs
                .iter()
                .map(|r| excerpt_line(Some(r.seq), &r.kind, &r.body))
                .collect();
            lines.extend(pending);
            Some(lines.join("\n"))
        })
    }

    fn record(&self, tenant: &str, instance: &str, input: &Input) {
        let lane = self.lane(instance);
        let mut s = lock(&lane.st);
        if let Input::Start { plan, now, .. } = input {
            let entry = self
                .plans
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(&**plan)
                .cloned();
            match entry {
                Some(p) => {
                    s.create = Some(InstanceRecord {
                        id: instance.to_string(),
                        tenant: tenant.to_string(),
                        plan_name: plan.to_string(),
                        plan_version: p.version,
                        status: InstanceStatus::Running,
                        reason: None,
                        created_at_ms: *now,
                        updated_at_ms: *now,
                        parent: None,
                    });
                    if self.snapshot_every.is_some() && p.plan.net.graph_type == GraphType::Reactive
                    {
                        s.shadow = Some(Folded::empty());
                    }
                    s.plan = Some(p);
                }
                None => {
                    s.failed = Some(format!(
                        "plan `{plan}` was not registered with the durable layer; its instance cannot be journaled"
                    ));
                }
            }
        }
        let Some(p) = s.plan.clone() else {
            if s.failed.is_none() {
                s.failed = Some(format!("instance {instance} has no known plan"));
            }
            return;
        };
        let net = s
            .repaired
            .clone()
            .unwrap_or_else(|| Arc::clone(&p.plan.net));
        let entry = Entry::from_input(&net, tenant, p.version, input);
        self.push(&mut s, instance, &entry);
        if let Input::Repair(r) = input {
            s.repaired = Some(Arc::clone(&r.net));
        }
    }
}

fn excerpt_line(seq: Option<u64>, kind: &str, body: &[u8]) -> String {
    const MAX: usize = 400;
    let mut text = String::from_utf8_lossy(body).into_owned();
    if text.len() > MAX {
        let mut cut = MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    match seq {
        Some(n) => format!("#{n} {kind} {text}"),
        None => format!("(pending) {kind} {text}"),
    }
}

/// A tool of a durable engine: records `action.dispatched`, waits for the instance's
/// journal to be durable, then calls the real tool.
pub struct Gate {
    inner: Arc<dyn Tool>,
    journal: Arc<StoreJournal>,
}

impl Gate {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Tool>, journal: Arc<StoreJournal>) -> Self {
        Gate { inner, journal }
    }
}

impl Tool for Gate {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let lane = self
            .journal
            .record_dispatch(&ctx, self.inner.spec().idempotent);
        let journal = Arc::clone(&self.journal);
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let name: Arc<str> = Arc::clone(&ctx.instance);
            journal.wait_lane(name, lane).await.map_err(|e| {
                ToolError::fatal(
                    "journal_unavailable",
                    format!("the action was not dispatched: {e}"),
                )
            })?;
            inner.call(ctx, args).await
        })
    }
}
