//! [`Durable`]: an [`Engine`] whose instances are journaled to a [`Store`], recovered after
//! a restart and resumable from checkpoints.

use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use weft_core::Status;
use weft_runtime::{CompiledPlan, Engine, EngineOptions, InstanceHandle, Outcome, Redispatch};
use weft_store::{InstanceRecord, InstanceStatus, NewRecord, Page, Store, now_ms};
use weft_tools::{Interceptor, Stage};

use crate::error::DurableError;
use crate::history::{self, PlanCache, read_range};
use crate::record::{Entry, Folded};
use crate::store_journal::{GateLink, GatedBus, PlanEntry, StoreJournal};

/// Pseudo-journal that reserves blocks of instance ids, so a restarted process never hands
/// out an id a previous one used.
const IDS_JOURNAL: &str = "weft.ids";
/// A new random key for opaque instance names, as hex.
fn new_id_key() -> Result<String, DurableError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| {
        DurableError::Store(weft_store::Error::backend(format!(
            "no randomness for the instance-name key: {e}"
        )))
    })?;
    Ok(key.iter().map(|b| format!("{b:02x}")).collect())
}

/// The key of [`new_id_key`] back from hex.
fn parse_id_key(hex: &str) -> Result<[u8; 32], DurableError> {
    let bad = || DurableError::Journal {
        message: format!("the instance-name key in `{IDS_JOURNAL}` is not 64 hex digits"),
    };
    let mut key = [0u8; 32];
    if hex.len() != 64 {
        return Err(bad());
    }
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
            .map_err(|_| bad())?;
    }
    Ok(key)
}

/// Ids reserved per process start.
const ID_BLOCK: u64 = 1 << 32;

/// Records between two snapshots of a reactive instance, by default: the journal it keeps
/// (and `inspect --at` can reach) is at most its last 100 records plus a snapshot. Short, so a
/// busy instance's records mostly die while they are still in the SQLite store's journal
/// log, which then drops them at its merge instead of moving them into the journal table
/// only to delete them there (figures: `docs/performance.md`, "Server event load").
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 100;

/// Durability settings.
#[derive(Debug, Clone)]
pub struct DurableConfig {
    /// Snapshot + compact a reactive instance's journal every this many records (`None`:
    /// never). Default [`DEFAULT_SNAPSHOT_EVERY`].
    pub snapshot_every: Option<u64>,
    /// Instances rebuilt concurrently by [`Durable::recover`]. Default 8 (the SQLite
    /// store keeps 8 idle read connections; more would open and close connections).
    pub recovery_concurrency: usize,
    /// Journal `action.dispatched` for idempotent tools too (default off: recovery does
    /// not need it for them; see [`StoreJournal::set_record_idempotent_dispatch`]).
    pub record_idempotent_dispatch: bool,
    /// This engine's lease owner id: every instance it drives is leased to it and every
    /// append is fenced by that lease. `None` (default): `$WEFT_OWNER`, else
    /// `weft-<host>/<pid>` (one owner per process; a restarted process on the same host
    /// takes the leases of its dead predecessor at once, see [`Durable::recover`]).
    pub owner: Option<String>,
    /// How long a lease lasts without renewal (default 30 s): after a crash, another
    /// process can take the instances over this long after the last renewal.
    pub lease_ttl_ms: i64,
    /// How often the leases are renewed (default 10 s; keep it well under the ttl).
    pub lease_renew_ms: u64,
    /// Wait for the journal before pure actions too (default off). A pure, idempotent,
    /// immediate tool (`noop`, `echo`, `bench.add`) has no effect outside its instance, so
    /// running it before the records of its firing are durable cannot be observed: its
    /// result goes to the same journal lane (usually the same commit as the input that
    /// enabled it), an effectful action after it still waits for everything before it,
    /// lifecycle events are published only once durable, and after a crash it runs again
    /// from the journal with the same result. Such an action is then called inline, with
    /// no task and no wait. W4 (BENCHMARKS.md) turns this on: its contract commits each
    /// step's result before the next step starts, whatever the step does.
    pub gate_pure_actions: bool,
}

impl Default for DurableConfig {
    fn default() -> Self {
        DurableConfig {
            snapshot_every: Some(DEFAULT_SNAPSHOT_EVERY),
            recovery_concurrency: 8,
            record_idempotent_dispatch: false,
            owner: None,
            lease_ttl_ms: 30_000,
            lease_renew_ms: 10_000,
            gate_pure_actions: false,
        }
    }
}

