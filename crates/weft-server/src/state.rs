//! The server's configuration ([`ServerConfig`]) and the state every handler shares
//! ([`AppState`]): the durable engine, the tool registry, tokens → tenants, the rate
//! limiter, compiled plans per (tenant, name, version), recent traces, metrics and the
//! optional LLM provider.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use weft_durable::Durable;
use weft_runtime::{CompiledPlan, TraceEntry};
use weft_store::Store;

use crate::error::ApiError;
use crate::limit::RateLimiter;
use crate::metrics::Metrics;

/// Tenant used when no tokens are configured.
pub const LOCAL_TENANT: &str = "local";

/// How the server behaves. `Default` is the embedded, single-tenant configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// API tokens → tenants. Empty: single tenant `local`, no auth, loopback only.
    pub tokens: HashMap<String, String>,
    /// Largest request body for most routes (bytes).
    pub body_limit: usize,
    /// Largest request body for routes taking a plan document (bytes).
    pub plan_body_limit: usize,
    /// Requests per second per tenant (token bucket refill rate); `0` disables the limit.
    pub rate_per_sec: f64,
    /// Bucket size (burst) per tenant.
    pub rate_burst: f64,
    /// SSE keep-alive comment interval.
    pub keep_alive: Duration,
    /// Traces of finished instances kept in memory for `GET …/trace`.
    pub trace_retention: usize,
    /// Time a client has to send a request's headers, and an idle keep-alive connection to
    /// start its next request; then the connection is closed.
    pub header_timeout: Duration,
    /// Time a client has to send a request's body (`408 request_timeout` after it).
    pub body_timeout: Duration,
    /// Most open connections; connections over it are closed as soon as they are accepted.
    pub max_connections: usize,
    /// How long a CloudEvent's (`source`, `id`) is remembered per tenant for deduplication.
    pub dedup_window: Duration,
    /// Plan validations and analyses one tenant may run at once.
    pub validate_concurrency: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tokens: HashMap::new(),
            body_limit: 1 << 20,
            plan_body_limit: 8 << 20,
            rate_per_sec: 100_000.0,
            rate_burst: 200_000.0,
            keep_alive: Duration::from_secs(15),
            trace_retention: 10_000,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            dedup_window: Duration::from_secs(7 * 24 * 3600),
            validate_concurrency: 2,
        }
    }
}

impl ServerConfig {
    /// The server settings of a configuration's `[server]` section (tokens read from the
    /// file or list it names).
    pub fn from_section(s: &weft_node::config::ServerSection) -> Result<ServerConfig, ConfigError> {
        let listen = s.listen.parse().map_err(|_| {
            ConfigError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("server.listen `{}` is not an address and port", s.listen),
            ))
        })?;
        Ok(ServerConfig {
            listen,
            tokens: weft_node::tokens::tokens(s)?,
            body_limit: s.body_limit,
            plan_body_limit: s.plan_body_limit,
            rate_per_sec: s.rate_limit,
            rate_burst: s.rate_burst,
            trace_retention: s.trace_retention,
            header_timeout: Duration::from_millis(s.header_timeout_ms.max(1)),
            body_timeout: Duration::from_millis(s.body_timeout_ms.max(1)),
            max_connections: s.max_connections.max(1),
            dedup_window: Duration::from_secs(s.event_dedup_secs),
            validate_concurrency: s.validate_concurrency.max(1),
            ..ServerConfig::default()
        })
    }
}

