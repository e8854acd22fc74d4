//! The engine service (STYLE §9): [`EngineOptions`] → [`Engine::new`] → a cheap-clone
//! [`Engine`] handle. It owns the registered plans, the table of live instances, the routing
//! index from (tenant, event name) to the instances waiting on it, the timer service and the
//! bus, and hands out [`InstanceHandle`]s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;
use weft_core::schema::Mismatch;
use weft_core::{EventId, EventKind, Limits, Plan};
use weft_tools::{Chain, Registry, TenantTools};

use crate::Error;
use crate::bus::{Bus, CloudEvent, Filter, InProcessBus, Subscription};
use crate::cell::{Cell, lock};
use crate::clock::{Clock, SystemClock, rfc3339};
use crate::journal_hook::{Input, Journal};
use crate::outcome::{Outcome, StateSnapshot};
use crate::plans::CompiledPlan;
use crate::repair_loop::Repairer;
use crate::routes::Routes;
use crate::timers::{TimerEntry, TimerKind, Timers};

/// Computes the next due time (epoch ms) of a cron expression after `after_ms`.
pub type CronNext = Arc<dyn Fn(&str, i64) -> Option<i64> + Send + Sync>;

/// How to build an engine.
#[derive(Clone)]
pub struct EngineOptions {
    /// Tools steps can call (also the catalog plans are validated against). Default:
    /// none; the assembly point (`weft-node`) registers the built-in and configured tools.
    pub registry: Arc<Registry>,
    /// The interceptors every call of every tool of `registry` passes, applied once when
    /// the engine is built (`weft_tools::chain`). Default: none.
    pub chain: Chain,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Where lifecycle events go.
    pub bus: Arc<dyn Bus>,
    /// Receives every instance input (none by default).
    pub journal: Option<Arc<dyn Journal>>,
    /// Plan loading limits.
    pub limits: Limits,
    /// Validate actions and literal args against the registry at registration (default on;
    /// off resolves tools at run time, where an unknown one is an `unknown_tool` error).
    pub check_tools: bool,
    /// Reactive instances firing more than this many steps within one second are paused.
    pub max_firings_per_sec: Option<u64>,
    /// Reactive instances with no input for this long are stopped.
    pub idle_expiry_ms: Option<u64>,
    /// Next-occurrence function for repeating (`cron`) timers; without it they fire once.
    /// Default: none; the assembly point installs `weft_builtins::timer::next_occurrence`
    /// (croner, UTC).
    pub cron: Option<CronNext>,
    /// Record a trace of firings for every instance.
    pub trace: bool,
    /// Runtime for instance and timer tasks (default: the runtime `Engine::new` runs in).
    pub runtime: Option<tokio::runtime::Handle>,
    /// Makes revised plans for `on_fail: repair` (`None`: such a failure pauses the
    /// instance until someone resumes or repairs it by hand).
    pub repairer: Option<Arc<dyn Repairer>>,
    /// Also ask the repairer when an acyclic instance gets stuck (default off).
    pub repair_stuck: bool,
    /// Most repairs one instance may ask for; one more fails it (default 2).
    pub max_repairs: u32,
    /// The tools tenants declared for themselves: a tenant's plans compile against
    /// `registry` overlaid with its own (wrapped by the same chain). Default: none.
    pub tenant_tools: Option<Arc<dyn TenantTools>>,
    /// Where `plan.run` finds a child plan by name, per tenant, before the plans registered
    /// with the engine (the durable engine's plan store). Default: none.
    pub child_plans: Option<Arc<dyn crate::services::ChildPlans>>,
    /// The operator's budgets: limits of instances whose plans set none, quotas shared per
    /// plan and per tenant, and whether a call over a budget fails or pauses its instance
    /// (`quota.rs`). They are counted at the chain's budget stage, which the assembly point
    /// fills for every tool when they are set. Default: none.
    pub quotas: Option<Arc<crate::quota::Quotas>>,
}