/// What [`Durable::recover`] did.
#[derive(Debug, Default, Serialize)]
pub struct RecoveryReport {
    /// Non-terminal instances found in the store.
    pub found: usize,
    /// Instances made live again.
    pub restored: usize,
    /// Instances whose journal showed them finished (only their status was updated).
    pub finished: usize,
    /// In-flight actions dispatched again with the same key.
    pub redispatched: usize,
    /// In-flight actions completed with `outcome_unknown`.
    pub unknown: usize,
    /// Pending timers re-armed (those already due fire at once, with their lateness).
    pub timers: usize,
    /// Rows of the store's timer table that belonged to no pending timer and were deleted.
    pub stale_timer_rows: usize,
    /// Instances skipped because another live owner leases them (another `weft` process
    /// drives them).
    pub leased_elsewhere: usize,
    /// Instances that could not be restored, with the error.
    pub errors: Vec<(String, String)>,
    /// Handles of the restored instances.
    #[serde(skip)]
    pub handles: Vec<InstanceHandle>,
}

/// A restored instance: its handle, what was done with its in-flight actions, how many
/// timers were re-armed.
type Restored = (InstanceHandle, Vec<Redispatch>, usize);

/// The timer-table rows of an instance's pending timers.
fn timer_rows(
    plan: &CompiledPlan,
    instance: &str,
    extras: &weft_runtime::Extras,
) -> Vec<(u64, weft_store::Timer)> {
    extras
        .timers
        .iter()
        .map(|(id, t)| {
            let event = plan
                .net
                .events
                .get(t.event as usize)
                .map_or("", |e| e.name.as_str());
            (
                *id,
                crate::store_journal::timer_row(
                    instance,
                    *id,
                    event,
                    &t.payload,
                    t.due_ms,
                    t.cron.as_deref(),
                    t.remaining,
                ),
            )
        })
        .collect()
}

/// A durable engine.
#[derive(Clone)]
pub struct Durable {
    engine: Engine,
    journal: Arc<StoreJournal>,
    store: Arc<dyn Store>,
    plans: Arc<PlanCache>,
    config: DurableConfig,
    gate: Arc<dyn Interceptor>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("backend", &self.store.backend())
            .finish_non_exhaustive()
    }
}

pub(crate) fn store_status(s: &Status) -> InstanceStatus {
    match s {
        Status::Running => InstanceStatus::Running,
        Status::Completed => InstanceStatus::Completed,
        Status::Waiting => InstanceStatus::Waiting,
        Status::Stuck => InstanceStatus::Stuck,
        Status::Failed { .. } => InstanceStatus::Failed,
        Status::Paused { .. } => InstanceStatus::Paused,
        Status::Stopped => InstanceStatus::Stopped,
    }
}

fn reason_of(s: &Status) -> Option<String> {
    match s {
        Status::Failed { reason } | Status::Paused { reason } => Some(reason.clone()),
        _ => None,
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && !h.contains('/'))
        .unwrap_or_else(|| "host".to_string())
}

/// `$WEFT_OWNER`, else `weft-<host>/<pid>`: one owner per process, so a process that
/// reopens a store (or a second engine in it) keeps its own leases.
fn default_owner() -> String {
    std::env::var("WEFT_OWNER")
        .ok()
        .filter(|o| !o.is_empty())
        .unwrap_or_else(|| format!("weft-{}/{}", hostname(), std::process::id()))
}

/// Owners among `owners` that are provably dead: a default owner id of this host whose
/// process no longer exists (`/proc/<pid>` gone; a killed `weft` restarted on the same
/// machine). Their leases are taken over at once instead of after their expiry. Where
/// `/proc` does not exist nothing is provably dead.
fn dead_owners(owners: Vec<String>) -> Vec<String> {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return Vec::new();
    }
    let prefix = format!("weft-{}/", hostname());
    let me = std::process::id();
    owners
        .into_iter()
        .filter(|o| {
            o.strip_prefix(&prefix)
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| pid != me && !process_alive(proc, pid))
        })
        .collect()
}