/// Errors configuring the server.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The node could not be assembled (store, bus, tools, model, tokens).
    #[error("{0}")]
    Node(#[from] weft_node::Error),
    /// Refused to listen without auth on a non-loopback address.
    #[error(
        "[unsafe_listen] no API tokens are configured, so the server only listens on a loopback address (got {0}); set WEFT_API_TOKENS or --tokens FILE"
    )]
    Unsafe(SocketAddr),
    /// Opening the durable engine failed.
    #[error("{0}")]
    Durable(#[from] weft_durable::DurableError),
    /// The node was built without a store (the server needs a durable one).
    #[error("[invalid_config] the server needs a durable node (one built with a store)")]
    NotDurable,
    /// I/O.
    #[error("[io] {0}")]
    Io(#[from] std::io::Error),
    /// The listen address could not be bound (its cause is in the message, once).
    #[error(
        "[listen_failed] cannot listen on {addr}: {message}; is another process (another weft?) using it? choose another address with --listen ADDR (server.listen in weft.toml, WEFT_SERVER_LISTEN)"
    )]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why (the OS error).
        message: String,
    },
    /// The OTLP exporter could not be set up (check `--otlp-endpoint` /
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`).
    #[error("[invalid_otlp] {0}; check --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")]
    Telemetry(String),
}

/// Traces of finished instances by id, with their ids oldest first (for eviction).
pub(crate) type Traces = (HashMap<String, Vec<TraceEntry>>, VecDeque<String>);

/// Shared state of the HTTP app (cheap to clone).
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub config: ServerConfig,
    /// The node: its tools and every tenant's declared ones.
    pub node: weft_node::Node,
    pub durable: Durable,
    pub limiter: RateLimiter,
    pub metrics: Metrics,
    /// Compiled plans by (tenant, name, version).
    pub plans: Mutex<HashMap<(String, String, u32), Arc<CompiledPlan>>>,
    /// Analysis summaries by (tenant, name, version).
    pub analyses: Mutex<HashMap<(String, String, u32), Arc<crate::plans::Checked>>>,
    /// Serializes starts (see `Durable::start_compiled`).
    pub start_lock: Mutex<()>,
    /// Traces of finished instances, oldest first.
    pub traces: Mutex<Traces>,
    /// Handles of instances this process runs, until their final status is durable (the
    /// engine forgets an instance the moment it ends, before its journal is written).
    pub handles: Mutex<HashMap<String, weft_runtime::InstanceHandle>>,
    /// Flipped on shutdown: SSE streams end.
    pub shutdown: tokio::sync::watch::Sender<bool>,
    /// Deduplication keys of CloudEvents being ingested right now (`events.rs`).
    pub ingesting: Mutex<std::collections::HashSet<String>>,
    /// Per tenant: the validations and analyses it may run at once (`plans.rs`).
    pub validating: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// The recent lifecycle events SSE streams resume from (`Last-Event-ID`, `replay.rs`).
    pub replay: crate::replay::Replay,
}

impl AppState {
    /// Builds the node `builder` describes (over `store` when given, else the store its
    /// configuration names) with the server's metrics at the metrics stage of its tool-call
    /// chain (steps fired, action latency), recovers every non-terminal instance and builds
    /// the state.
    pub async fn open(
        builder: weft_node::Builder,
        store: Option<Arc<dyn Store>>,
        config: ServerConfig,
    ) -> Result<(AppState, weft_durable::RecoveryReport), ConfigError> {
        let metrics = Metrics::new();
        let builder = builder.link(weft_tools::Stage::Metrics, metrics.link());
        let node = match store {
            Some(store) => builder.open_on(store).await?,
            None => builder.open().await?,
        };
        let state = AppState::with_metrics(node, config, metrics)?;
        let report = state.inner.durable.recover().await?;
        for h in &report.handles {
            state.track(h.clone());
        }
        crate::dedup::spawn_sweeper(&state);
        Ok((state, report))
    }

    fn with_metrics(
        node: weft_node::Node,
        config: ServerConfig,
        metrics: Metrics,
    ) -> Result<AppState, ConfigError> {
        let durable = node.durable().cloned().ok_or(ConfigError::NotDurable)?;
        let limiter = RateLimiter::new(config.rate_per_sec, config.rate_burst);
        let (shutdown, _) = tokio::sync::watch::channel(false);
        Ok(AppState {
            inner: Arc::new(Inner {
                config,
                durable,
                node,
                limiter,
                metrics,
                plans: Mutex::new(HashMap::new()),
                analyses: Mutex::new(HashMap::new()),
                start_lock: Mutex::new(()),
                traces: Mutex::new((HashMap::new(), VecDeque::new())),
                handles: Mutex::new(HashMap::new()),
                shutdown,
                ingesting: Mutex::new(std::collections::HashSet::new()),
                validating: Mutex::new(HashMap::new()),
                replay: crate::replay::Replay::default(),
            }),
        })
    }

    /// The durable engine.
    pub fn durable(&self) -> &Durable {
        &self.inner.durable
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The node it serves (`weft serve` also serves its planner over NATS).
    pub fn node(&self) -> &weft_node::Node {
        &self.inner.node
    }

    /// Ends SSE streams (called on shutdown).
    pub fn begin_shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        self.inner.durable.store()
    }

    /// Resolves a bearer token to its tenant (`None`: unknown); with no tokens configured
    /// every request is the local tenant.
    pub(crate) fn tenant_for(&self, token: Option<&str>) -> Option<String> {
        let tokens = &self.inner.config.tokens;
        if tokens.is_empty() {
            return Some(LOCAL_TENANT.to_string());
        }
        token.and_then(|t| tokens.get(t).cloned())
    }

    /// The compiled plan `name` version `version` (latest when `None`) of `tenant`, with its
    /// version and document.
    pub(crate) async fn compiled(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<(Arc<CompiledPlan>, u32), ApiError> {
        if let Some(v) = version {
            let key = (tenant.to_string(), name.to_string(), v);
            if let Some(p) = lock(&self.inner.plans).get(&key) {
                return Ok((Arc::clone(p), v));
            }
        }
        let rec = self
            .store()
            .get_plan(tenant, name, version)
            .await?
            .ok_or_else(|| match version {
                Some(v) => ApiError::not_found(format!("plan `{name}` version {v}")),
                None => ApiError::not_found(format!("plan `{name}`")),
            })?;
        let v = rec.info.version;
        let key = (tenant.to_string(), name.to_string(), v);
        if let Some(p) = lock(&self.inner.plans).get(&key) {
            return Ok((Arc::clone(p), v));
        }
        // Against the tenant's tools as the store has them now.
        crate::tools::refresh(self, tenant).await?;
        let compiled = self
            .inner
            .durable
            .engine()
            .compile_value_for(tenant, rec.document)
            .map_err(|e| {
                ApiError::new(
                    axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_plan",
                    format!("stored plan `{name}` version {v} no longer compiles: {e}"),
                )
            })?;
        lock(&self.inner.plans).insert(key, Arc::clone(&compiled));
        Ok((compiled, v))
    }

    /// Starts an instance and spawns the task that keeps its stored status current; `422
    /// input_invalid` when the input does not match the schema of an event it goes on.
    pub(crate) fn start(
        &self,
        tenant: &str,
        plan: &Arc<CompiledPlan>,
        version: u32,
        input: Value,
    ) -> Result<weft_runtime::InstanceHandle, ApiError> {
        // Acyclic instances keep a trace of their firings (bounded by the plan); reactive
        // ones would grow it without end.
        let trace = plan.net.graph_type == weft_core::GraphType::Acyclic;
        let h = {
            let _g = lock(&self.inner.start_lock);
            self.inner.durable.start_compiled_with(
                tenant,
                plan,
                version,
                input,
                weft_runtime::StartOptions {
                    trace,
                    ..Default::default()
                },
                crate::request_id::current_request_id().as_deref(),
            )
        }
        .map_err(|e| match e {
            weft_runtime::Error::PayloadInvalid { .. } => ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                e.code(),
                e.to_string(),
            )
            .hint("send an `input` that matches the schema of the plan's initial events (GET /v1/plans/{name} shows the plan)"),
            e => ApiError::internal(e),
        })?;
        self.inner.metrics.started.inc();
        self.track(h.clone());
        Ok(h)
    }

    /// Follows a live instance until it is terminal: each time it settles its status goes to
    /// the store (`Durable::wait`); a stuck or paused instance is polled (50 ms, backing off
    /// to 5 s) until it moves.
    pub(crate) fn track(&self, h: weft_runtime::InstanceHandle) {
        lock(&self.inner.handles).insert(h.id().to_string(), h.clone());
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let o = match me.inner.durable.wait(&h).await {
                    Ok(o) => o,
                    Err(e) => {
                        tracing::warn!(instance = %h.id(), error = %e, "journal failed");
                        lock(&me.inner.handles).remove(h.id());
                        return;
                    }
                };
                if o.status.is_terminal() {
                    me.inner.metrics.finished(o.status.name());
                    if let Some(used) = h.state().usage {
                        let exceeded = matches!(&o.status,
                            weft_core::Status::Failed { reason } if reason.contains("budget_exceeded"));
                        me.inner.metrics.budget(used, exceeded);
                    }
                    if let Some(t) = h.trace() {
                        me.keep_trace(h.id(), t);
                    }
                    lock(&me.inner.handles).remove(h.id());
                    return;
                }
                // Stuck or paused: poll for a change, backing off to once every 5 s so many
                // idle instances cost little.
                let settled = o.status.name();
                let mut every = Duration::from_millis(50);
                loop {
                    tokio::time::sleep(every).await;
                    if h.state().status.name() != settled {
                        break;
                    }
                    every = (every * 2).min(Duration::from_secs(5));
                }
            }
        });
    }

    fn keep_trace(&self, id: &str, trace: Vec<TraceEntry>) {
        let cap = self.inner.config.trace_retention;
        if cap == 0 {
            return;
        }
        let mut g = lock(&self.inner.traces);
        let (map, order) = &mut *g;
        if map.insert(id.to_string(), trace).is_none() {
            order.push_back(id.to_string());
        }
        while order.len() > cap {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    /// The instance's handle if it is live here or ended but not yet durably finished.
    pub(crate) fn handle(&self, id: &str) -> Option<weft_runtime::InstanceHandle> {
        self.inner
            .durable
            .engine()
            .handle(id)
            .or_else(|| lock(&self.inner.handles).get(id).cloned())
    }

    pub(crate) fn kept_trace(&self, id: &str) -> Option<Vec<TraceEntry>> {
        lock(&self.inner.traces).0.get(id).cloned()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