impl std::fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptions")
            .field("check_tools", &self.check_tools)
            .field("max_firings_per_sec", &self.max_firings_per_sec)
            .field("idle_expiry_ms", &self.idle_expiry_ms)
            .finish_non_exhaustive()
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            registry: Arc::new(Registry::new()),
            chain: Chain::new(),
            clock: Arc::new(SystemClock),
            bus: Arc::new(InProcessBus::default()),
            journal: None,
            limits: Limits::default(),
            check_tools: true,
            max_firings_per_sec: Some(10_000),
            idle_expiry_ms: None,
            cron: None,
            trace: false,
            runtime: None,
            repairer: None,
            repair_stuck: false,
            max_repairs: 2,
            tenant_tools: None,
            child_plans: None,
            quotas: None,
        }
    }
}

/// One event of [`Engine::ingest_batch`].
#[derive(Debug, Clone)]
pub struct BatchEvent {
    /// The event name (the CloudEvent's `type`).
    pub event: String,
    /// Its payload.
    pub payload: Value,
    /// The correlation it carries, if any.
    pub correlation: Option<String>,
    /// The instance it is addressed to; `None` routes it by (tenant, event).
    pub instance: Option<String>,
}

/// Per-start options.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Record a trace of firings (for `weft run`).
    pub trace: bool,
    /// How deep in child plans the instance starts (`plan.run` sets its parent's plus one;
    /// [`weft_core::Limits::max_child_depth`] bounds it).
    pub depth: u32,
}

const SHARDS: usize = 16;

/// One shard of the instance table, by id.
type CellMap = HashMap<u64, Arc<Cell>, foldhash::fast::RandomState>;

/// What one tenant's plans compile against: the engine's tools overlaid with the tenant's
/// own, and the argument validators of that set.
struct TenantView {
    /// The tenant's tools as [`TenantTools`] gave them (the view is rebuilt when they change).
    own: Arc<Registry>,
    /// The engine's wrapped tools overlaid with the tenant's, wrapped by the same chain.
    registry: Arc<Registry>,
    /// The same, unwrapped (for steps with links of their own).
    raw: Arc<Registry>,
    validators: Mutex<HashMap<String, Option<Arc<weft_core::schema::Schema>>>>,
}

/// State shared by the engine handle, instances and the timer task.
pub(crate) struct Shared {
    pub registry: Arc<Registry>,
    /// The tools as registered, before the chain.
    raw_registry: Arc<Registry>,
    chain: Chain,
    tenant_tools: Option<Arc<dyn TenantTools>>,
    tenant_views: Mutex<HashMap<String, Arc<TenantView>>>,
    pub child_plans: Option<Arc<dyn crate::services::ChildPlans>>,
    pub quotas: Option<Arc<crate::quota::Quotas>>,
    pub clock: Arc<dyn Clock>,
    pub bus: Arc<dyn Bus>,
    pub journal: Option<Arc<dyn Journal>>,
    pub limits: Limits,
    pub check_tools: bool,
    pub max_firings_per_sec: Option<u64>,
    pub idle_expiry_ms: Option<u64>,
    pub cron: Option<CronNext>,
    pub trace: bool,
    pub repairer: Option<Arc<dyn Repairer>>,
    pub repair_stuck: bool,
    pub max_repairs: u32,
    runtime: Option<tokio::runtime::Handle>,
    plans: RwLock<HashMap<String, Arc<CompiledPlan>>>,
    validators: Mutex<HashMap<String, Option<Arc<weft_core::schema::Schema>>>>,
    table: Vec<Mutex<CellMap>>,
    routes: Mutex<Routes>,
    pub(crate) next_id: AtomicU64,
    /// How instances are named (`i<n>` until a durable node sets opaque names).
    pub(crate) ids: std::sync::OnceLock<crate::IdNames>,
    event_seq: AtomicU64,
    pub timers: Timers,
}

impl Shared {
    pub(crate) fn runtime(&self) -> Option<tokio::runtime::Handle> {
        tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
    }

