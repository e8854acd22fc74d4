//! [`StoreJournal`]: the runtime's [`Journal`] hook over a [`Store`], and the **dispatch
//! gate** that makes the W4 durability rule hold without slowing in-memory runs.
//!
//! The runtime calls [`Journal::record`] synchronously, before it applies an input and
//! dispatches what the input enables. Blocking there on an fsync would serialise every
//! instance behind the disk, so `record` only appends the encoded record to the instance's
//! *lane* (an in-memory buffer). Durability is enforced where it matters, at the tool call:
//! every tool of a durable engine is wrapped in a [`Gate`] (installed as the `GateLink`
//! interceptor at `weft_tools::Stage::Durability` of the tool-call chain) that first records
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
use weft_runtime::{Bus, CloudEvent, CompiledPlan, Filter, Input, Journal, Subscription};
use weft_store::{
    InstanceRecord, InstanceStatus, LeaseTerms, NewRecord, Snapshot, Store, Timer, now_ms,
};
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
    /// Status updates queued and not written yet: waiting here, in a batch being written,
    /// or waiting for a retry after a failed write ([`StoreJournal::flush_statuses`]).
    unwritten_statuses: usize,
    /// Woken when `unwritten_statuses` drops to zero.
    status_wakers: Vec<Waker>,
}

/// How long a graceful shutdown waits for queued instance statuses to be written.
const SHUTDOWN_STATUS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

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
    /// The instance's pending timers as rows of the store's timer table (by timer id).
    timers: HashMap<u64, Timer>,
    /// Timer-table writes that go with the records in `buf`.
    timer_ops: Vec<TimerOp>,
    /// Lifecycle events held until `durable` reaches the record count they were published
    /// at (they report those records).
    held: std::collections::VecDeque<(u64, CloudEvent)>,
    /// Last sequence number known durable in the store (`None`: not known).
    seq: Option<u64>,
    /// Failed writes in a row (the instance is paused with `store_unavailable` while > 0).
    stall: u32,
    /// Records at the front of `buf` that a failed batch tried to write.
    retry_len: u64,
    /// The instance was paused because of failed writes.
    paused: bool,
    /// The epoch of this engine's lease on the instance (the fence of its appends): 1 for
    /// an instance it started (the lease is taken with the create), the acquired one for
    /// a restored instance.
    epoch: Option<u64>,
    /// The lease row is known to exist (renewed in the background from then on).
    leased: bool,
    /// Another owner took the lease over: nothing of this instance is written any more.
    lost: bool,
    /// Request ids for inputs on their way to the loop, in submission order.
    origins: std::collections::VecDeque<PendingOrigin>,
}

/// Told when an instance's journal writes start failing (`Some(reason)`: pause it) and
/// when they succeed again (`None`: resume it); returns whether it could.
pub(crate) type StoreListener = Arc<dyn Fn(&str, Option<&str>) -> bool + Send + Sync>;

/// What a failed batch gives back to one lane: its records (shared with the store while
/// the write ran), its instance record to create, its timer-table writes.
/// (The instance record is boxed: a batch holds thousands of backups, most without one.)
type Backup = (Arc<[NewRecord]>, Option<Box<InstanceRecord>>, Vec<TimerOp>);

/// Longest wait between write retries.
const MAX_BACKOFF_MS: u64 = 5_000;

/// A write to the store's timer table, mirroring `timer.set` / `timer.fired` records.
#[derive(Clone)]
enum TimerOp {
    Put(Timer),
    Delete(String, String),
}

impl TimerOp {
    fn target(&self) -> (&str, &str) {
        match self {
            TimerOp::Put(t) => (&t.instance, &t.timer_id),
            TimerOp::Delete(i, t) => (i, t),
        }
    }
}

/// The timer-table row of a pending timer (`timer_id` is `t<id>`, as the tools report it).
pub(crate) fn timer_row(
    instance: &str,
    id: u64,
    event: &str,
    payload: &Value,
    due_ms: i64,
    cron: Option<&str>,
    remaining: Option<u32>,
) -> Timer {
    Timer {
        instance: instance.to_string(),
        timer_id: format!("t{id}"),
        due_ms,
        payload: serde_json::json!({"event": event, "payload": payload, "cron": cron,
            "remaining": remaining}),
    }
}

/// An `action.dispatched` to record (the idempotency key is built only when recorded).
struct Dispatch<'a> {
    step: &'a str,
    firing: weft_core::token::FiringId,
    attempt: u32,
    idempotent: bool,
}

/// One shard of the lanes, by instance.
type LaneMap = HashMap<Arc<str>, Arc<Lane>, foldhash::fast::RandomState>;

#[derive(Default)]
struct Lane {
    st: Mutex<LaneState>,
    /// Held by a caller between queueing a request id in `LaneState::origins` and
    /// submitting its input, so request ids are queued in the order the inputs reach the
    /// instance's loop (see [`StoreJournal::with_origin`]).
    order: Mutex<()>,
}

/// A request id waiting for the record of the input its caller is submitting: a
/// `token.added` of `event`, or an `instance.stopped` (`event: None`).
struct PendingOrigin {
    event: Option<Box<str>>,
    id: Arc<str>,
}

thread_local! {
    /// The request id for the `instance.started` record of the start being made on this
    /// thread ([`StoreJournal::with_start_origin`]): a new instance's start is recorded by
    /// the thread that starts it.
    static START_ORIGIN: std::cell::RefCell<Option<Arc<str>>> = const { std::cell::RefCell::new(None) };
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
    /// This journal (the `Journal` hook gets `&self`; flushing needs the `Arc`).
    me: std::sync::Weak<StoreJournal>,
    store: Arc<dyn Store>,
    rt: tokio::runtime::Handle,
    plans: RwLock<HashMap<String, PlanEntry>>,
    lanes: Vec<Mutex<LaneMap>>,
    hasher: foldhash::fast::RandomState,
    snapshot_every: Option<u64>,
    dispatch_idempotent: std::sync::atomic::AtomicBool,
    queue: Mutex<Queue>,
    counters: Counters,
    /// Where held lifecycle events go once durable (see [`GatedBus`]).
    bus: std::sync::OnceLock<Arc<dyn Bus>>,
    /// Pauses and resumes instances whose writes fail (set by `Durable::open`).
    listener: std::sync::OnceLock<StoreListener>,
    /// This engine's lease owner id.
    owner: String,
    /// Lifetime of the leases it takes.
    lease_ttl_ms: i64,
    /// [`StoreJournal::shut_down`] ran: new instances are not journaled.
    closed: std::sync::atomic::AtomicBool,
    /// The last journal write failed (the store refuses writes: a full disk, a lost
    /// connection); cleared by the next one that succeeds.
    refusing: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for StoreJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreJournal")
            .field("backend", &self.store.backend())
            .finish_non_exhaustive()
    }
}

