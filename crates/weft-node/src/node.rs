//! [`Builder`] → [`Node`]: a running weft assembled from a [`Config`] — store, bus, tool
//! registry, the tool-call chain, clock, LLM provider and repairer — in one place.
//!
//! Every entry point that runs or reads instances (`weft serve`, `weft run`, `weft resume`,
//! `weft repair`, `weft inspect`, …) asks this module for what it needs; none builds an
//! engine, a store or a registry itself. What each front end adds is declared here too:
//! the server installs its metrics at [`Stage::Metrics`], `weft repair` gives a repairer.

use std::sync::Arc;

use weft_durable::{Durable, DurableConfig};
use weft_llm::ChatProvider;
use weft_runtime::{Clock, Engine, EngineOptions, Repairer};
use weft_store::Store;
use weft_tools::{Chain, Interceptor, Registry, Stage, Tool};

use crate::Error;
use crate::config::Config;
use crate::openers::Openers;
use crate::tenant_tools::Toolbox;

/// How to build a [`Node`].
pub struct Builder {
    config: Config,
    openers: Openers,
    chain: Chain,
    trace: bool,
    repairer: Option<Arc<dyn Repairer>>,
    llm: Option<Option<Arc<dyn ChatProvider>>>,
    tools: Vec<Arc<dyn Tool>>,
    /// The tools of the `[[tools.mcp]]` servers, once [`Builder::discover_mcp`] ran.
    mcp: Option<Vec<Arc<dyn Tool>>>,
    durable: Option<DurableConfig>,
    clock: Option<Arc<dyn Clock>>,
    /// `[policy]`'s bundles, once [`Builder::configured_links`] loaded them.
    policies: Option<weft_policy::PolicySet>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("store", &self.config.store.url)
            .field("chain", &self.chain)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// A node of `config`, with the default openers and an empty chain.
    pub fn new(config: Config) -> Self {
        Builder {
            config,
            openers: Openers::default(),
            chain: Chain::new(),
            trace: false,
            repairer: None,
            llm: None,
            tools: Vec::new(),
            mcp: None,
            durable: None,
            clock: None,
            policies: None,
        }
    }

    /// The configuration it builds from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The openers table with `[journal]`'s key applied (`Openers::with_journal_key`).
    pub fn store_openers(&self) -> Result<Openers, Error> {
        Ok(match self.config.journal.key().map_err(Error::Config)? {
            Some(k) => self.openers.clone().with_journal_key(k),
            None => self.openers.clone(),
        })
    }

    /// Uses `openers` instead of the default table.
    #[must_use]
    pub fn openers(mut self, openers: Openers) -> Self {
        self.openers = openers;
        self
    }

    /// Installs the links the configuration asks for at stages the caller left empty:
    /// `[policy]`'s bundles at [`Stage::Policy`] (a bundle that does not compile is an error)
    /// and, when `[budget]` sets any budget, the budget stage for every tool.
    fn configured_links(mut self) -> Result<Self, Error> {
        let cfg = &self.config.policy;
        if cfg.any() && self.chain.get(Stage::Policy).is_none() {
            let set = weft_policy::PolicySet::load(cfg.locations())
                .map_err(|e| Error::Config(format!("[policy] bundles: {e}")))?;
            self.chain.set(
                Stage::Policy,
                Arc::new(weft_policy::PolicyLink::with_set(set.clone())),
            );
            self.policies = Some(set);
        }
        if let Some(q) = self.config.budget.quotas()
            && self.chain.get(Stage::Budget).is_none()
        {
            let pausing = q.on_exceeded == weft_runtime::quota::OnExceeded::Pause;
            self.chain.set(
                Stage::Budget,
                Arc::new(weft_tools::BudgetLink {
                    pausing,
                    what: if pausing {
                        "[budget] and plans' limits (a call over one pauses its instance)"
                    } else {
                        "[budget] and plans' limits"
                    },
                }),
            );
        }
        Ok(self)
    }