    fn shard(&self, id: u64) -> &Mutex<CellMap> {
        &self.table[(id as usize) % SHARDS]
    }

    /// How this engine names instances.
    pub(crate) fn ids(&self) -> &crate::IdNames {
        static READABLE: crate::IdNames = crate::IdNames::readable();
        self.ids.get().unwrap_or(&READABLE)
    }

    pub(crate) fn cell(&self, id: u64) -> Option<Arc<Cell>> {
        lock(self.shard(id)).get(&id).cloned()
    }

    /// Adds a live instance running `plan` (its current plan) to the table and the routing
    /// index.
    pub(crate) fn register_cell(self: &Arc<Self>, cell: &Arc<Cell>, plan: &CompiledPlan) {
        lock(self.shard(cell.id)).insert(cell.id, Arc::clone(cell));
        if !plan.inputs.is_empty() {
            lock(&self.routes).insert(&cell.tenant, &plan.inputs, cell.id);
        }
        if let Some(ms) = self.idle_expiry_ms
            && plan.net.graph_type == weft_core::GraphType::Reactive
        {
            self.schedule_expiry(cell, self.clock.now_ms().saturating_add(ms as i64));
        }
    }

    /// Removes an ended instance running `plan` (the plan it was registered with) from the
    /// table and the routing index.
    pub(crate) fn unregister(&self, cell: &Cell, plan: &CompiledPlan) {
        lock(self.shard(cell.id)).remove(&cell.id);
        if !plan.inputs.is_empty() {
            lock(&self.routes).remove(&cell.tenant, &plan.inputs, cell.id);
        }
    }

    pub(crate) fn schedule_expiry(self: &Arc<Self>, cell: &Arc<Cell>, due: i64) {
        let entry = TimerEntry {
            id: self.timers.next_id(),
            cell: Arc::downgrade(cell),
            kind: TimerKind::Expire,
        };
        if let Err(e) = self.timers.add(self, due, entry) {
            tracing::warn!(weft.instance = %cell.name, error = %e, message = "Idle expiry not scheduled");
        }
    }

    pub(crate) fn cloud_event(
        &self,
        ty: &str,
        tenant: &str,
        instance: Option<&str>,
        plan: &str,
        data: Value,
    ) -> CloudEvent {
        let seq = self.event_seq.fetch_add(1, Ordering::Relaxed);
        CloudEvent {
            specversion: "1.0".to_string(),
            id: format!("{}-{seq}", instance.unwrap_or("engine")),
            source: format!("weft://{tenant}/{plan}/{}", instance.unwrap_or("")),
            ty: crate::bus::event_type(ty),
            time: rfc3339(self.clock.now_ms()),
            datacontenttype: "application/json".to_string(),
            data,
            tenant: tenant.to_string(),
            instance: instance.map(str::to_string),
            correlation: instance.map(str::to_string),
        }
    }
}

/// The engine: a cheap-clone handle.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Shared>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