/// Does process `pid` exist and run (a zombie, killed but not yet reaped, does not)?
fn process_alive(proc: &std::path::Path, pid: u32) -> bool {
    match std::fs::read_to_string(proc.join(pid.to_string()).join("stat")) {
        // `pid (comm) S …`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

impl Durable {
    /// Builds a durable engine over `store`: the journal gate is installed at the
    /// durability stage of `opts.chain` (so every tool call waits for the journal) and
    /// `opts.journal` is replaced by the store journal. Reserves a block
    /// of instance ids. Call inside a tokio runtime. Does not recover anything: call
    /// [`Durable::recover`] after registering plans (or at once: recovery compiles the
    /// stored plan versions itself).
    pub async fn open(
        store: Arc<dyn Store>,
        mut opts: EngineOptions,
        config: DurableConfig,
    ) -> Result<Durable, DurableError> {
        let rt = opts
            .runtime
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
            .ok_or_else(|| DurableError::Unavailable {
                message: "the durable engine needs a tokio runtime".into(),
            })?;
        let owner = config.owner.clone().unwrap_or_else(default_owner);
        let journal = StoreJournal::new(
            Arc::clone(&store),
            rt.clone(),
            config.snapshot_every,
            owner,
            config.lease_ttl_ms,
        );
        // Renew the leases of every instance this engine drives until it is dropped.
        let weak = Arc::downgrade(&journal);
        let every = std::time::Duration::from_millis(config.lease_renew_ms.max(1));
        rt.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(j) = weak.upgrade() else { break };
                if j.is_shut_down() {
                    break;
                }
                j.renew_leases().await;
            }
        });
        journal.set_record_idempotent_dispatch(config.record_idempotent_dispatch);
        // The journal gate takes its stage in the engine's one tool-call chain.
        let gate: Arc<dyn Interceptor> = Arc::new(GateLink {
            journal: Arc::clone(&journal),
            pure_ungated: !config.gate_pure_actions && !config.record_idempotent_dispatch,
        });
        opts.chain.set(Stage::Durability, Arc::clone(&gate));
        opts.bus = Arc::new(GatedBus::new(Arc::clone(&opts.bus), Arc::clone(&journal)));
        opts.journal = Some(journal.clone() as Arc<dyn weft_runtime::Journal>);
        // `plan.run` by name finds the tenant's stored plans (history.rs, `StoredPlans`).
        opts.child_plans = Some(Arc::new(crate::history::StoredPlans {
            store: Arc::clone(&store),
            journal: Arc::downgrade(&journal),
            cache: crate::history::PlanCache::default(),
        }));
        let engine = Engine::new(opts);
        // A store that refuses writes pauses the instances it concerns; they resume when
        // the retried write succeeds.
        let weak = engine.downgrade();
        journal.set_listener(Arc::new(move |instance: &str, reason: Option<&str>| {
            let Some(e) = weak.upgrade() else {
                return false;
            };
            match reason {
                Some(r) => e.pause(instance, r).is_ok(),
                None => {
                    let ours = e.state(instance).is_ok_and(|st| {
                        matches!(&st.status, Status::Paused { reason } if reason.starts_with("store_unavailable"))
                    });
                    ours && e.resume(instance).is_ok()
                }
            }
        }));
        // Reserve a block of ids: the head record of the ids journal says where the last
        // process's block ended, and holds the key of opaque instance names (made by the
        // first process on this store; ids reserved before it existed keep `i<n>`).
        let head = match store.head(IDS_JOURNAL).await? {
            None => None,
            Some((seq, _)) => {
                let r = store.read(IDS_JOURNAL, seq, 1).await?;
                r.first().and_then(|r| r.json::<Value>().ok())
            }
        };
        let field = |k: &str| head.as_ref().and_then(|v| v.get(k));
        let next = field("next").and_then(Value::as_u64).unwrap_or(0);
        let (key, opaque_from) = match (field("key").and_then(Value::as_str), field("opaque_from"))
        {
            (Some(k), Some(f)) => (k.to_string(), f.as_u64().unwrap_or(0)),
            _ => (new_id_key()?, next),
        };
        let end = next.saturating_add(ID_BLOCK);
        store
            .append(
                IDS_JOURNAL,
                vec![NewRecord::json(
                    "ids.reserved",
                    &serde_json::json!({"from": next, "next": end, "key": key, "opaque_from": opaque_from}),
                    now_ms(),
                )?],
            )
            .await?;
        engine.reserve_ids(next);
        engine.set_id_names(weft_runtime::IdNames::opaque(
            parse_id_key(&key)?,
            opaque_from,
        ));
        Ok(Durable {
            engine,
            journal,
            store,
            plans: Arc::new(PlanCache::default()),
            config,
            gate,
        })
    }

    /// Graceful shutdown: makes everything recorded so far durable and writes the queued
    /// instance statuses (as [`Durable::flush`]), stops driving this engine's instances
    /// (each is paused here with `shut_down: …`; they stay as they are in the store) and
    /// releases their leases, so another process's [`Durable::recover`] takes them over
    /// at once instead of waiting for the lease expiry. Instances started afterwards are
    /// not journaled. Returns how many leases were released. (Without it, a stopped
    /// process's instances wait for expiry, or for a restart on the same host, which sees
    /// that the process that held them is dead.)
    pub async fn shutdown(&self) -> Result<usize, DurableError> {
        self.journal.shut_down().await
    }

    /// Waits until everything recorded so far is durable and every instance status that
    /// [`Durable::wait`] queued so far is written to the instance records: what a process
    /// calls before it exits when the store's statuses must be current (the journal is
    /// durable without it, and the next recovery sets the statuses from it).
    /// [`Durable::shutdown`] does it too.
    pub async fn flush(&self) -> Result<(), DurableError> {
        self.journal.flush().await
    }

    /// The engine (for ingest, subscribe, state, …).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The journal gate this engine installed at the durability stage of its chain.
    pub fn gate_link(&self) -> Arc<dyn Interceptor> {
        Arc::clone(&self.gate)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The journal (for its counters).
    pub fn journal(&self) -> &Arc<StoreJournal> {
        &self.journal
    }

    /// Validates, stores (a new version unless the latest stored one is identical) and
    /// registers a plan document for `tenant`.
    pub async fn register(
        &self,
        tenant: &str,
        doc: Value,
    ) -> Result<Arc<CompiledPlan>, DurableError> {
        let compiled = self.engine.compile_value(doc.clone())?;
        let name = compiled.name.to_string();
        let version = match self.store.get_plan(tenant, &name, None).await? {
            Some(p) if p.document == doc => p.info.version,
            _ => self.store.put_plan(tenant, &name, doc, now_ms()).await?,
        };
        let registered = self.engine.register((*compiled.plan).clone())?;
        self.journal.add_plan(Arc::clone(&registered), version);
        Ok(registered)
    }

    /// Starts an instance of a registered plan. Its first effect is dispatched only after
    /// its start is durable.
    pub fn start(
        &self,
        tenant: &str,
        plan: &str,
        input: Value,
    ) -> Result<InstanceHandle, DurableError> {
        Ok(self.engine.start(tenant, plan, input)?)
    }

    /// Starts an instance of an already compiled plan stored as `version` for `tenant`
    /// (the HTTP server keeps plans per tenant and version instead of registering them by
    /// name). The journal records the instance under that version. Starts of one plan name
    /// in different versions or tenants must not run concurrently (the journal looks the
    /// version up by name while recording the start): callers serialize them. Refused as
    /// [`weft_runtime::Engine::start_with`] refuses an input.
    pub fn start_compiled(
        &self,
        tenant: &str,
        plan: &Arc<CompiledPlan>,
        version: u32,
        input: Value,
        opts: weft_runtime::StartOptions,
    ) -> Result<InstanceHandle, weft_runtime::Error> {
        self.journal.add_plan(Arc::clone(plan), version);
        self.engine.start_with(tenant, plan, input, opts)
    }

    /// [`Durable::start_compiled`] with the `X-Request-Id` of the request that asked for it,
    /// written on the `instance.started` record.
    pub fn start_compiled_with(
        &self,
        tenant: &str,
        plan: &Arc<CompiledPlan>,
        version: u32,
        input: Value,
        opts: weft_runtime::StartOptions,
        request_id: Option<&str>,
    ) -> Result<InstanceHandle, weft_runtime::Error> {
        match request_id {
            Some(r) => self.journal.with_start_origin(r, || {
                self.start_compiled(tenant, plan, version, input, opts)
            }),
            None => self.start_compiled(tenant, plan, version, input, opts),
        }
    }

    /// `Engine::ingest` with the `X-Request-Id` of the request that sent the event, written
    /// on the `token.added` record of every instance it reaches. Ingests of one request id
    /// into one instance are recorded in order with their ids; concurrent ingests into the
    /// same instance wait for each other's hand-over (not for each other's processing).
    pub fn ingest_with(
        &self,
        tenant: &str,
        event: &str,
        payload: Value,
        correlation: Option<&str>,
        instance: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<usize, weft_runtime::Error> {
        let Some(r) = request_id else {
            return self
                .engine
                .ingest(tenant, event, payload, correlation, instance);
        };
        let (one, routed, refs): ([&str; 1], Vec<String>, Vec<&str>);
        let targets: &[&str] = match instance {
            Some(i) => {
                one = [i];
                &one
            }
            None => {
                routed = self.engine.routed_instances(tenant, event);
                refs = routed.iter().map(String::as_str).collect();
                &refs
            }
        };
        self.journal.with_origin(targets, Some(event), r, || {
            let out = self
                .engine
                .ingest(tenant, event, payload, correlation, instance);
            let submitted = matches!(out, Ok(n) if n > 0);
            (out, submitted)
        })
    }

    /// [`Engine::ingest_batch`] (all or nothing) with the `X-Request-Id` of the request that
    /// carried the batch written on the records it causes.
    pub fn ingest_batch_with(
        &self,
        tenant: &str,
        events: Vec<weft_runtime::BatchEvent>,
        request_id: Option<&str>,
    ) -> Result<Vec<usize>, (usize, weft_runtime::Error)> {
        let Some(r) = request_id else {
            return self.engine.ingest_batch(tenant, events);
        };
        let mut deliveries: Vec<(String, String)> = Vec::new();
        for e in &events {
            match &e.instance {
                Some(i) => deliveries.push((i.clone(), e.event.clone())),
                None => deliveries.extend(
                    self.engine
                        .routed_instances(tenant, &e.event)
                        .into_iter()
                        .map(|i| (i, e.event.clone())),
                ),
            }
        }
        let refs: Vec<(&str, &str)> = deliveries
            .iter()
            .map(|(i, e)| (i.as_str(), e.as_str()))
            .collect();
        self.journal.with_origins(&refs, r, || {
            let out = self.engine.ingest_batch(tenant, events);
            let submitted = matches!(&out, Ok(n) if n.iter().any(|n| *n > 0));
            (out, submitted)
        })
    }

    /// Stops a live instance, with the `X-Request-Id` of the request that asked for it
    /// written on its `instance.stopped` record.
    pub fn stop_with(&self, h: &InstanceHandle, request_id: Option<&str>) {
        match request_id {
            Some(r) => self
                .journal
                .with_origin(&[h.id()], None, r, || (h.stop(), true)),
            None => h.stop(),
        }
    }

    /// Waits until the instance settles, then until its journal is durable, and returns
    /// its outcome; the instance record's status goes with the journal's next batch
    /// (recovery repairs it if the process dies first; [`Durable::flush`] waits for it).
    pub async fn wait(&self, h: &InstanceHandle) -> Result<Outcome, DurableError> {
        settle(&self.journal, h).await
    }

    /// [`Durable::wait`], then [`Durable::flush`]: the instance record's status is written
    /// too, for a process about to exit (the CLI's `run --store`, `resume`, `repair`).
    pub async fn wait_written(&self, h: &InstanceHandle) -> Result<Outcome, DurableError> {
        let o = self.wait(h).await?;
        self.flush().await?;
        Ok(o)
    }

    /// Rebuilds every non-terminal instance of the store (snapshot + journal tail, read in
    /// batches with `Store::load_many`) and continues it (see
    /// `weft_runtime::Engine::restore` for in-flight actions).
    pub async fn recover(&self) -> Result<RecoveryReport, DurableError> {
        const BATCH: usize = 500;
        const RESTORING: usize = 4;
        type Batch = Vec<(String, Result<Option<Restored>, DurableError>)>;
        fn tally(report: &mut RecoveryReport, done: Result<Batch, tokio::task::JoinError>) {
            let done = match done {
                Ok(d) => d,
                Err(e) => {
                    report.errors.push((
                        "(recovery task)".into(),
                        format!("a restore task failed: {e}"),
                    ));
                    return;
                }
            };
            for (id, res) in done {
                match res {
                    Ok(Some((h, actions, timers))) => {
                        report.restored += 1;
                        report.timers += timers;
                        for a in actions {
                            match a {
                                Redispatch::Again { .. } => report.redispatched += 1,
                                Redispatch::Unknown { .. } => report.unknown += 1,
                            }
                        }
                        report.handles.push(h);
                    }
                    Ok(None) => report.finished += 1,
                    Err(e) => report.errors.push((id, e.to_string())),
                }
            }
        }
        let mut restoring = std::collections::VecDeque::new();
        let mut report = RecoveryReport::default();
        let mut page = Page::first(10_000);
        let dead = Arc::new(dead_owners(self.store.lease_owners(now_ms()).await?));
        if !dead.is_empty() {
            tracing::info!(owners = ?dead, message = "Taking over the leases of dead processes");
        }
        loop {
            let recs = self.store.non_terminal_instances(page.clone()).await?;
            let Some(last) = recs.last() else { break };
            page.after = Some(last.id.clone());
            let full = recs.len() == 10_000;
            report.found += recs.len();
            // Instances this engine drives already are not restored twice.
            let todo: Vec<InstanceRecord> = recs
                .into_iter()
                .filter(|r| self.engine.handle(&r.id).is_none())
                .collect();
            // Lease first, the whole page in one write (one commit): what another live
            // owner drives is not touched.
            let ids: Vec<String> = todo.iter().map(|r| r.id.clone()).collect();
            let epochs = self
                .store
                .acquire_leases(
                    &ids,
                    self.journal.owner(),
                    self.journal.lease_ttl_ms(),
                    now_ms(),
                    &dead,
                )
                .await?;
            let mut mine: Vec<(InstanceRecord, u64)> = Vec::with_capacity(todo.len());
            for (r, e) in todo.into_iter().zip(epochs) {
                match e {
                    Some(e) => mine.push((r, e)),
                    None => report.leased_elsewhere += 1,
                }
            }
            let batches: Vec<Vec<(InstanceRecord, u64)>> =
                mine.chunks(BATCH).map(<[_]>::to_vec).collect();
            let mut loads = futures::stream::iter(batches.into_iter().map(|batch| {
                let store = Arc::clone(&self.store);
                async move {
                    let ids: Vec<String> = batch.iter().map(|(r, _)| r.id.clone()).collect();
                    let loaded = store.load_many(&ids).await;
                    (batch, loaded)
                }
            }))
            .buffered(self.config.recovery_concurrency.max(1));
            while let Some((batch, loaded)) = loads.next().await {
                let loaded = match loaded {
                    Ok(l) => l,
                    Err(e) => {
                        for (r, _) in batch {
                            report.errors.push((r.id, e.to_string()));
                        }
                        continue;
                    }
                };
                // Restore each loaded batch on its own task, so folding and rebuilding
                // use every worker thread (at most RESTORING batches at once).
                if restoring.len() >= RESTORING
                    && let Some(t) = restoring.pop_front()
                {
                    tally(&mut report, t.await);
                }
                let me = self.clone();
                restoring.push_back(tokio::spawn(async move {
                    let mut out = Vec::with_capacity(batch.len());
                    for ((rec, epoch), (snap, records)) in batch.into_iter().zip(loaded) {
                        let id = rec.id.clone();
                        out.push((id, me.restore_loaded(rec, epoch, snap, records).await));
                    }
                    out
                }));
            }
            while let Some(t) = restoring.pop_front() {
                tally(&mut report, t.await);
            }
            if !full {
                break;
            }
        }
        report.stale_timer_rows = self.sweep_timer_rows(&dead).await?;
        Ok(report)
    }

    /// Deletes timer-table rows that no pending timer of this process owns (their instance
    /// ended, or the timer fired before the row's deletion was written), except rows of
    /// instances another live owner leases (that process keeps them; `dead` owners'
    /// leases do not count). Walks the whole
    /// table with a keyset cursor, 10,000 rows per page.
    async fn sweep_timer_rows(&self, dead: &[String]) -> Result<usize, DurableError> {
        const PAGE: u32 = 10_000;
        let mut deleted = 0;
        let mut after: Option<(String, String)> = None;
        let now = now_ms();
        loop {
            let rows = self.store.list_timers(after.clone(), PAGE).await?;
            let Some(last) = rows.last() else { break };
            after = Some((last.instance.clone(), last.timer_id.clone()));
            let full = rows.len() == PAGE as usize;
            let mut foreign: std::collections::HashMap<String, bool> =
                std::collections::HashMap::new();
            for t in rows {
                if self.journal.has_timer(&t.instance, &t.timer_id) {
                    continue;
                }
                let theirs = match foreign.get(&t.instance) {
                    Some(b) => *b,
                    None => {
                        let b = self
                            .store
                            .owner_of(&t.instance, now)
                            .await?
                            .is_some_and(|l| {
                                l.owner != self.journal.owner() && !dead.contains(&l.owner)
                            });
                        foreign.insert(t.instance.clone(), b);
                        b
                    }
                };
                if !theirs && self.store.delete_timer(&t.instance, &t.timer_id).await? {
                    deleted += 1;
                }
            }
            if !full {
                break;
            }
        }
        Ok(deleted)
    }

    async fn restore_loaded(
        &self,
        rec: InstanceRecord,
        epoch: u64,
        snap: Option<weft_store::Snapshot>,
        records: Vec<weft_store::Record>,
    ) -> Result<Option<Restored>, DurableError> {
        let plan = self
            .plans
            .get(self.store.as_ref(), &self.engine, &rec)
            .await?;
        let folded = history::fold_loaded(&plan, &rec.id, snap.as_ref(), &records, |_, _, _| {})?;
        self.restore_folded(rec, epoch, plan, folded).await
    }

    /// Rebuilds one instance and makes it live; `None` if it turned out finished.
    async fn restore_one(
        &self,
        rec: InstanceRecord,
        upto: Option<u64>,
    ) -> Result<Option<Restored>, DurableError> {
        let epoch = self.lease(&rec.id).await?;
        let plan = self
            .plans
            .get(self.store.as_ref(), &self.engine, &rec)
            .await?;
        let folded =
            history::rebuild(self.store.as_ref(), &plan, &rec.id, upto, |_, _, _| {}).await?;
        self.restore_folded(rec, epoch, plan, folded).await
    }

    /// Takes the lease of `instance` for this engine: its epoch, or `leased_elsewhere` if
    /// another live owner holds it.
    async fn lease(&self, instance: &str) -> Result<u64, DurableError> {
        let owner = self.journal.owner();
        let dead = match self.store.owner_of(instance, now_ms()).await? {
            Some(l) if l.owner != owner => dead_owners(vec![l.owner]),
            _ => Vec::new(),
        };
        let got = self
            .store
            .acquire_leases(
                &[instance.to_string()],
                owner,
                self.journal.lease_ttl_ms(),
                now_ms(),
                &dead,
            )
            .await?;
        match got.first().copied().flatten() {
            Some(epoch) => Ok(epoch),
            None => {
                let holder = self.store.owner_of(instance, now_ms()).await?;
                Err(DurableError::Leased {
                    message: match holder {
                        Some(l) => format!(
                            "{instance} is leased by `{}` (epoch {}) until {} ms; that process drives it (this one is `{owner}`)",
                            l.owner, l.epoch, l.expires_at_ms
                        ),
                        None => format!("{instance} is leased by another process"),
                    },
                })
            }
        }
    }

    async fn restore_folded(
        &self,
        rec: InstanceRecord,
        epoch: u64,
        plan: Arc<CompiledPlan>,
        mut folded: Folded,
    ) -> Result<Option<Restored>, DurableError> {
        let Some(inst) = folded.instance.take() else {
            // Started but the start never became durable: nothing ran; drop it.
            self.journal
                .set_status(
                    &rec.id,
                    InstanceStatus::Failed,
                    Some("its start was never durable".into()),
                )
                .await?;
            return Ok(None);
        };
        if inst.status.is_terminal() {
            // Its pending timers never fire: drop their rows (through the lane).
            self.journal.adopt(
                &rec.id,
                PlanEntry {
                    plan: Arc::clone(&plan),
                    version: rec.plan_version,
                },
                None,
                &timer_rows(&plan, &rec.id, &folded.extras),
                folded.seq,
                epoch,
            );
            self.journal.forget(&rec.id);
            self.journal
                .set_status(&rec.id, store_status(&inst.status), reason_of(&inst.status))
                .await?;
            return Ok(None);
        }
        // A repaired instance continues on its revised plan, checked against this
        // engine's tools.
        let plan = match &folded.repaired {
            Some(r) => self
                .engine
                .compile_value_for(&rec.tenant, r.document.clone())?,
            None => plan,
        };
        let dispatched = std::mem::take(&mut folded.dispatched);
        let extras = std::mem::take(&mut folded.extras);
        let shadow = (plan.net.graph_type == weft_core::GraphType::Reactive
            && self.config.snapshot_every.is_some())
        .then(|| Folded {
            instance: Some(inst.clone()),
            dispatched: dispatched.clone(),
            seq: folded.seq,
            extras: extras.clone(),
            repaired: folded.repaired.clone(),
            net: folded.net.clone(),
        });
        let rows = timer_rows(&plan, &rec.id, &extras);
        self.journal.adopt(
            &rec.id,
            PlanEntry {
                plan: Arc::clone(&plan),
                version: rec.plan_version,
            },
            shadow,
            &rows,
            folded.seq,
            epoch,
        );
        let repairs = folded.repaired.as_ref().map_or(0, |r| r.version);
        // Read off the folded instance (a live `state()` per restored instance would copy
        // its whole marking).
        let store_paused = matches!(&inst.status, Status::Paused { reason } if reason.starts_with("store_unavailable"));
        let (h, actions) =
            self.engine
                .restore_with(&rec.tenant, &plan, inst, &dispatched, &extras)?;
        h.set_repairs_used(repairs);
        let timers = rows.len();
        // Paused because the store refused writes before the restart: it takes them now
        // (it was just read), so the pause has no reason left.
        if store_paused {
            self.engine.resume(h.id())?;
        }
        // The journal is the truth; the rows may lag it by a crash: put them again.
        for (_, t) in rows {
            self.store.put_timer(t).await?;
        }
        Ok(Some((h, actions, timers)))
    }

    /// Makes `instance` live again from its journal head without resuming it: a paused
    /// instance stays paused (e.g. for `weft repair`). Returns the live handle.
    pub async fn restore(&self, instance: &str) -> Result<InstanceHandle, DurableError> {
        if let Some(h) = self.engine.handle(instance) {
            return Ok(h);
        }
        let rec = history::instance_record(self.store.as_ref(), instance).await?;
        self.restore_one(rec, None)
            .await?
            .map(|(h, _, _)| h)
            .ok_or_else(|| DurableError::NotFound {
                what: format!("{instance} has finished; nothing to restore"),
            })
    }

    /// Makes `instance` live again. Without `from`, from its journal head (a paused instance
    /// is also resumed). With `from = cp-…` naming an earlier point, the journal up to that
    /// point is copied to a new instance (`weft resume --from` forks; the original journal
    /// is never rewritten) and that one continues. Returns the live handle.
    pub async fn resume(
        &self,
        instance: &str,
        from: Option<&str>,
    ) -> Result<InstanceHandle, DurableError> {
        let rec = history::instance_record(self.store.as_ref(), instance).await?;
        let head = self.store.last_seq(instance).await?;
        let at = match from {
            Some(cp) => history::checkpoint_seq(self.store.as_ref(), instance, cp).await?,
            None => head,
        };
        if at == head {
            if let Some(h) = self.engine.handle(instance) {
                self.engine.resume(instance)?;
                return Ok(h);
            }
            let restored = self.restore_one(rec, None).await?;
            let Some((h, _, _)) = restored else {
                return Err(DurableError::NotFound {
                    what: format!("{instance} has finished; nothing to resume"),
                });
            };
            if matches!(h.state().status, Status::Paused { .. }) {
                self.engine.resume(instance)?;
            }
            return Ok(h);
        }
        // Fork: copy records 1..=at under a new id.
        let (base, _) = self.store.chain_base(instance).await?;
        if base > 0 {
            return Err(DurableError::NotFound {
                what: format!(
                    "the journal of {instance} was compacted up to seq {base}; it can only be resumed from its head"
                ),
            });
        }
        let records = read_range(self.store.as_ref(), instance, 1, Some(at)).await?;
        let new_id = self.engine.allocate_id();
        let mut copy = Vec::with_capacity(records.len());
        for r in &records {
            // Entries are re-encoded unchanged; only the chain is new.
            let e = Entry::from_record(r)?;
            copy.push(e.to_record(r.at_ms));
        }
        let mut new_rec = rec.clone();
        new_rec.id = new_id.clone();
        new_rec.status = InstanceStatus::Running;
        new_rec.parent = Some(instance.to_string());
        new_rec.created_at_ms = now_ms();
        new_rec.updated_at_ms = new_rec.created_at_ms;
        self.store.create_instance(new_rec.clone()).await?;
        self.store.append(&new_id, copy).await?;
        let restored = self.restore_one(new_rec, None).await?;
        restored
            .map(|(h, _, _)| h)
            .ok_or_else(|| DurableError::NotFound {
                what: format!("{instance} at {} has finished; nothing to resume", at),
            })
    }

    /// The folded state of an instance from the store (for tests: replay equality).
    pub async fn folded(&self, instance: &str) -> Result<Folded, DurableError> {
        let rec = history::instance_record(self.store.as_ref(), instance).await?;
        let plan = self
            .plans
            .get(self.store.as_ref(), &self.engine, &rec)
            .await?;
        history::rebuild(self.store.as_ref(), &plan, instance, None, |_, _, _| {}).await
    }
}

/// [`Durable::wait`]: the outcome once the instance settled and its journal is durable, its
/// status queued for the instance record.
async fn settle(journal: &Arc<StoreJournal>, h: &InstanceHandle) -> Result<Outcome, DurableError> {
    let o = h.wait().await;
    journal.barrier(h.id()).await?;
    let status = store_status(&o.status);
    let reason = o.reason.clone().or_else(|| reason_of(&o.status));
    if status.is_terminal() {
        journal.forget(h.id());
    }
    journal.queue_status(h.id(), status, reason);
    Ok(o)
}

/// Writes a child instance's status to its record each time it settles, until it is
/// terminal (a child has no front end following it, as the server follows the instances
/// it starts): a settled but live child (waiting, stuck, paused) is looked at again every
/// 50 ms, backing off to 5 s, until its status moves.
pub(crate) fn follow_child(journal: std::sync::Weak<StoreJournal>, h: InstanceHandle) {
    tokio::spawn(async move {
        loop {
            let Some(j) = journal.upgrade() else { return };
            let o = match settle(&j, &h).await {
                Ok(o) => o,
                Err(e) => {
                    tracing::warn!(weft.instance = %h.id(), error = %e, message = "Child status not written");
                    return;
                }
            };
            drop(j);
            if o.status.is_terminal() {
                return;
            }
            let settled = o.status.name();
            let mut every = std::time::Duration::from_millis(50);
            while h.state().status.name() == settled {
                tokio::time::sleep(every).await;
                every = (every * 2).min(std::time::Duration::from_secs(5));
            }
        }
    });
}