    /// Watches `[policy]`'s files when `reload_ms` asks for it; the node keeps the watcher.
    fn policy_watcher(&self) -> Option<Arc<weft_policy::Watcher>> {
        let every = self.config.policy.reload_ms;
        let set = self.policies.as_ref()?;
        (every > 0).then(|| Arc::new(set.watch(std::time::Duration::from_millis(every))))
    }

    /// Installs `link` at `stage` of the tool-call chain (the durability stage belongs to
    /// the durable engine, which installs its journal gate there itself).
    #[must_use]
    pub fn link(mut self, stage: Stage, link: Arc<dyn Interceptor>) -> Self {
        self.chain.set(stage, link);
        self
    }

    /// Records a trace of firings for every instance.
    #[must_use]
    pub fn trace(mut self, on: bool) -> Self {
        self.trace = on;
        self
    }

    /// Makes revised plans for `on_fail: repair`.
    #[must_use]
    pub fn repairer(mut self, repairer: Arc<dyn Repairer>) -> Self {
        self.repairer = Some(repairer);
        self
    }

    /// Uses `provider` as the model instead of the one `[llm]` configures (a scripted
    /// provider, or `None` for no model).
    #[must_use]
    pub fn llm(mut self, provider: Option<Arc<dyn ChatProvider>>) -> Self {
        self.llm = Some(provider);
        self
    }

    /// Registers `tool` besides the built-in ones.
    #[must_use]
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Uses `clock` instead of the system clock (deterministic runs and tests).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Replaces the durability settings derived from `[store]` (benchmarks and tests).
    #[must_use]
    pub fn durable_config(mut self, config: DurableConfig) -> Self {
        self.durable = Some(config);
        self
    }

    /// Connects to the `[[tools.mcp]]` servers (starting the stdio ones) and lists their
    /// tools, which the node then registers as `<name>.<tool>`. Asynchronous, so the
    /// synchronous [`Builder::in_memory`] and [`Builder::tools`] need it first when MCP
    /// servers are configured; [`Builder::open`] and [`Builder::open_on`] run it themselves.
    /// Run it inside the runtime that will run the node: it hosts the connections, which
    /// restart dead servers in the background. Does nothing the second time.
    pub async fn discover_mcp(mut self) -> Result<Self, Error> {
        if self.mcp.is_none() {
            let tools = weft_sources::discover(&self.config.tools.mcp)
                .await
                .map_err(|e| Error::Config(e.to_string()))?;
            self.mcp = Some(tools);
        }
        Ok(self)
    }

    fn llm_provider(&self) -> Result<Option<Arc<dyn ChatProvider>>, Error> {
        match &self.llm {
            Some(p) => Ok(p.clone()),
            None => crate::llm::provider(&self.config.llm),
        }
    }

    /// The tools the node will register, as registered (outside the chain): for callers
    /// that need the catalog before the node is built (a repairer's prompt).
    pub fn tools(&self) -> Result<Registry, Error> {
        self.registry(self.llm_provider()?, None)
    }

    /// The tools; with a `store`, the model tools keep their exchanges in its transcripts
    /// (under the instance that made them).
    fn registry(
        &self,
        llm: Option<Arc<dyn ChatProvider>>,
        store: Option<&Arc<dyn Store>>,
    ) -> Result<Registry, Error> {
        let mut reg = Registry::new();
        weft_builtins::register_all(&mut reg, &self.config.tools.builtin());
        let model = crate::llm::for_tools(llm, store);
        reg.register(Arc::new(weft_llm::LlmCompleteTool::new(Arc::clone(&model))));
        for t in weft_sources::build(&self.config.tools.declared)
            .map_err(|e| Error::Config(e.to_string()))?
        {
            reg.register(t);
        }
        match &self.mcp {
            Some(tools) => tools.iter().for_each(|t| reg.register(Arc::clone(t))),
            None if !self.config.tools.mcp.is_empty() => {
                return Err(Error::Config(
                    "[[tools.mcp]] servers are not discovered yet: call \
                     `Builder::discover_mcp().await` first"
                        .into(),
                ));
            }
            None => {}
        }
        for t in &self.tools {
            reg.register(Arc::clone(t));
        }
        // `agent.react` calls the other tools through the chain, without its instance-only
        // links: its own call is the step the journal records.
        let inner = Arc::new(self.chain.apply_outside_instances(&reg));
        let exec = weft_llm::RegistryExecutor::new(
            inner,
            weft_tools::ToolContext::detached("agent.react"),
        );
        let available = exec.descriptors(&[]);
        reg.register(Arc::new(weft_llm::AgentReactTool::new(
            model,
            Arc::new(exec),
            available,
        )));
        Ok(reg)
    }