impl Engine {
    /// Builds an engine. Call inside a tokio runtime, or give one in the options, if any tool
    /// is asynchronous or timers are used.
    pub fn new(opts: EngineOptions) -> Engine {
        let runtime = opts
            .runtime
            .or_else(|| tokio::runtime::Handle::try_current().ok());
        // CEL evaluations at run time use the engine's budget (a process-wide setting: the
        // evaluator is reached from the pure core, which takes no configuration per call).
        weft_core::cel_budget::set_budget(opts.limits.cel_budget);
        Engine {
            inner: Arc::new(Shared {
                // Every tool is wrapped once here, so every call of this engine, on every
                // path, passes the same chain.
                registry: if opts.chain.is_empty() {
                    Arc::clone(&opts.registry)
                } else {
                    Arc::new(opts.chain.apply(&opts.registry))
                },
                raw_registry: opts.registry,
                chain: opts.chain,
                tenant_tools: opts.tenant_tools,
                tenant_views: Mutex::new(HashMap::new()),
                child_plans: opts.child_plans,
                quotas: opts.quotas,
                clock: opts.clock,
                bus: opts.bus,
                journal: opts.journal,
                limits: opts.limits,
                check_tools: opts.check_tools,
                max_firings_per_sec: opts.max_firings_per_sec,
                idle_expiry_ms: opts.idle_expiry_ms,
                cron: opts.cron,
                trace: opts.trace,
                repair_stuck: opts.repair_stuck && opts.repairer.is_some(),
                repairer: opts.repairer,
                max_repairs: opts.max_repairs,
                runtime,
                plans: RwLock::new(HashMap::new()),
                validators: Mutex::new(HashMap::new()),
                table: (0..SHARDS)
                    .map(|_| Mutex::new(CellMap::default()))
                    .collect(),
                routes: Mutex::new(Routes::default()),
                next_id: AtomicU64::new(0),
                ids: std::sync::OnceLock::new(),
                event_seq: AtomicU64::new(0),
                timers: Timers::default(),
            }),
        }
    }

    pub(crate) fn from_shared(inner: Arc<Shared>) -> Engine {
        Engine { inner }
    }

