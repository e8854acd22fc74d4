//! Which language model a weft talks to: the OpenAI-compatible provider `[llm]` configures
//! (file, `WEFT_LLM_*` or flags), or none, in which case `llm.complete` still exists (so plans
//! using it register and run up to that step) but fails with a message saying what to set.
//! Planners reach it through [`Planner`]: `[budget.planner]`'s ledger (one per node, shared
//! by every planner call of every tenant, its tenants' counts synced with the store like the
//! other quotas: `counts.rs`) checks each call before it is sent, and its
//! refusals go onto the bus as `dev.weft.planner.throttled` / `dev.weft.planner.rejected`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use weft_llm::{
    Budget, ChatProvider, ChatRequest, ChatResponse, Llm, OpenAiConfig, OpenAiProvider,
    TelemetryEvent, TelemetryKind, TelemetrySink, TracingTelemetry,
};
use weft_runtime::bus::{Bus, CloudEvent};
use weft_tools::SharedCounts;

use crate::Error;
use crate::config::{BudgetConfig, LlmConfig};

/// What to tell people when no provider is configured (commands with a `--script` flag add
/// that choice themselves: `weft run` and the server have none).
pub const NOT_CONFIGURED: &str = "no LLM provider is configured: set llm.base_url in weft.toml \
     or WEFT_LLM_BASE_URL (the OpenAI-compatible server's base URL, e.g. \
     http://127.0.0.1:11434/v1 for a local Ollama) and optionally llm.model / WEFT_LLM_MODEL \
     and WEFT_LLM_API_KEY";

/// The provider `[llm]` configures; `Ok(None)` when `base_url` is unset.
pub fn provider(cfg: &LlmConfig) -> Result<Option<Arc<dyn ChatProvider>>, Error> {
    if cfg.base_url.as_deref().is_none_or(|u| u.trim().is_empty()) {
        return Ok(None);
    }
    let c = openai_config(cfg)?;
    let p =
        OpenAiProvider::new(c).map_err(|e| Error::Llm(format!("cannot set up the client: {e}")))?;
    Ok(Some(Arc::new(p)))
}

/// The client configuration `[llm]` describes (the same rules as the `WEFT_LLM_*`
/// variables, which are the keys' environment names).
pub fn openai_config(cfg: &LlmConfig) -> Result<OpenAiConfig, Error> {
    let get = |k: &str| -> Option<String> {
        match k {
            "WEFT_LLM_BASE_URL" => cfg.base_url.clone(),
            "WEFT_LLM_MODEL" => cfg.model.clone(),
            "WEFT_LLM_API_KEY" => cfg.api_key.clone(),
            "WEFT_LLM_AZURE_API_VERSION" => cfg.azure_api_version.clone(),
            "WEFT_LLM_TIMEOUT_MS" => cfg.timeout_ms.map(|v| v.to_string()),
            "WEFT_LLM_MAX_RETRIES" => cfg.max_retries.map(|v| v.to_string()),
            "WEFT_LLM_PREFILL_TOOL_CALL" => cfg.prefill_tool_call.map(|v| v.to_string()),
            _ => None,
        }
    };
    OpenAiConfig::from_lookup(get).map_err(|e| Error::Llm(e.to_string()))
}

/// The model for tools inside running plans (`llm.complete`, `agent.react`): `provider`,
/// else one that fails every call with [`NOT_CONFIGURED`]. With a `store` (and a tokio
/// runtime), every exchange is kept in its transcripts, filed under the instance
/// (`weft transcript`, `GET /v1/instances/{id}/transcripts`).
pub fn for_tools(
    provider: Option<Arc<dyn ChatProvider>>,
    store: Option<&Arc<dyn weft_store::Store>>,
) -> Arc<Llm> {
    let llm = Llm::new(provider.unwrap_or_else(|| Arc::new(Unconfigured)));
    let rt = tokio::runtime::Handle::try_current().ok();
    Arc::new(match (store, rt) {
        (Some(store), Some(rt)) => llm.with_transcripts(Arc::new(weft_llm::StoreTranscript::new(
            Arc::clone(store),
            &rt,
        ))),
        _ => llm,
    })
}