    fn engine_options(
        &self,
        registry: &Arc<Registry>,
        bus: Arc<dyn weft_runtime::Bus>,
        counts: &Arc<weft_tools::SharedCounts>,
    ) -> EngineOptions {
        let defaults = EngineOptions::default();
        EngineOptions {
            registry: Arc::clone(registry),
            clock: self.clock.clone().unwrap_or(defaults.clock),
            chain: self.chain.clone(),
            bus,
            limits: self.config.limits.plan_limits(),
            cron: Some(Arc::new(weft_builtins::timer::next_occurrence)),
            trace: self.trace,
            repairer: self.repairer.clone(),
            quotas: self.config.budget.quotas().map(|q| {
                Arc::new(weft_runtime::quota::Quotas::with_counts(
                    q,
                    Arc::clone(counts),
                ))
            }),
            ..defaults
        }
    }

    fn durable_settings(&self) -> DurableConfig {
        self.durable.clone().unwrap_or_else(|| {
            let s = &self.config.store;
            DurableConfig {
                snapshot_every: (s.snapshot_every > 0).then_some(s.snapshot_every),
                owner: s.owner.clone(),
                lease_ttl_ms: i64::try_from(s.lease_ttl_ms).unwrap_or(i64::MAX),
                lease_renew_ms: s.lease_renew_ms,
                ..DurableConfig::default()
            }
        })
    }

    /// The registry, the engine options (with the chain and bus) and the registry for calls
    /// outside instances: what every kind of node starts from.
    fn parts(&self, store: Option<&Arc<dyn Store>>) -> Result<Parts, Error> {
        let llm = self.llm_provider()?;
        let registry = Arc::new(self.registry(llm.clone(), store)?);
        let bus = self
            .openers
            .open_bus(&self.config.bus.url, self.config.bus.capacity)?;
        let counts = Arc::new(weft_tools::SharedCounts::new());
        let planner = crate::llm::Planner::new(
            llm.clone(),
            &self.config.budget,
            Arc::clone(&bus),
            Arc::clone(&counts),
        );
        let opts = self.engine_options(&registry, bus, &counts);
        let outside = Arc::new(opts.chain.apply_outside_instances(&registry));
        Ok(Parts {
            llm,
            planner,
            registry,
            outside,
            opts,
            counts,
        })
    }

    /// A node without a store: instances live in memory only (`weft run` without a store).
    /// Call inside a tokio runtime if any tool is asynchronous or timers are used, after
    /// [`Builder::discover_mcp`] when `[[tools.mcp]]` servers are configured.
    pub fn in_memory(self) -> Result<Node, Error> {
        let this = self.configured_links()?;
        let p = this.parts(None)?;
        let watcher = this.policy_watcher();
        Ok(Node {
            config: Arc::new(this.config),
            registry: p.registry,
            outside: p.outside,
            engine: Engine::new(p.opts),
            durable: None,
            llm: p.llm,
            planner: p.planner,
            watcher,
            chain: this.chain,
            toolbox: None,
            policies: this.policies,
            synced: None,
            counts: p.counts,
        })
    }

    /// A durable node over the store `[store].url` names (opened through the openers
    /// table). Call inside a tokio runtime. Recovers nothing: see [`Durable::recover`].
    pub async fn open(self) -> Result<Node, Error> {
        let store = self
            .store_openers()?
            .open_store(&self.config.store.url)
            .await?;
        self.open_on(store).await
    }

    /// A durable node over an already opened `store`.
    pub async fn open_on(self, store: Arc<dyn Store>) -> Result<Node, Error> {
        let this = self.discover_mcp().await?;
        this.open_discovered(store).await
    }