    /// The shared state (for `recover.rs`).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner
    }

    /// Validates and compiles a plan without registering it, against the engine's tools.
    pub fn compile(&self, plan: Plan) -> Result<Arc<CompiledPlan>, Error> {
        let i = &self.inner;
        let mut validators = lock(&i.validators);
        CompiledPlan::compile(
            plan,
            &i.registry,
            &i.raw_registry,
            &i.chain,
            &mut validators,
            i.check_tools,
            &i.limits,
        )
        .map(Arc::new)
    }

    /// [`Engine::compile`] for a plan of `tenant`: against the engine's tools overlaid with
    /// the tenant's own ([`EngineOptions::tenant_tools`]).
    pub fn compile_for(&self, tenant: &str, plan: Plan) -> Result<Arc<CompiledPlan>, Error> {
        let Some(view) = self.tenant_view(tenant) else {
            return self.compile(plan);
        };
        let i = &self.inner;
        let mut validators = lock(&view.validators);
        CompiledPlan::compile(
            plan,
            &view.registry,
            &view.raw,
            &i.chain,
            &mut validators,
            i.check_tools,
            &i.limits,
        )
        .map(Arc::new)
    }

    /// Loads, validates and compiles a plan document given as a JSON value.
    pub fn compile_value(&self, doc: Value) -> Result<Arc<CompiledPlan>, Error> {
        let plan = weft_core::load::plan_from_value(doc, &self.inner.limits)
            .map_err(|e| Error::Load(e.to_string()))?;
        self.compile(plan)
    }

    /// [`Engine::compile_value`] for a plan of `tenant` (see [`Engine::compile_for`]).
    pub fn compile_value_for(&self, tenant: &str, doc: Value) -> Result<Arc<CompiledPlan>, Error> {
        let plan = weft_core::load::plan_from_value(doc, &self.inner.limits)
            .map_err(|e| Error::Load(e.to_string()))?;
        self.compile_for(tenant, plan)
    }

    /// The tools `tenant`'s steps call, wrapped by the chain: the engine's, overlaid with
    /// the tenant's own when it has any.
    pub fn registry_for(&self, tenant: &str) -> Arc<Registry> {
        match self.tenant_view(tenant) {
            Some(v) => Arc::clone(&v.registry),
            None => Arc::clone(&self.inner.registry),
        }
    }

    /// The tenant's view, rebuilt when its tools changed since the last one.
    fn tenant_view(&self, tenant: &str) -> Option<Arc<TenantView>> {
        let i = &self.inner;
        let own = i.tenant_tools.as_ref()?.tools(tenant)?;
        let mut views = lock(&i.tenant_views);
        if let Some(v) = views.get(tenant)
            && Arc::ptr_eq(&v.own, &own)
        {
            return Some(Arc::clone(v));
        }
        let wrapped = if i.chain.is_empty() {
            (*own).clone()
        } else {
            i.chain.apply(&own)
        };
        let view = Arc::new(TenantView {
            registry: Arc::new(i.registry.overlaid(&wrapped)),
            raw: Arc::new(i.raw_registry.overlaid(&own)),
            own,
            validators: Mutex::new(HashMap::new()),
        });
        views.insert(tenant.to_string(), Arc::clone(&view));
        Some(view)
    }

    /// Validates, compiles and registers a plan under its name (replacing an older one;
    /// running instances keep the version they started with).
    pub fn register(&self, plan: Plan) -> Result<Arc<CompiledPlan>, Error> {
        let c = self.compile(plan)?;
        let mut plans = self.inner.plans.write().unwrap_or_else(|e| e.into_inner());
        if let Some(cycle) = crate::plans::child_cycle(&c, |n| plans.get(n).cloned()) {
            return Err(Error::Load(format!(
                "plan `{}` runs itself through `plan.run`: {}; a plan may not run itself, directly or through others",
                c.name,
                cycle.join(" → ")
            )));
        }
        plans.insert(c.name.to_string(), Arc::clone(&c));
        Ok(c)
    }

    /// [`Engine::register`] for a JSON document.
    pub fn register_json(&self, bytes: &[u8]) -> Result<Arc<CompiledPlan>, Error> {
        let plan = weft_core::parse_plan(bytes, &self.inner.limits)
            .map_err(|e| Error::Load(e.to_string()))?;
        self.register(plan)
    }

    /// The registered plan called `name`.
    pub fn plan(&self, name: &str) -> Option<Arc<CompiledPlan>> {
        self.inner
            .plans
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Starts an instance of the registered plan `plan` for `tenant`. The instance runs in
    /// the caller until it waits for something (a pending action, an event, a timer).
    pub fn start(&self, tenant: &str, plan: &str, input: Value) -> Result<InstanceHandle, Error> {
        let p = self
            .plan(plan)
            .ok_or_else(|| Error::UnknownPlan(plan.to_string()))?;
        self.start_with(tenant, &p, input, StartOptions::default())
    }

    /// Starts an instance of a compiled plan. Refused (`input_invalid`, nothing started)
    /// when the input does not match the schema of an event it is put on.
    pub fn start_with(
        &self,
        tenant: &str,
        plan: &Arc<CompiledPlan>,
        input: Value,
        opts: StartOptions,
    ) -> Result<InstanceHandle, Error> {
        if let Err((event, m)) = plan.net.check_input(&input) {
            return Err(payload_invalid(plan, event, m, true));
        }
        let i = &self.inner;
        let id = i.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let cell = Cell::new(
            id,
            Arc::from(tenant),
            Arc::clone(plan),
            Arc::clone(i),
            opts.trace || i.trace,
        );
        cell.depth.store(opts.depth, Ordering::Relaxed);
        let now = i.clock.now_ms();
        crate::cell::lock(&cell.budget).started_ms = now;
        cell.submit(Input::Start {
            plan: Arc::clone(&plan.name),
            input,
            now,
            depth: opts.depth,
        });
        Ok(InstanceHandle { cell })
    }

    fn live(&self, tenant: Option<&str>, instance: &str) -> Result<Arc<Cell>, Error> {
        self.inner
            .ids()
            .parse(instance)
            .and_then(|id| self.inner.cell(id))
            .filter(|c| tenant.is_none_or(|t| &*c.tenant == t))
            .ok_or_else(|| Error::UnknownInstance(instance.to_string()))
    }

    /// Routes a batch of external events all or nothing. Every event's targets are resolved
    /// and checked first ([`Engine::ingest`]'s rules); then the loops of all targets are held
    /// while every token of the batch is queued, and only then run. So no event of the batch
    /// can find its instance ended by an earlier one: either every event is delivered to
    /// instances that were live when the batch was accepted, or (an `Err` naming the event's
    /// index) none is. Returns, per event, how many instances received it.
    pub fn ingest_batch(
        &self,
        tenant: &str,
        events: Vec<BatchEvent>,
    ) -> Result<Vec<usize>, (usize, Error)> {
        let now = self.inner.clock.now_ms();
        let mut targets: Vec<Vec<Arc<Cell>>> = Vec::with_capacity(events.len());
        for (k, e) in events.iter().enumerate() {
            let cells = self
                .targets(tenant, &e.event, e.instance.as_deref())
                .map_err(|err| (k, err))?;
            check_payload(&cells, &e.event, &e.payload).map_err(|err| (k, err))?;
            targets.push(cells);
        }
        let mut cells: Vec<Arc<Cell>> = targets.iter().flatten().cloned().collect();
        cells.sort_by_key(|c| c.id);
        cells.dedup_by_key(|c| c.id);
        // Held in id order (every holder of several loops takes them in that order).
        let guards: Vec<_> = cells.iter().map(|c| lock(&c.core)).collect();
        let gone = cells.iter().position(|c| {
            self.inner
                .cell(c.id)
                .is_none_or(|live| !Arc::ptr_eq(&live, c))
        });
        if let Some(g) = gone {
            let id = cells[g].name.to_string();
            let k = events
                .iter()
                .position(|e| e.instance.as_deref() == Some(&*id))
                .unwrap_or(0);
            for (c, g) in cells.iter().zip(guards) {
                c.release(g);
            }
            return Err((k, Error::UnknownInstance(id)));
        }
        let mut counts = Vec::with_capacity(events.len());
        for (e, cells_k) in events.into_iter().zip(&targets) {
            counts.push(cells_k.len());
            for c in cells_k {
                if let Some(ev) = c.event_id(&e.event) {
                    c.enqueue(Input::Token {
                        event: ev,
                        payload: e.payload.clone(),
                        correlation: e.correlation.clone(),
                        now,
                    });
                }
            }
        }
        for (c, g) in cells.iter().zip(guards) {
            c.release(g);
        }
        Ok(counts)
    }

    /// The cells an event goes to ([`Engine::ingest`]'s routing and checks).
    fn targets(
        &self,
        tenant: &str,
        event: &str,
        instance: Option<&str>,
    ) -> Result<Vec<Arc<Cell>>, Error> {
        Ok(match instance {
            Some(id) => {
                let cell = self.live(Some(tenant), id)?;
                let plan = cell.plan();
                let accepted = plan
                    .net
                    .event_id(event)
                    .is_some_and(|e| plan.net.event(e).kind == EventKind::Input);
                if !accepted {
                    return Err(Error::EventNotAccepted {
                        instance: id.to_string(),
                        event: event.to_string(),
                        plan: plan.name.to_string(),
                    });
                }
                vec![cell]
            }
            None => {
                let ids = lock(&self.inner.routes).get(tenant, event);
                let mut cells: Vec<Arc<Cell>> = ids
                    .into_iter()
                    .filter_map(|id| self.inner.cell(id))
                    .collect();
                cells.sort_by_key(|c| c.id);
                cells
            }
        })
    }

    /// Routes an external event: to `instance` if given, else to every live instance of
    /// `tenant` whose plan declares `event` as an input. Returns how many received it.
    /// Refused (`payload_invalid`, delivered to none) when the payload does not match the
    /// event's schema in the plan of any instance it would reach.
    pub fn ingest(
        &self,
        tenant: &str,
        event: &str,
        payload: Value,
        correlation: Option<&str>,
        instance: Option<&str>,
    ) -> Result<usize, Error> {
        let now = self.inner.clock.now_ms();
        let targets = self.targets(tenant, event, instance)?;
        check_payload(&targets, event, &payload)?;
        let n = targets.len();
        let mut payload = Some(payload);
        for (k, cell) in targets.into_iter().enumerate() {
            let Some(ev) = cell.event_id(event) else {
                continue;
            };
            let p = if k + 1 == n {
                payload.take().unwrap_or(Value::Null)
            } else {
                payload.clone().unwrap_or(Value::Null)
            };
            cell.submit(Input::Token {
                event: ev,
                payload: p,
                correlation: correlation.map(str::to_string),
                now,
            });
        }
        Ok(n)
    }

    /// The live instances of `tenant` that an [`Engine::ingest`] of `event` without a target
    /// would reach now (ids in id order), e.g. to wait until their journals are durable.
    pub fn routed_instances(&self, tenant: &str, event: &str) -> Vec<String> {
        let mut ids = lock(&self.inner.routes).get(tenant, event);
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.inner.cell(id))
            .map(|c| c.name.to_string())
            .collect()
    }

    /// Stops a live instance.
    pub fn stop(&self, instance: &str) -> Result<(), Error> {
        let cell = self.live(None, instance)?;
        cell.submit(Input::Stop {
            reason: "stopped by request".to_string(),
        });
        Ok(())
    }

    /// Pauses a live instance with `reason` (nothing new fires until [`Engine::resume`];
    /// actions in flight still complete).
    pub fn pause(&self, instance: &str, reason: impl Into<String>) -> Result<(), Error> {
        self.live(None, instance)?.submit(Input::Pause {
            reason: reason.into(),
        });
        Ok(())
    }

    /// A handle that does not keep the engine alive (for callbacks the engine itself owns).
    pub fn downgrade(&self) -> WeakEngine {
        WeakEngine {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Resumes a paused instance.
    pub fn resume(&self, instance: &str) -> Result<(), Error> {
        self.live(None, instance)?.submit(Input::Resume);
        Ok(())
    }

    /// The live state of an instance.
    pub fn state(&self, instance: &str) -> Result<StateSnapshot, Error> {
        let cell = self.live(None, instance)?;
        Ok(cell.with_core(|g| cell.snapshot(g)))
    }

    /// A handle to a live instance.
    pub fn handle(&self, instance: &str) -> Option<InstanceHandle> {
        self.live(None, instance)
            .ok()
            .map(|cell| InstanceHandle { cell })
    }

    /// Subscribes to lifecycle events.
    pub fn subscribe(&self, filter: Filter) -> Subscription {
        self.inner.bus.subscribe(filter)
    }

    /// How many instances are live (running, waiting, stuck or paused).
    pub fn live_instances(&self) -> usize {
        self.inner.table.iter().map(|s| lock(s).len()).sum()
    }

    /// How many timers are scheduled.
    pub fn pending_timers(&self) -> usize {
        self.inner.timers.len()
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }
}

/// An [`Engine`] that does not keep it alive.
#[derive(Clone)]
pub struct WeakEngine {
    inner: std::sync::Weak<Shared>,
}

impl std::fmt::Debug for WeakEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakEngine").finish_non_exhaustive()
    }
}