/// The planners' model: the configured provider, `[budget.planner]`'s ledger and the bus
/// its refusals are published on. Cheap to clone.
#[derive(Clone)]
pub struct Planner {
    provider: Option<Arc<dyn ChatProvider>>,
    budget: Option<Arc<Budget>>,
    telemetry: Arc<dyn TelemetrySink>,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Planner {
    /// `provider` behind `budget.planner`'s ledger (none set: no ledger), publishing on `bus`;
    /// the ledger counts each tenant's calls and tokens in `counts`.
    pub fn new(
        provider: Option<Arc<dyn ChatProvider>>,
        budget: &BudgetConfig,
        bus: Arc<dyn Bus>,
        counts: Arc<SharedCounts>,
    ) -> Planner {
        Planner {
            provider,
            budget: budget
                .planner_limits()
                .map(|l| Arc::new(Budget::new(l).shared(counts))),
            telemetry: Arc::new(BusTelemetry {
                bus,
                seq: AtomicU64::new(0),
            }),
        }
    }

    /// The model for one planner run (`None`: no provider is configured).
    pub fn llm(&self) -> Option<Llm> {
        let llm = Llm::new(Arc::clone(self.provider.as_ref()?))
            .with_telemetry(Arc::clone(&self.telemetry));
        Some(match &self.budget {
            Some(b) => llm.with_budget(Arc::clone(b)),
            None => llm,
        })
    }
}

/// `[budget.planner]`'s ledger for a planner run outside a node (`weft plan`): with a store,
/// it starts from the store's counters and [`PlannerQuota::sync`] adds the run's calls to
/// them, so one-shot runs count against the tenant's quota with the servers.
#[derive(Debug)]
pub struct PlannerQuota {
    budget: Arc<Budget>,
    synced: Option<Arc<crate::counts::Synced>>,
}

impl PlannerQuota {
    /// The ledger `budget` sets (`None` when `[budget.planner]` sets nothing), counted with
    /// `store`'s counters when given.
    pub async fn open(
        budget: &BudgetConfig,
        store: Option<Arc<dyn weft_store::Store>>,
    ) -> Result<Option<PlannerQuota>, Error> {
        let Some(limits) = budget.planner_limits() else {
            return Ok(None);
        };
        let counts = Arc::new(SharedCounts::new());
        let synced = match store {
            Some(store) => Some(
                crate::counts::Synced::start(
                    Arc::clone(&counts),
                    store,
                    std::time::Duration::from_millis(budget.sync_ms.max(1)),
                )
                .await?,
            ),
            None => None,
        };
        Ok(Some(PlannerQuota {
            budget: Arc::new(Budget::new(limits).shared(counts)),
            synced,
        }))
    }

    /// The ledger, for [`Llm::with_budget`].
    pub fn budget(&self) -> Arc<Budget> {
        Arc::clone(&self.budget)
    }

    /// Adds what the run counted to the store's counters (nothing to do without a store).
    pub async fn sync(&self) -> Result<(), Error> {
        match &self.synced {
            Some(s) => s.sync().await,
            None => Ok(()),
        }
    }
}

/// Planner telemetry into the logs, and the ledger's refusals (`planner.throttled`,
/// `planner.rejected`) onto the bus as CloudEvents of the tenant.
struct BusTelemetry {
    bus: Arc<dyn Bus>,
    seq: AtomicU64,
}

impl TelemetrySink for BusTelemetry {
    fn emit(&self, event: TelemetryEvent) {
        let published = matches!(
            event.kind,
            TelemetryKind::Throttled | TelemetryKind::Rejected
        );
        if published && self.bus.wants() {
            let c = &event.correlation;
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            self.bus.publish(CloudEvent {
                specversion: "1.0".to_string(),
                id: format!("{}-{seq}", c.correlation_id),
                source: format!(
                    "weft://{}/{}/{}",
                    c.tenant,
                    c.plan.as_deref().unwrap_or(""),
                    c.instance.as_deref().unwrap_or("")
                ),
                ty: weft_runtime::bus::event_type(event.kind.as_str()),
                time: weft_runtime::clock::rfc3339(event.at_ms),
                datacontenttype: "application/json".to_string(),
                data: serde_json::to_value(&event).unwrap_or_default(),
                tenant: c.tenant.clone(),
                instance: c.instance.clone(),
                correlation: Some(c.correlation_id.clone()),
            });
        }
        TracingTelemetry.emit(event);
    }
}

/// A provider that fails every call with [`NOT_CONFIGURED`].
#[derive(Debug)]
struct Unconfigured;

impl ChatProvider for Unconfigured {
    fn name(&self) -> &str {
        "unconfigured"
    }

    fn chat<'a>(
        &'a self,
        _request: &'a ChatRequest,
    ) -> weft_llm::BoxFuture<'a, weft_llm::Result<ChatResponse>> {
        Box::pin(std::future::ready(Err(weft_llm::Error::Config(
            NOT_CONFIGURED.to_string(),
        ))))
    }
}