    async fn open_discovered(self, store: Arc<dyn Store>) -> Result<Node, Error> {
        let this = self.configured_links()?;
        this.open_linked(store).await
    }

    async fn open_linked(self, store: Arc<dyn Store>) -> Result<Node, Error> {
        let mut p = self.parts(Some(&store))?;
        // Every tenant's declared tools, before anything compiles a stored plan.
        let toolbox = Arc::new(Toolbox::new(&self.config));
        toolbox
            .refresh(store.as_ref(), None)
            .await
            .map_err(|e| Error::Durable(weft_durable::DurableError::from(e)))?;
        p.opts.tenant_tools = Some(Arc::clone(&toolbox) as Arc<dyn weft_tools::TenantTools>);
        let b = &self.config.budget;
        let synced = if b
            .quotas()
            .is_some_and(|q| q.plan.is_some() || q.tenant.is_some())
            || b.planner_limits().is_some()
        {
            let every = std::time::Duration::from_millis(b.sync_ms.max(1));
            Some(
                crate::counts::Synced::start(Arc::clone(&p.counts), Arc::clone(&store), every)
                    .await?,
            )
        } else {
            None
        };
        let durable = Durable::open(store, p.opts, self.durable_settings()).await?;
        let watcher = self.policy_watcher();
        let chain = self.chain.with(Stage::Durability, durable.gate_link());
        Ok(Node {
            config: Arc::new(self.config),
            registry: p.registry,
            outside: p.outside,
            engine: durable.engine().clone(),
            durable: Some(durable),
            llm: p.llm,
            planner: p.planner,
            watcher,
            chain,
            toolbox: Some(toolbox),
            policies: self.policies,
            synced,
            counts: p.counts,
        })
    }
}

/// What [`Builder::parts`] makes.
struct Parts {
    llm: Option<Arc<dyn ChatProvider>>,
    planner: crate::llm::Planner,
    registry: Arc<Registry>,
    outside: Arc<Registry>,
    opts: EngineOptions,
    /// The quotas' counters (the engine's and the planner ledger's).
    counts: Arc<weft_tools::SharedCounts>,
}

/// A running weft. Cheap to clone.
#[derive(Clone)]
pub struct Node {
    config: Arc<Config>,
    registry: Arc<Registry>,
    outside: Arc<Registry>,
    engine: Engine,
    durable: Option<Durable>,
    llm: Option<Arc<dyn ChatProvider>>,
    /// The planners' model: `[budget.planner]`'s ledger, refusals published.
    planner: crate::llm::Planner,
    chain: Chain,
    /// Tenants' declared tools (durable nodes).
    toolbox: Option<Arc<Toolbox>>,
    /// `[policy]`'s bundles, which also decide on plans.
    policies: Option<weft_policy::PolicySet>,
    /// Reloads `[policy]`'s bundles when their files change, while any clone of the node
    /// lives.
    #[allow(dead_code)]
    watcher: Option<Arc<weft_policy::Watcher>>,
    /// The quotas' counters, synced with the store while any clone of the node lives
    /// (durable nodes with quotas).
    synced: Option<Arc<crate::counts::Synced>>,
    /// The quotas' counters (this process's view).
    counts: Arc<weft_tools::SharedCounts>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("durable", &self.durable)
            .field("chain", &self.chain)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// The configuration it was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The tools as registered, outside the chain: what validation, the LLM planner and
    /// `weft tools` see (the chain keeps every spec, so they see the same specs).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The tools for calls made outside any instance (the ReAct planner's): wrapped by the
    /// chain without its instance-only links.
    pub fn outside_registry(&self) -> &Arc<Registry> {
        &self.outside
    }

    /// Tenants' declared tools (`None` for a node without a store).
    pub fn toolbox(&self) -> Option<&Arc<Toolbox>> {
        self.toolbox.as_ref()
    }

    /// [`Node::registry`] overlaid with `tenant`'s declared tools: what `tenant`'s plans are
    /// validated against.
    pub fn registry_for(&self, tenant: &str) -> Arc<Registry> {
        match self.own_tools(tenant) {
            Some(own) => Arc::new(self.registry.overlaid(&own)),
            None => Arc::clone(&self.registry),
        }
    }