impl WeakEngine {
    /// The engine, if it still exists.
    pub fn upgrade(&self) -> Option<Engine> {
        self.inner.upgrade().map(|inner| Engine { inner })
    }
}

/// A started instance.
#[derive(Clone)]
pub struct InstanceHandle {
    pub(crate) cell: Arc<Cell>,
}

impl std::fmt::Debug for InstanceHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceHandle")
            .field("id", &self.cell.name)
            .finish()
    }
}

impl InstanceHandle {
    /// Instance id.
    pub fn id(&self) -> &str {
        &self.cell.name
    }

    /// Tenant.
    pub fn tenant(&self) -> &str {
        &self.cell.tenant
    }

    /// The outcome, if the instance has settled (completed, stuck, failed, paused, stopped).
    pub fn outcome_now(&self) -> Option<Outcome> {
        self.cell
            .with_core(|g| Cell::settled(g).then(|| self.cell.outcome(g)))
    }

    /// Waits until the instance settles and returns its outcome.
    ///
    /// On a runtime of several threads, the future drives the instance meanwhile (polls its
    /// pending actions, applies their outcomes) while it has no task of its own: poll it to
    /// the end or drop it (dropped, it hands the instance to a task of its own).
    pub async fn wait(&self) -> Outcome {
        match self.cell.waiter() {
            Ok(w) => w.await,
            Err(settled) => *settled,
        }
    }