/// Where an instance starts counting towards its first snapshot: up to a quarter of the
/// interval, taken from its id's hash. Instances fed in lockstep (a load generator, a
/// broadcast event) would otherwise all come due in the same batch: under the server's
/// event load, a hundred compactions (each deleting a thousand journal rows) in one commit
/// held every group commit behind it for 30–50 ms (timed in an instrumented writer). Spread
/// over a quarter of the interval, a batch carries one or two. An instance's first snapshot
/// comes after 75–100% of the interval (an instance that ends before keeps its whole
/// journal); the bound on its journal stays one interval plus a snapshot.
fn snapshot_phase(hash: u64, every: u64) -> u64 {
    hash % (every / 4).max(1)
}

impl StoreJournal {
    /// A journal writing to `store`; flushes run on `rt`. `snapshot_every`: compact
    /// reactive instances every that many records (`None`: never). Every append is fenced
    /// by `owner`'s lease on the instance (`lease_ttl_ms` long).
    pub fn new(
        store: Arc<dyn Store>,
        rt: tokio::runtime::Handle,
        snapshot_every: Option<u64>,
        owner: String,
        lease_ttl_ms: i64,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| StoreJournal {
            me: me.clone(),
            store,
            rt,
            plans: RwLock::new(HashMap::new()),
            lanes: (0..SHARDS)
                .map(|_| Mutex::new(LaneMap::default()))
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
            snapshot_every: snapshot_every.filter(|n| *n > 0),
            dispatch_idempotent: std::sync::atomic::AtomicBool::new(false),
            queue: Mutex::new(Queue::default()),
            counters: Counters::default(),
            bus: std::sync::OnceLock::new(),
            listener: std::sync::OnceLock::new(),
            owner,
            lease_ttl_ms: lease_ttl_ms.max(1),
            closed: std::sync::atomic::AtomicBool::new(false),
            refusing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Has [`StoreJournal::shut_down`] run?
    pub fn is_shut_down(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// This engine's lease owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Lifetime of the leases this engine takes.
    pub fn lease_ttl_ms(&self) -> i64 {
        self.lease_ttl_ms
    }

    /// The instance's lease was taken over by another owner (or could not be renewed):
    /// from now on nothing of it is written (its buffered records, timer rows and held
    /// events are dropped; waiting gates fail) and the engine pauses it locally with
    /// `reason` (`lease_lost: …`). Its new owner drives it from the store.
    fn lose(&self, name: &str, lane: &Arc<Lane>, why: &str) {
        let reason = format!(
            "lease_lost: {why}; this process ({}) stopped driving {name}",
            self.owner
        );
        if self.stop_lane(lane, &reason) {
            tracing::error!(weft.instance = %name, weft.owner = %self.owner, reason = %reason, message = "Lease lost; the instance is no longer driven here");
            self.tell(name, Some(&reason));
        }
    }

    /// Stops writing anything of the lane's instance (see [`Self::lose`]); `false` if it
    /// was stopped already.
    fn stop_lane(&self, lane: &Arc<Lane>, reason: &str) -> bool {
        {
            let mut s = lock(&lane.st);
            if s.lost {
                return false;
            }
            s.lost = true;
            s.failed = Some(reason.to_string());
            s.buf.clear();
            s.timer_ops.clear();
            s.timers.clear();
            s.held.clear();
            s.shadow = None;
            s.create = None;
            s.flushing = false;
            for w in s.wakers.drain(..) {
                w.wake();
            }
        }
        true
    }

    /// Graceful shutdown: waits until everything recorded so far is durable and every
    /// queued status update is written ([`Self::flush_statuses`]), stops driving
    /// every instance this engine holds (nothing of them is written any more; each is
    /// paused here with `shut_down: …`) and releases their leases in bulk
    /// ([`Store::release_leases`], 1,000 per write), so another process recovers them at
    /// once instead of after the lease expiry. Instances started afterwards are refused.
    /// Returns how many leases were released.
    pub async fn shut_down(self: &Arc<Self>) -> Result<usize, DurableError> {
        self.closed.store(true, Ordering::SeqCst);
        let lanes: Vec<(Arc<str>, Arc<Lane>)> = self
            .lanes
            .iter()
            .flat_map(|shard| {
                lock(shard)
                    .iter()
                    .map(|(n, l)| (Arc::clone(n), Arc::clone(l)))
                    .collect::<Vec<_>>()
            })
            .collect();
        // What was recorded is written first (a lane whose writes fail is released as it
        // is: the next owner folds what the store has).
        let flushes = lanes
            .iter()
            .map(|(n, l)| self.wait_lane(Arc::clone(n), Arc::clone(l)));
        let mut all_durable = true;
        for (r, (name, _)) in futures::future::join_all(flushes).await.iter().zip(&lanes) {
            if let Err(e) = r {
                all_durable = false;
                tracing::warn!(weft.instance = %name, error = %e, message = "Not all records were durable at shutdown");
            }
        }
        // So are the status updates queued so far (`Durable::wait` queues them after the
        // records): without this, a process that exits after its shutdown leaves finished
        // instances `running` in the store until the next recovery sets them. Bounded, and
        // skipped when the store refused records: a store that is down must not hold the
        // shutdown forever (the next recovery sets the statuses from the journal).
        if !all_durable {
            tracing::warn!(
                message = "Instance statuses not flushed at shutdown: the store refused records"
            );
        } else if tokio::time::timeout(SHUTDOWN_STATUS_WAIT, self.flush_statuses())
            .await
            .is_err()
        {
            tracing::warn!(
                message = "Instance statuses not all written at shutdown (timed out); the next recovery sets them"
            );
        }
        let mut held = Vec::new();
        for (name, lane) in &lanes {
            let leased = {
                let s = lock(&lane.st);
                s.leased && !s.lost
            };
            let reason = format!(
                "shut_down: this process ({}) released its lease on {name}",
                self.owner
            );
            if self.stop_lane(lane, &reason) {
                self.tell(name, Some(&reason));
                if leased {
                    held.push(name.to_string());
                }
            }
        }
        let mut released = 0;
        for chunk in held.chunks(1_000) {
            released += self.store.release_leases(chunk, &self.owner).await?;
        }
        tracing::info!(weft.owner = %self.owner, released, message = "Leases released at shutdown");
        Ok(released)
    }

    /// Renews the leases of every instance this engine drives (one bulk write per 1,000);
    /// those it no longer holds are lost (`lose`). Returns how many were renewed.
    pub async fn renew_leases(&self) -> usize {
        let mut held: Vec<(Arc<str>, Arc<Lane>)> = Vec::new();
        for shard in &self.lanes {
            for (name, lane) in lock(shard).iter() {
                let s = lock(&lane.st);
                if s.leased && !s.lost {
                    held.push((Arc::clone(name), Arc::clone(lane)));
                }
            }
        }
        let mut renewed = 0;
        for chunk in held.chunks(1_000) {
            let ids: Vec<String> = chunk.iter().map(|(n, _)| n.to_string()).collect();
            match self
                .store
                .renew_leases(&ids, &self.owner, self.lease_ttl_ms, now_ms())
                .await
            {
                Ok(ok) => {
                    for ((name, lane), ok) in chunk.iter().zip(ok) {
                        if ok {
                            renewed += 1;
                        } else {
                            self.lose(name, lane, "its lease expired or another owner took it");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, message = "Lease renewal failed; retried at the next period");
                }
            }
        }
        renewed
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

    pub(crate) fn set_listener(&self, l: StoreListener) {
        let _ = self.listener.set(l);
    }

    fn tell(&self, instance: &str, reason: Option<&str>) -> bool {
        self.listener.get().is_some_and(|l| l(instance, reason))
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

    fn shard(&self, instance: &str) -> &Mutex<LaneMap> {
        &self.lanes[(self.hasher.hash_one(instance) as usize) % SHARDS]
    }

    fn lane(&self, instance: &str) -> Arc<Lane> {
        let mut m = lock(self.shard(instance));
        if let Some(l) = m.get(instance) {
            return Arc::clone(l);
        }
        let l = Arc::new(Lane::default());
        if let Some(every) = self.snapshot_every {
            lock(&l.st).since_snapshot = snapshot_phase(self.hasher.hash_one(instance), every);
        }
        m.insert(Arc::from(instance), Arc::clone(&l));
        l
    }

    /// Runs `start` (which starts one instance) with `request_id` for its
    /// `instance.started` record.
    pub(crate) fn with_start_origin<T>(&self, request_id: &str, start: impl FnOnce() -> T) -> T {
        START_ORIGIN.with(|c| *c.borrow_mut() = Some(Arc::from(request_id)));
        let out = start();
        START_ORIGIN.with(|c| c.borrow_mut().take());
        out
    }

    /// Runs `submit`, which hands each of `instances` one input — a `token.added` of `event`,
    /// or a stop (`event: None`) — with `request_id` queued for that input's record.
    /// `submit` returns whether it handed anything over (on `false` the queued ids are
    /// withdrawn). The lanes' order locks are held meanwhile, in sorted order, so ids are
    /// queued in the order the inputs reach each instance's loop (the loop takes inputs
    /// in order, directly or through its mailbox).
    pub(crate) fn with_origin<T>(
        &self,
        instances: &[&str],
        event: Option<&str>,
        request_id: &str,
        submit: impl FnOnce() -> (T, bool),
    ) -> T {
        let pending = |id: &Arc<str>| PendingOrigin {
            event: event.map(Box::from),
            id: Arc::clone(id),
        };
        let id: Arc<str> = Arc::from(request_id);
        // One instance (an addressed event, a stop): no vectors.
        if let [one] = instances {
            let Some(lane) = self.existing(one) else {
                return submit().0;
            };
            let _order = lock(&lane.order);
            lock(&lane.st).origins.push_back(pending(&id));
            let (out, submitted) = submit();
            if !submitted {
                lock(&lane.st).origins.retain(|o| !Arc::ptr_eq(&o.id, &id));
            }
            return out;
        }
        let mut names: Vec<&str> = instances.to_vec();
        names.sort_unstable();
        names.dedup();
        let lanes: Vec<Arc<Lane>> = names.iter().filter_map(|i| self.existing(i)).collect();
        let guards: Vec<MutexGuard<'_, ()>> = lanes.iter().map(|l| lock(&l.order)).collect();
        for l in &lanes {
            lock(&l.st).origins.push_back(pending(&id));
        }
        let (out, submitted) = submit();
        if !submitted {
            for l in &lanes {
                lock(&l.st).origins.retain(|o| !Arc::ptr_eq(&o.id, &id));
            }
        }
        drop(guards);
        out
    }

    /// [`StoreJournal::with_origin`] for a batch: `deliveries` lists every (instance, event)
    /// the submission will record a token for, in order, so each of those records carries
    /// `request_id`.
    pub(crate) fn with_origins<T>(
        &self,
        deliveries: &[(&str, &str)],
        request_id: &str,
        submit: impl FnOnce() -> (T, bool),
    ) -> T {
        let id: Arc<str> = Arc::from(request_id);
        let mut names: Vec<&str> = deliveries.iter().map(|(i, _)| *i).collect();
        names.sort_unstable();
        names.dedup();
        let lanes: Vec<(&str, Arc<Lane>)> = names
            .iter()
            .filter_map(|i| self.existing(i).map(|l| (*i, l)))
            .collect();
        let guards: Vec<MutexGuard<'_, ()>> = lanes.iter().map(|(_, l)| lock(&l.order)).collect();
        for (instance, event) in deliveries {
            if let Ok(k) = lanes.binary_search_by(|(n, _)| n.cmp(instance)) {
                lock(&lanes[k].1.st).origins.push_back(PendingOrigin {
                    event: Some(Box::from(*event)),
                    id: Arc::clone(&id),
                });
            }
        }
        let (out, submitted) = submit();
        if !submitted {
            for (_, l) in &lanes {
                lock(&l.st).origins.retain(|o| !Arc::ptr_eq(&o.id, &id));
            }
        }
        drop(guards);
        out
    }

    /// The request id queued for `entry`, if the next one waiting matches it.
    fn take_origin(s: &mut LaneState, entry: &Entry) -> Option<String> {
        let matches = match (entry, s.origins.front()?) {
            (Entry::Token { event, .. }, o) => o.event.as_deref() == Some(event.as_str()),
            (Entry::Stopped { .. }, o) => o.event.is_none(),
            _ => false,
        };
        matches.then(|| s.origins.pop_front().map(|o| o.id.to_string()))?
    }

    fn existing(&self, instance: &str) -> Option<Arc<Lane>> {
        lock(self.shard(instance)).get(instance).cloned()
    }

    /// Forgets an instance's lane (after its last record is durable); the timer-table
    /// rows of timers it left pending (an ended instance never fires them) are deleted.
    pub(crate) fn forget(&self, instance: &str) {
        let lane = lock(self.shard(instance)).remove(instance);
        let rows: Vec<Timer> = lane
            .map(|l| lock(&l.st).timers.drain().map(|(_, t)| t).collect())
            .unwrap_or_default();
        if !rows.is_empty() {
            let store = Arc::clone(&self.store);
            self.rt.spawn(async move {
                for t in rows {
                    if let Err(e) = store.delete_timer(&t.instance, &t.timer_id).await {
                        tracing::warn!(weft.instance = %t.instance, error = %e, message = "Timer row not deleted");
                    }
                }
            });
        }
    }

    /// Is timer `timer_id` (`t<id>`) of `instance` pending in this process?
    pub(crate) fn has_timer(&self, instance: &str, timer_id: &str) -> bool {
        let Some(id) = timer_id
            .strip_prefix('t')
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return false;
        };
        self.existing(instance)
            .is_some_and(|l| lock(&l.st).timers.contains_key(&id))
    }

    /// Prepares the lane of a restored instance (its records go after the stored ones);
    /// `timers` are the rows of its pending timers.
    pub(crate) fn adopt(
        &self,
        instance: &str,
        plan: PlanEntry,
        folded: Option<Folded>,
        timers: &[(u64, Timer)],
        seq: u64,
        epoch: u64,
    ) {
        let lane = self.lane(instance);
        let mut s = lock(&lane.st);
        s.timers = timers.iter().cloned().collect();
        s.seq = Some(seq);
        s.epoch = Some(epoch);
        s.leased = true;
        if self.snapshot_every.is_some() && plan.plan.net.graph_type == GraphType::Reactive {
            s.shadow = folded;
        }
        s.plan = Some(plan);
    }

    fn push(&self, s: &mut LaneState, instance: &str, entry: &Entry) {
        if s.lost {
            return;
        }
        if let (Some(sh), Some(p)) = (s.shadow.as_mut(), s.plan.as_ref()) {
            let _ = sh.apply_entry(&p.plan.net, instance, entry);
        }
        match entry {
            Entry::TimerSet {
                timer_id,
                event,
                payload,
                due_ms,
                cron,
                remaining,
                ..
            } => {
                let row = timer_row(
                    instance,
                    *timer_id,
                    event,
                    payload,
                    *due_ms,
                    cron.as_deref(),
                    *remaining,
                );
                s.timers.insert(*timer_id, row.clone());
                s.timer_ops.push(TimerOp::Put(row));
            }
            Entry::Timer {
                timer_id,
                event,
                payload,
                next_due_ms,
                ..
            } => match next_due_ms {
                Some(next) => {
                    let row = s.timers.entry(*timer_id).or_insert_with(|| {
                        timer_row(instance, *timer_id, event, payload, *next, None, None)
                    });
                    row.due_ms = *next;
                    if let Some(r) = row.payload.get_mut("remaining")
                        && let Some(n) = r.as_u64()
                    {
                        *r = Value::from(n.saturating_sub(1));
                    }
                    let row = row.clone();
                    s.timer_ops.push(TimerOp::Put(row));
                }
                None => {
                    s.timers.remove(timer_id);
                    s.timer_ops.push(TimerOp::Delete(
                        instance.to_string(),
                        format!("t{timer_id}"),
                    ));
                }
            },
            _ => {}
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
        let firing = ctx
            .idempotency_key
            .rsplit('/')
            .next()
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        let d = Dispatch {
            step: &ctx.step,
            firing,
            attempt: ctx.attempt,
            idempotent,
        };
        self.push_dispatch(&ctx.instance, d, || ctx.idempotency_key.to_string())
            .0
    }

    /// [`Self::record_dispatch`]'s rule for any caller: records `action.dispatched` unless
    /// the tool is idempotent and such records are not asked for (`key` is built only when
    /// recorded); returns the lane and its record count.
    fn push_dispatch(
        &self,
        instance: &str,
        d: Dispatch<'_>,
        key: impl FnOnce() -> String,
    ) -> (Arc<Lane>, u64) {
        let lane = self.lane(instance);
        let mut s = lock(&lane.st);
        if !d.idempotent || self.dispatch_idempotent.load(Ordering::Relaxed) {
            let e = Entry::Dispatched {
                firing: d.firing,
                step: d.step.to_string(),
                key: key(),
                attempt: d.attempt,
                idempotent: d.idempotent,
            };
            self.push(&mut s, instance, &e);
        }
        let recorded = s.recorded;
        drop(s);
        (lane, recorded)
    }

    /// Does the store refuse journal writes right now (the last write failed and none has
    /// succeeded since)? Front ends answer `503` instead of accepting work that would wait.
    pub fn store_refusing(&self) -> bool {
        self.refusing.load(std::sync::atomic::Ordering::Relaxed)
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
        std::future::poll_fn(|cx| self.poll_lane(&name, &lane, target, false, cx))
            .await
            .map_err(|message| DurableError::Unavailable { message })
    }

    /// Whether the first `mark` records of the lane are durable: `Err` if they cannot
    /// become so (or, with `park_lost`, `Pending` for good once the lease is lost);
    /// otherwise `Pending` after registering `cx` (once per task) and making sure the lane
    /// is being written.
    fn poll_lane(
        &self,
        name: &str,
        lane: &Arc<Lane>,
        mark: u64,
        park_lost: bool,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Result<(), String>> {
        let mut s = lock(&lane.st);
        if park_lost && s.lost {
            return Poll::Pending;
        }
        if let Some(f) = &s.failed {
            return Poll::Ready(Err(f.clone()));
        }
        if s.durable >= mark {
            return Poll::Ready(Ok(()));
        }
        if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            s.wakers.push(cx.waker().clone());
        }
        if !s.flushing && !s.buf.is_empty() {
            s.flushing = true;
            drop(s);
            if let Some(me) = self.me.upgrade() {
                me.enqueue(Arc::from(name), Arc::clone(lane));
            }
        }
        Poll::Pending
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
        q.unwritten_statuses += 1;
        self.kick(&mut q);
    }

    /// Resolves once no status update is left unwritten: every one queued before the call
    /// (and any queued meanwhile) is in the store. `Durable::wait` queues an instance's
    /// status after its records are durable, to go with the next batch; a process that
    /// exits right after it may leave the instance record `running` (the journal, which
    /// says it finished, is the truth, and the next recovery sets the status from it).
    /// Waits as long as the store refuses the writes (they are retried).
    pub async fn flush_statuses(&self) {
        std::future::poll_fn(|cx| {
            let mut q = lock(&self.queue);
            if q.unwritten_statuses == 0 {
                return Poll::Ready(());
            }
            if !q.status_wakers.iter().any(|w| w.will_wake(cx.waker())) {
                q.status_wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
    }

    /// Resolves once everything recorded so far is durable (an error if some instance's
    /// records cannot become so, after waiting for all of them) and every status update
    /// queued so far is written ([`StoreJournal::flush_statuses`]).
    pub async fn flush(self: &Arc<Self>) -> Result<(), DurableError> {
        let lanes: Vec<(Arc<str>, Arc<Lane>)> = self
            .lanes
            .iter()
            .flat_map(|shard| {
                lock(shard)
                    .iter()
                    .map(|(n, l)| (Arc::clone(n), Arc::clone(l)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let flushes = lanes.into_iter().map(|(n, l)| self.wait_lane(n, l));
        let lanes = futures::future::join_all(flushes).await;
        self.flush_statuses().await;
        lanes.into_iter().collect()
    }

    /// `n` status updates were written: wakes [`StoreJournal::flush_statuses`] once none
    /// is left.
    fn statuses_written(&self, n: usize) {
        if n == 0 {
            return;
        }
        let wakers = {
            let mut q = lock(&self.queue);
            q.unwritten_statuses = q.unwritten_statuses.saturating_sub(n);
            if q.unwritten_statuses > 0 {
                return;
            }
            std::mem::take(&mut q.status_wakers)
        };
        for w in wakers {
            w.wake();
        }
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
            // Sized for the batch up front: grown step by step, this vector of large
            // records cost ~2% of W4-concurrent's CPU in a batch of new instances.
            let mut creates = Vec::with_capacity(lanes.len());
            let mut appends = Vec::with_capacity(lanes.len());
            let mut taken = Vec::with_capacity(lanes.len());
            let mut timer_ops: Vec<Vec<TimerOp>> = Vec::with_capacity(lanes.len());
            // What a failed write gives back to its lanes (the store consumes the batch).
            let mut backup = Vec::with_capacity(lanes.len());
            for (name, lane) in &lanes {
                let mut s = lock(&lane.st);
                // Shared with the store: a failed write puts them back without a copy
                // having been made on the way.
                let records: Arc<[NewRecord]> = std::mem::take(&mut s.buf).into();
                backup.push((
                    Arc::clone(&records),
                    s.create.clone().map(Box::new),
                    s.timer_ops.clone(),
                ));
                timer_ops.push(std::mem::take(&mut s.timer_ops));
                let due = self
                    .snapshot_every
                    .is_some_and(|every| s.since_snapshot >= every);
                let snap = match s.shadow.as_ref() {
                    Some(sh) if due => serde_json::to_vec(sh)
                        .ok()
                        .map(|v| (v, s.epoch.unwrap_or(0))),
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
                // A lane without a lease (never expected) writes with epoch 0, which no
                // lease has: refused as `lease_lost`, never unfenced.
                appends.push((name.to_string(), s.epoch.unwrap_or(0), records));
                taken.push((n, snap));
            }
            self.counters.appends.fetch_add(1, Ordering::Relaxed);
            let statuses_backup = statuses.clone();
            let status_count = statuses.len();
            let terms = LeaseTerms {
                owner: self.owner.clone(),
                ttl_ms: self.lease_ttl_ms,
                now_ms: now_ms(),
            };
            let res = self
                .store
                .write_batch_fenced(&terms, creates, appends, statuses)
                .await;
            match res {
                Ok(done) => {
                    self.refusing
                        .store(false, std::sync::atomic::Ordering::Relaxed);
                    // Split off the lanes whose lease another owner took (and, never
                    // expected, lanes the store failed alone: retried like a failed batch).
                    let mut ok = Vec::with_capacity(lanes.len());
                    let mut ops = Vec::new();
                    let mut failed: Vec<(Arc<str>, Arc<Lane>)> = Vec::new();
                    let mut failed_backup = Vec::new();
                    let mut failed_err = None;
                    for (((((name, lane), t), app), tops), back) in lanes
                        .into_iter()
                        .zip(taken)
                        .zip(done)
                        .zip(timer_ops)
                        .zip(backup)
                    {
                        match app {
                            Ok(app) => {
                                ops.extend(tops);
                                ok.push(((name, lane), t, app));
                            }
                            Err(e @ weft_store::Error::LeaseLost { .. }) => {
                                self.lose(&name, &lane, &e.to_string());
                            }
                            Err(e) => {
                                if failed_err.is_none() {
                                    failed_err = Some(e);
                                }
                                failed.push((name, lane));
                                failed_backup.push(back);
                            }
                        }
                    }
                    if !ops.is_empty() {
                        self.write_timer_ops(ops).await;
                    }
                    if let Some(e) = failed_err {
                        self.write_failed(&e, failed, failed_backup, Vec::new());
                    }
                    for ((name, lane), (n, snap), app) in ok {
                        let mut resumed = false;
                        {
                            let mut s = lock(&lane.st);
                            s.durable += n;
                            s.seq = Some(app.last_seq);
                            s.leased = true;
                            if s.stall > 0 {
                                s.stall = 0;
                                s.retry_len = 0;
                                resumed = std::mem::take(&mut s.paused);
                            }
                            for w in s.wakers.drain(..) {
                                w.wake();
                            }
                            if !s.held.is_empty() {
                                let durable = s.durable;
                                let ready: Vec<CloudEvent> = std::iter::from_fn(|| {
                                    s.held
                                        .pop_front_if(|(t, _)| *t <= durable)
                                        .map(|(_, ev)| ev)
                                })
                                .collect();
                                if let Some(bus) = self.bus.get() {
                                    for ev in ready {
                                        bus.publish(ev);
                                    }
                                }
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
                        if resumed {
                            tracing::info!(weft.instance = %name, message = "Journal writes succeed again; resuming");
                            self.tell(&name, None);
                        }
                        if let Some((state, epoch)) = snap {
                            let me = Arc::clone(&self);
                            self.rt.spawn(async move {
                                me.compact(&name, &lane, epoch, (app.last_seq, app.head), state)
                                    .await;
                            });
                        }
                    }
                    // (A failed batch's statuses are queued again: they stay unwritten.)
                    self.statuses_written(status_count);
                }
                Err(e) => self.write_failed(&e, lanes, backup, statuses_backup),
            }
        }
    }

    /// A batch could not be written: nothing in it counts as durable. Its records go back
    /// to the front of their lanes, whose waiting gates stay waiting (nothing is dispatched
    /// past an unjournaled record); each instance is paused with `store_unavailable` the
    /// first time; the lanes are written again after a backoff (50 ms doubling to 5 s) until
    /// the store takes them, which resumes the instances.
    fn write_failed(
        self: &Arc<Self>,
        e: &weft_store::Error,
        lanes: Vec<(Arc<str>, Arc<Lane>)>,
        backup: Vec<Backup>,
        statuses: Vec<Status>,
    ) {
        tracing::error!(error = %e, message = "Journal write failed; retrying with backoff");
        self.refusing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let reason = format!(
            "store_unavailable: {e} (the journal write is retried and the instance resumes when it succeeds)"
        );
        let mut paused = Vec::new();
        let mut attempt = 0;
        for ((name, lane), (records, create, ops)) in lanes.iter().zip(backup) {
            let mut s = lock(&lane.st);
            s.retry_len = records.len() as u64;
            let mut buf = records.to_vec();
            buf.append(&mut s.buf);
            s.buf = buf;
            let mut o = ops;
            o.append(&mut s.timer_ops);
            s.timer_ops = o;
            if let Some(c) = create {
                s.create = Some(*c);
            }
            s.stall = s.stall.saturating_add(1);
            attempt = attempt.max(s.stall);
            if !s.paused {
                paused.push((Arc::clone(name), Arc::clone(lane)));
            }
        }
        // (Not yet possible for an instance whose first loop turn is still running: the
        // next failed attempt tries again.)
        for (name, lane) in paused {
            if self.tell(&name, Some(&reason)) {
                lock(&lane.st).paused = true;
            }
        }
        let delay = (50u64 << attempt.min(8)).min(MAX_BACKOFF_MS);
        let me = Arc::clone(self);
        self.rt.spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            for (name, lane) in lanes {
                me.reconcile(&name, &lane).await;
                me.enqueue(name, lane);
            }
            if !statuses.is_empty() {
                let mut q = lock(&me.queue);
                q.statuses.extend(statuses);
                me.kick(&mut q);
            }
        });
    }

    /// Before a failed lane is written again: a backend whose batches are not atomic
    /// (PostgreSQL's parts commit separately) may have written some of it. Whatever the
    /// store already has is not written twice: the instance record if it exists, the
    /// records if the head moved by exactly their number (they count as durable now).
    async fn reconcile(&self, name: &str, lane: &Arc<Lane>) {
        let (known, len, create) = {
            let s = lock(&lane.st);
            (s.seq, s.retry_len, s.create.is_some())
        };
        if create && let Ok(Some(_)) = self.store.get_instance(name).await {
            lock(&lane.st).create = None;
        }
        let Some(known) = known else { return };
        if len == 0 {
            return;
        }
        let Ok(head) = self.store.last_seq(name).await else {
            return;
        };
        let mut s = lock(&lane.st);
        if head == known + len {
            let n = usize::try_from(len).unwrap_or(usize::MAX).min(s.buf.len());
            s.buf.drain(..n);
            s.durable += len;
            s.seq = Some(head);
            s.retry_len = 0;
            for w in s.wakers.drain(..) {
                w.wake();
            }
        } else if head != known {
            s.failed = Some(format!(
                "the journal of {name} is at seq {head} in the store, expected {known} or {}",
                known + len
            ));
            for w in s.wakers.drain(..) {
                w.wake();
            }
        }
    }

    /// Mirrors a batch's timer records into the store's timer table (after the records are
    /// durable; the journal stays the truth, recovery re-puts the rows of pending timers).
    /// Only the last write per timer counts, so the rest can run concurrently.
    async fn write_timer_ops(&self, ops: Vec<TimerOp>) {
        let mut last: HashMap<(String, String), TimerOp> = HashMap::new();
        for op in ops {
            let (i, t) = op.target();
            last.insert((i.to_string(), t.to_string()), op);
        }
        let store = &self.store;
        let results = futures::future::join_all(last.into_values().map(|op| async move {
            match op {
                TimerOp::Put(t) => store.put_timer(t).await,
                TimerOp::Delete(i, t) => store.delete_timer(&i, &t).await.map(|_| ()),
            }
        }))
        .await;
        for r in results {
            if let Err(e) = r {
                tracing::warn!(error = %e, message = "Timer table not updated");
            }
        }
    }

    /// Snapshot at `seq`, then drop the records it covers: one write, fenced by the lane's
    /// lease (`epoch`) like its appends, so a process that lost the instance can neither
    /// snapshot nor truncate the new owner's journal (`lease_lost` stops the lane).
    async fn compact(
        &self,
        name: &str,
        lane: &Arc<Lane>,
        epoch: u64,
        (seq, hash): (u64, weft_store::Hash),
        state: Vec<u8>,
    ) {
        let snap = Snapshot {
            seq,
            hash,
            state,
            at_ms: now_ms(),
        };
        let fence = weft_store::Fence {
            owner: self.owner.clone(),
            epoch,
        };
        match self.store.compact_fenced(name, &fence, snap).await {
            Ok(n) => {
                self.counters.snapshots.fetch_add(1, Ordering::Relaxed);
                self.counters.truncated.fetch_add(n, Ordering::Relaxed);
            }
            Err(e @ weft_store::Error::LeaseLost { .. }) => {
                self.lose(name, lane, &e.to_string());
            }
            Err(e) => {
                tracing::warn!(weft.instance = %name, error = %e, message = "Compaction failed")
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
                Some(_) if self.closed.load(Ordering::Relaxed) => {
                    s.failed = Some(format!(
                        "shut_down: the durable engine of {} was shut down; {instance} is not journaled",
                        self.owner
                    ));
                }
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
                    s.seq = Some(0);
                    // The lease is taken with the create, in the same write.
                    s.epoch = Some(1);
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
        let mut entry = Entry::from_input(&net, tenant, p.version, input);
        let origin = match input {
            Input::Start { .. } => START_ORIGIN
                .with(|c| c.borrow_mut().take())
                .map(|id| id.to_string()),
            Input::Token { .. } | Input::Stop { .. } if !s.origins.is_empty() => {
                Self::take_origin(&mut s, &entry)
            }
            _ => None,
        };
        if origin.is_some() {
            entry.set_request_id(origin);
        }
        self.push(&mut s, instance, &entry);
        if let Input::Repair(r) = input {
            s.repaired = Some(Arc::clone(&r.net));
        }
    }

    /// Writes what the instance recorded without waiting for it: nothing else would (its
    /// next dispatch may be a timer or an event away).
    fn idle(&self, _tenant: &str, instance: &str) {
        let Some(lane) = self.existing(instance) else {
            return;
        };
        let mut s = lock(&lane.st);
        if s.flushing || s.buf.is_empty() || s.failed.is_some() {
            return;
        }
        s.flushing = true;
        drop(s);
        if let Some(me) = self.me.upgrade() {
            me.enqueue(Arc::from(instance), lane);
        }
    }

    /// Records `action.dispatched` as [`Gate`]'s calls do (skipped for idempotent tools
    /// unless [`StoreJournal::set_record_idempotent_dispatch`] asked for it) and returns
    /// the lane's record count: the call waits until that many are durable.
    fn gate(
        &self,
        _tenant: &str,
        instance: &str,
        step: &str,
        firing: weft_core::token::FiringId,
        idempotent: bool,
    ) -> u64 {
        let d = Dispatch {
            step,
            firing,
            attempt: 1,
            idempotent,
        };
        self.push_dispatch(instance, d, || {
            weft_core::instance::idempotency_key(instance, step, firing)
        })
        .1
    }

    /// `StoreJournal::wait_lane` as a poll, for a gated call the runtime makes inline.
    fn poll_durable(
        &self,
        instance: &str,
        mark: u64,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Result<(), String>> {
        let Some(lane) = self.existing(instance) else {
            return Poll::Ready(Ok(()));
        };
        // A lost lease parks the call: another process owns the instance now, so the
        // action neither runs nor fails here (its outcome is the new owner's); the
        // instance is paused with `lease_lost`.
        self.poll_lane(instance, &lane, mark, true, cx)
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

impl StoreJournal {
    /// Publishes `ev` on the inner bus once every record its instance had recorded when it
    /// was published is durable (in order per instance); at once if they already are.
    fn publish_gated(&self, ev: CloudEvent) {
        let Some(bus) = self.bus.get() else { return };
        let lane = ev
            .instance
            .as_deref()
            .and_then(|i| Some((Arc::<str>::from(i), self.existing(i)?)));
        let Some((name, lane)) = lane else {
            bus.publish(ev);
            return;
        };
        let mut s = lock(&lane.st);
        if s.held.is_empty() && s.durable >= s.recorded {
            drop(s);
            bus.publish(ev);
            return;
        }
        let target = s.recorded;
        s.held.push_back((target, ev));
        // Write now rather than at the next dispatch, so the event is not late.
        if !s.flushing && !s.buf.is_empty() && s.failed.is_none() {
            s.flushing = true;
            drop(s);
            if let Some(me) = self.me.upgrade() {
                me.enqueue(name, lane);
            }
        }
    }
}

/// The bus of a durable engine: lifecycle events (`plan.started`, `plan.step.finished`,
/// `plan.completed`, …) reach subscribers only after the journal records they report are
/// durable, so nobody acts on an event whose cause a crash could undo. Events without an
/// instance pass at once.
pub struct GatedBus {
    inner: Arc<dyn Bus>,
    journal: Arc<StoreJournal>,
}

impl GatedBus {
    /// Gates `inner` on `journal`'s durability.
    pub fn new(inner: Arc<dyn Bus>, journal: Arc<StoreJournal>) -> Self {
        let _ = journal.bus.set(Arc::clone(&inner));
        GatedBus { inner, journal }
    }
}

impl Bus for GatedBus {
    fn publish(&self, event: CloudEvent) {
        self.journal.publish_gated(event);
    }
    fn subscribe(&self, filter: Filter) -> Subscription {
        self.inner.subscribe(filter)
    }
    fn wants(&self) -> bool {
        self.inner.wants()
    }
}

/// A tool of a durable engine: records `action.dispatched`, waits for the instance's
/// journal to be durable, then calls the real tool. A pure, idempotent, immediate tool can
/// be left ungated ([`crate::DurableConfig::gate_pure_actions`]): it is then called inline
/// at once, like in an engine without a journal. A gated immediate tool is called inline
/// too, but only once the journal is durable: the runtime records the dispatch and waits
/// through [`Journal::gate`] and [`Journal::poll_durable`] ([`Tool::waits_for_journal`]),
/// which saves the boxed future, the tool context and the task hop of [`Tool::call`]'s
/// path (that path remains for retries).
pub struct Gate {
    inner: Arc<dyn Tool>,
    journal: Arc<StoreJournal>,
    /// Called inline without waiting for the journal.
    ungated: bool,
    /// `inner` is immediate: the runtime calls it inline once the journal is durable
    /// ([`Tool::waits_for_journal`]), without a future or a context per call.
    immediate: bool,
}

impl Gate {
    /// Wraps `inner`; every call waits for the journal.
    pub fn new(inner: Arc<dyn Tool>, journal: Arc<StoreJournal>) -> Self {
        Gate::with_pure_ungated(inner, journal, false)
    }

    /// Wraps `inner`; with `pure_ungated`, a pure, idempotent, immediate `inner` is called
    /// without waiting for the journal.
    pub fn with_pure_ungated(
        inner: Arc<dyn Tool>,
        journal: Arc<StoreJournal>,
        pure_ungated: bool,
    ) -> Self {
        let spec = inner.spec();
        let immediate = inner.is_immediate();
        let ungated =
            pure_ungated && spec.effect == weft_core::Effect::Pure && spec.idempotent && immediate;
        Gate {
            inner,
            journal,
            ungated,
            immediate,
        }
    }
}

/// The journal gate as a link of the tool-call chain ([`weft_tools::Stage::Durability`]):
/// wraps every tool of the engine in a [`Gate`] on this journal.
pub(crate) struct GateLink {
    pub(crate) journal: Arc<StoreJournal>,
    /// A pure, idempotent, immediate tool is called without waiting for the journal.
    pub(crate) pure_ungated: bool,
}

impl weft_tools::Interceptor for GateLink {
    fn describe(&self) -> String {
        if self.pure_ungated {
            "journal gate (pure, idempotent, immediate tools ungated)".into()
        } else {
            "journal gate (every tool)".into()
        }
    }

    fn wrap(&self, tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
        Arc::new(Gate::with_pure_ungated(
            tool,
            Arc::clone(&self.journal),
            self.pure_ungated,
        ))
    }

    fn instance_only(&self) -> bool {
        true
    }
}

impl Gate {
    fn not_inline(&self) -> ToolError {
        ToolError::fatal(
            "not_immediate",
            format!(
                "tool `{}` waits for the journal: it cannot be called inline",
                self.inner.spec().name
            ),
        )
    }
}

impl Tool for Gate {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        self.inner.profile_needs()
    }

    fn is_immediate(&self) -> bool {
        self.ungated
    }

    fn waits_for_journal(&self) -> bool {
        !self.ungated && self.immediate
    }

    fn call_inline(
        &self,
        ctx: weft_tools::InlineContext<'_>,
        args: weft_tools::InlineArgs<'_>,
    ) -> Result<Value, ToolError> {
        // The runtime calls it for an ungated tool at once, and for one that waits for the
        // journal only after `Journal::gate` and once `Journal::poll_durable` said so.
        if !self.ungated && !self.immediate {
            return Err(self.not_inline());
        }
        self.inner.call_inline(ctx, args)
    }

    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        if !self.ungated {
            return Err(self.not_inline());
        }
        self.inner.call_now(ctx, args)
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let lane = self
            .journal
            .record_dispatch(&ctx, self.inner.spec().idempotent);
        let journal = Arc::clone(&self.journal);
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let name: Arc<str> = Arc::clone(&ctx.instance);
            if let Err(e) = journal.wait_lane(name, Arc::clone(&lane)).await {
                // Another process owns the instance now: the action neither runs nor
                // fails here (its outcome is the new owner's); the instance is paused
                // with `lease_lost`.
                if lock(&lane.st).lost {
                    return std::future::pending().await;
                }
                return Err(ToolError::fatal(
                    "journal_unavailable",
                    format!("the action was not dispatched: {e}"),
                ));
            }
            inner.call(ctx, args).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    use weft_runtime::Journal;

    use super::{StoreJournal, lock, snapshot_phase};

    /// `poll_durable` for the runtime's gated calls: an instance without a lane and a mark
    /// already reached are durable; a dispatch the store refuses for lack of a lease (no
    /// lease was ever taken here) loses the lane, and the call then waits for good instead
    /// of failing (its outcome is the new owner's); a journal shut down fails it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn poll_durable_follows_the_lane() {
        let dir = std::env::temp_dir().join(format!("weft-poll-durable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let store = weft_store_sqlite::SqliteStore::open(dir.join("weft.db"))
            .await
            .expect("store");
        let j = StoreJournal::new(
            Arc::new(store),
            tokio::runtime::Handle::current(),
            None,
            "me".into(),
            30_000,
        );
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(j.poll_durable("nobody", 5, &mut cx), Poll::Ready(Ok(())));
        // A non-idempotent dispatch is recorded: the mark moves past it.
        let mark = j.gate("t", "i1", "s", 0, false);
        assert_eq!(mark, 1);
        assert_eq!(j.poll_durable("i1", 0, &mut cx), Poll::Ready(Ok(())));
        assert_eq!(j.poll_durable("i1", mark, &mut cx), Poll::Pending);
        // The write is fenced with a lease this engine never took: the lane is lost.
        let lane = j.existing("i1").expect("lane");
        for _ in 0..1_000 {
            if lock(&lane.st).lost {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(lock(&lane.st).lost, "the unleased write was refused");
        assert_eq!(j.poll_durable("i1", mark, &mut cx), Poll::Pending);
        // An idempotent dispatch records nothing: the mark stays where it was.
        let mark2 = j.gate("t", "i2", "s", 0, true);
        assert_eq!(mark2, 0);
        assert_eq!(j.poll_durable("i2", mark2, &mut cx), Poll::Ready(Ok(())));
        lock(&j.existing("i2").expect("lane").st).failed = Some("shut_down: test".into());
        assert_eq!(
            j.poll_durable("i2", mark2, &mut cx),
            Poll::Ready(Err("shut_down: test".to_string()))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A hundred instances get phases spread over the first quarter of the interval.
    #[test]
    fn snapshot_phases_spread_instances_over_a_quarter_of_the_interval() {
        let hasher = std::collections::hash_map::RandomState::new();
        let phases: Vec<u64> = (0..100)
            .map(|i| snapshot_phase(hasher.hash_one(format!("t/r/{i}")), 1_000))
            .collect();
        assert!(phases.iter().all(|p| *p < 250), "{phases:?}");
        let distinct: std::collections::HashSet<u64> = phases.iter().copied().collect();
        assert!(distinct.len() >= 60, "{phases:?}");
        let (lo, hi) = (phases.iter().min(), phases.iter().max());
        assert!(lo < Some(&50) && hi > Some(&200), "{phases:?}");
        assert_eq!(snapshot_phase(u64::MAX, 1), 0);
        assert_eq!(snapshot_phase(7, 0), 0);
    }
}