    /// [`Node::outside_registry`] overlaid with `tenant`'s declared tools, wrapped the same
    /// way: what `tenant`'s calls outside instances (`/plan/react`) may use.
    pub fn outside_registry_for(&self, tenant: &str) -> Arc<Registry> {
        match self.own_tools(tenant) {
            Some(own) => Arc::new(
                self.outside
                    .overlaid(&self.chain.apply_outside_instances(&own)),
            ),
            None => Arc::clone(&self.outside),
        }
    }

    fn own_tools(&self, tenant: &str) -> Option<Arc<Registry>> {
        use weft_tools::TenantTools;
        self.toolbox.as_ref()?.tools(tenant)
    }

    /// The engine (the durable one's, for a durable node).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The durable engine, unless the node runs in memory.
    pub fn durable(&self) -> Option<&Durable> {
        self.durable.as_ref()
    }

    /// The store, unless the node runs in memory.
    pub fn store(&self) -> Option<&Arc<dyn Store>> {
        self.durable.as_ref().map(Durable::store)
    }

    /// The configured model, if any.
    pub fn llm(&self) -> Option<&Arc<dyn ChatProvider>> {
        self.llm.as_ref()
    }

    /// The model for planners (`POST /v1/plan`, `/v1/generate`, `/plan/react`, the ReAct
    /// planner on the bus), `None` without one: the configured model behind
    /// `[budget.planner]`'s ledger, whose refusals are published as
    /// `dev.weft.planner.throttled` / `dev.weft.planner.rejected` events.
    pub fn planner_llm(&self) -> Option<weft_llm::Llm> {
        self.planner.llm()
    }

    /// `tenant`'s quotas in the current period: limits and what every process on the store
    /// used (synced first), or this process alone without a store.
    pub async fn quotas(&self, tenant: &str) -> Result<crate::QuotaReport, Error> {
        let b = &self.config.budget;
        let now = weft_store::now_ms();
        let totals: Vec<(String, u64, weft_tools::Usage)> = match (&self.synced, self.store()) {
            (Some(s), Some(store)) => {
                s.sync().await?;
                let live = store
                    .live_counts(now)
                    .await
                    .map_err(|e| Error::Durable(weft_durable::DurableError::from(e)))?;
                live.into_iter()
                    .map(|r| (r.key, r.period, crate::counts::usage(&r.counts)))
                    .collect()
            }
            _ => {
                let period = crate::QuotaReport::period(b, now).0;
                self.counts
                    .totals(period)
                    .into_iter()
                    .map(|(k, u)| (k.to_string(), period, u))
                    .collect()
            }
        };
        Ok(crate::QuotaReport::new(
            b,
            tenant,
            now,
            self.synced.is_some(),
            &totals,
        ))
    }

    /// Adds what the quotas counted since the last sync to the store's counters now (a
    /// task does it every `[budget] sync_ms`; call this before stopping, so nothing counted
    /// is lost). Nothing to do for a node without a store or quotas.
    pub async fn sync_counts(&self) -> Result<(), Error> {
        match &self.synced {
            Some(c) => c.sync().await,
            None => Ok(()),
        }
    }

    /// The checks `tenant`'s plans pass before they are accepted (approval coverage, the
    /// policy's properties and plan decision, the cost bound against the plan's `limits`):
    /// put them in `AnalysisOptions::governance`.
    pub fn governance(&self, tenant: &str) -> Arc<weft_analysis::Governance> {
        let catalog: Arc<dyn weft_core::ToolCatalog + Send + Sync> = self.registry_for(tenant);
        let policy = self.policies.as_ref().and_then(|s| s.for_tenant(tenant));
        Arc::new(crate::governance(catalog, policy.as_ref(), tenant))
    }

    /// `[policy]`'s bundles in force, if any (to reload them, or read the last reload).
    pub fn policies(&self) -> Option<&weft_policy::PolicySet> {
        self.policies.as_ref()
    }

    /// The tool-call chain, stage by stage, with what is installed at each.
    pub fn chain(&self) -> Vec<(Stage, Option<String>)> {
        self.chain.describe()
    }
}