    /// A copy of the core state machine (marking, in-flight firings, status): for snapshots
    /// and replay checks.
    pub fn core_instance(&self) -> Option<weft_core::Instance> {
        self.cell.with_core(|g| g.inst.clone())
    }

    /// The firings recorded so far, if the instance was started with a trace
    /// ([`StartOptions::trace`]).
    pub fn trace(&self) -> Option<Vec<crate::outcome::TraceEntry>> {
        lock(&self.cell.core).trace.clone()
    }

    /// How many timers the instance has set that have not fired for the last time.
    pub fn pending_timers(&self) -> usize {
        self.cell.timers.load(Ordering::Acquire) as usize
    }

    /// The instance's key-value context (`context.put`), as it stands.
    pub fn context(&self) -> serde_json::Map<String, Value> {
        lock(&self.cell.kv)
            .as_ref()
            .map(|m| (**m).clone())
            .unwrap_or_default()
    }

    /// The plan the instance runs (the revised one after a repair).
    pub fn plan(&self) -> Arc<CompiledPlan> {
        self.cell.plan()
    }

    /// The live state.
    pub fn state(&self) -> StateSnapshot {
        self.cell.with_core(|g| self.cell.snapshot(g))
    }

    /// The plan it runs, [`InstanceHandle::core_instance`] and [`InstanceHandle::state`], read
    /// at one moment (under one hold of the loop), so that a view made of them never shows,
    /// say, a status the instance reached after the firings it lists as in flight had
    /// finished, or a marking of one plan read by the net of a repaired one.
    pub fn core_and_state(
        &self,
    ) -> (
        Arc<CompiledPlan>,
        Option<weft_core::Instance>,
        StateSnapshot,
    ) {
        self.cell
            .with_core(|g| (Arc::clone(&g.plan), g.inst.clone(), self.cell.snapshot(g)))
    }

    /// Stops the instance.
    pub fn stop(&self) {
        self.cell.submit(Input::Stop {
            reason: "stopped by request".to_string(),
        });
    }
}

/// Whether an instance's task starts on its first pending action's first wake rather than at
/// dispatch: on a runtime (`rt`, the engine's) of several worker threads (module docs of
/// `cell.rs`).
pub(crate) fn lazy_tasks(rt: Option<&tokio::runtime::Handle>) -> bool {
    rt.is_some_and(|h| h.metrics().num_workers() > 1)
}

/// The refusal of a payload that does not match `event`'s schema in `plan`.
fn payload_invalid(plan: &CompiledPlan, event: EventId, m: Mismatch, start: bool) -> Error {
    Error::PayloadInvalid {
        plan: plan.name.to_string(),
        event: plan.net.event(event).name.clone(),
        at: m.at().to_string(),
        message: m.to_string(),
        start,
    }
}

/// Checks an event's payload against its schema in the plan of each instance it would
/// reach (each plan once): the first that refuses it. A plan without a schema for the event
/// costs a lookup, no clone.
fn check_payload(cells: &[Arc<Cell>], event: &str, payload: &Value) -> Result<(), Error> {
    let mut checked: Vec<Arc<CompiledPlan>> = Vec::new();
    for c in cells {
        c.with_plan(|plan| {
            let Some(ev) = plan.net.event_id(event) else {
                return Ok(());
            };
            if plan.net.event(ev).schema.is_none() || checked.iter().any(|p| Arc::ptr_eq(p, plan)) {
                return Ok(());
            }
            plan.net
                .check_payload(ev, payload)
                .map_err(|m| payload_invalid(plan, ev, m, false))?;
            checked.push(Arc::clone(plan));
            Ok(())
        })?;
    }
    Ok(())
}
