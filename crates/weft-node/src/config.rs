//! The configuration model: what `weft.toml` may say, with the defaults of the embedded
//! weft (no file needed). Loading, layering and provenance are in `load.rs`; the checks that
//! need more than a type are in `check.rs`.
//!
//! Every section denies unknown keys. A new capability adds its section here, its checks to
//! `check.rs` and what it builds to `node.rs`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use weft_builtins::{EmailConfig, HttpConfig, ProcessConfig, ToolsConfig};
pub use weft_sources::McpServerDef;
pub use weft_sources::ToolDef;

/// Everything a running weft is built from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where instances, journals and plans are kept.
    pub store: StoreConfig,
    /// Where lifecycle events go.
    pub bus: BusConfig,
    /// The tools steps may call: the built-in tools' settings (`[tools.http]`,
    /// `[tools.email]`, `[tools.process]`) and the tools users declare
    /// (`[[tools.declared]]`).
    pub tools: ToolsSection,
    /// The language model behind `weft plan`, repair, `llm.complete` and `/plan/react`.
    pub llm: LlmConfig,
    /// Input limits for plans and analysis.
    pub limits: LimitsConfig,
    /// `weft serve`.
    pub server: ServerSection,
    /// Logs and trace export.
    pub telemetry: TelemetryConfig,
    /// The ReAct planner served over NATS request/reply by `weft serve`.
    pub planner: PlannerConfig,
    /// The journal's keyed chain (HMAC-SHA256, key held outside the store).
    pub journal: JournalConfig,
    /// Rego policies deciding every tool call.
    pub policy: PolicyConfig,
    /// The operator's budgets: per instance, and quotas per plan and per tenant.
    pub budget: BudgetConfig,
}

/// `[budget]`: budgets the operator sets for every plan, counted at the chain's budget stage
/// with a plan's own `limits` (`weft_runtime::quota`). `instance` limits each instance whose
/// plan sets no `limits`; `plan` and `tenant` are quotas shared by all instances of one plan
/// (of one tenant), and of one tenant, within each `period_secs` (aligned on the epoch).
/// A durable node counts them in the store, shared with every process on it and across
/// restarts: each process adds what it counted every `sync_ms` (two processes together can
/// pass a quota by what the other charged since its last sync). The fields of each are those of a plan's
/// `limits` (`max_tool_calls`, `max_llm_calls`, `max_llm_tokens`, `max_cost`, and for
/// `instance` also `max_wall_ms`). No budget set: only plans' own limits count.
///
/// `planner` is the tenant's quota of planner calls (`weft plan`, `POST /v1/plan`,
/// `/v1/generate`, `/plan/react`, the ReAct planner on the bus; not the models plans call,
/// which `tenant` counts): `max_llm_calls` and `max_llm_tokens` per `period_secs` (refused
/// with `planner.rejected`), `calls_per_minute` (refused with `planner.throttled`, to retry
/// later).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Limits of every instance whose plan sets none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<weft_core::PlanLimits>,
    /// Quota of all instances of one plan in a period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<weft_core::PlanLimits>,
    /// Quota of all instances of one tenant in a period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<weft_core::PlanLimits>,
    /// Quota of one tenant's planner calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planner: Option<PlannerBudget>,
    /// The quotas' period, in seconds.
    pub period_secs: u64,
    /// How often a durable node adds what it counted to the store's quota counters and
    /// reads the other processes' counts, in milliseconds.
    pub sync_ms: u64,
    /// A call over any budget, a plan's own limits included: `fail` (the step fails with
    /// `budget_exceeded`) or `pause` (the instance is paused; once resumed the call is
    /// charged again).
    pub on_exceeded: OnExceeded,
}

/// `[budget.planner]`: one tenant's planner calls (see [`BudgetConfig`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerBudget {
    /// Model calls per period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_llm_calls: Option<u64>,
    /// Model tokens (prompt and completion) per period; a call is refused when its prompt
    /// and `max_tokens` could cross it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_llm_tokens: Option<u64>,
    /// Model calls in any minute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls_per_minute: Option<u32>,
}

/// What a call over a budget does (`[budget] on_exceeded`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExceeded {
    /// The step fails with `budget_exceeded`.
    #[default]
    Fail,
    /// The instance is paused until someone resumes it.
    Pause,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            instance: None,
            plan: None,
            tenant: None,
            planner: None,
            period_secs: 86_400,
            sync_ms: 200,
            on_exceeded: OnExceeded::Fail,
        }
    }
}

impl BudgetConfig {
    /// The planners' ledger (`None`: no planner budget is set).
    pub fn planner_limits(&self) -> Option<weft_llm::BudgetLimits> {
        let p = self.planner.as_ref()?;
        Some(weft_llm::BudgetLimits {
            per_tenant: weft_llm::Limit::new(p.max_llm_tokens, p.max_llm_calls),
            tenant_calls_per_window: p.calls_per_minute,
            rate_window: Some(std::time::Duration::from_secs(60)),
            period: Some(std::time::Duration::from_secs(self.period_secs.max(1))),
            ..weft_llm::BudgetLimits::default()
        })
    }

    /// The engine's budgets (`None`: the operator set none and plans' limits fail calls).
    pub fn quotas(&self) -> Option<weft_runtime::quota::QuotaConfig> {
        let set = self.instance.is_some() || self.plan.is_some() || self.tenant.is_some();
        if !set && self.on_exceeded == OnExceeded::Fail {
            return None;
        }
        Some(weft_runtime::quota::QuotaConfig {
            instance: self.instance.clone(),
            plan: self.plan.clone(),
            tenant: self.tenant.clone(),
            period_ms: self.period_secs.saturating_mul(1000).max(1),
            on_exceeded: match self.on_exceeded {
                OnExceeded::Fail => weft_runtime::quota::OnExceeded::Fail,
                OnExceeded::Pause => weft_runtime::quota::OnExceeded::Pause,
            },
        })
    }
}

/// `[policy]`: the deployment's Rego bundle (`weft_policy`), evaluated before every tool
/// call at the chain's policy stage and on every plan before it is accepted, and tenants'
/// own bundles on top of it. No bundle: every call is allowed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// `.rego` files, or directories whose `*.rego` files are read (in name order); one
    /// of them declares `package weft` with the rule `deny` (a set of reasons).
    /// `WEFT_POLICY_BUNDLES` takes them comma-separated.
    pub bundles: Vec<std::path::PathBuf>,
    /// A directory with a directory of `.rego` files per tenant (`<dir>/<tenant>/`): a
    /// tenant's policy is the deployment's bundle and its own, compiled together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenants_dir: Option<std::path::PathBuf>,
    /// How often the bundles' files are checked for changes, in milliseconds; a change
    /// reloads them (a bundle that does not compile is refused and the previous ones stay).
    /// 0: never.
    pub reload_ms: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            bundles: Vec::new(),
            tenants_dir: None,
            reload_ms: 2000,
        }
    }
}

impl PolicyConfig {
    /// Whether any bundle is configured.
    pub fn any(&self) -> bool {
        !self.bundles.is_empty() || self.tenants_dir.is_some()
    }

    /// Where the bundles are, as `weft_policy::PolicySet::load` reads them.
    pub fn locations(&self) -> weft_policy::Bundles {
        weft_policy::Bundles {
            deployment: self.bundles.clone(),
            tenants_dir: self.tenants_dir.clone(),
        }
    }
}

/// `[journal]`: the key of a keyed journal chain (see `weft_store::chain` and
/// docs/reliability.md). A new store opened with a key is keyed for good; a keyed store
/// opened without it can be read, not written or verified.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JournalConfig {
    /// A file holding the key (at least 32 bytes of text; `openssl rand -hex 32`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hmac_key_file: Option<String>,
    /// The key itself (set it through `WEFT_JOURNAL_HMAC_KEY`, not in the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hmac_key: Option<String>,
}

/// Largest journal key file read.
const MAX_KEY_FILE_BYTES: u64 = 4096;

impl JournalConfig {
    /// The configured key, if any; `Err` says what is wrong (both set, an unreadable file,
    /// a key too short), with the key's name.
    pub fn key(&self) -> Result<Option<weft_store::ChainKey>, String> {
        let text = match (&self.hmac_key, &self.hmac_key_file) {
            (Some(_), Some(_)) => {
                return Err(
                    "journal.hmac_key and journal.hmac_key_file are both set; keep one".into(),
                );
            }
            (Some(k), None) => k.clone(),
            (None, Some(path)) => {
                use std::io::Read as _;
                let mut text = String::new();
                std::fs::File::open(path)
                    .and_then(|f| f.take(MAX_KEY_FILE_BYTES).read_to_string(&mut text))
                    .map_err(|e| format!("journal.hmac_key_file: cannot read `{path}`: {e}"))?;
                text
            }
            (None, None) => return Ok(None),
        };
        weft_store::ChainKey::parse(&text)
            .map(Some)
            .map_err(|e| format!("journal.hmac_key: {e}"))
    }
}

/// `[store]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// A SQLite file (`.weft/weft.db`, `sqlite:PATH`) or a `postgres://` URL; the scheme
    /// picks the backend from the openers table (`openers.rs`).
    pub url: String,
    /// Snapshot and compact a reactive instance every this many records (0: never).
    pub snapshot_every: u64,
    /// This process's lease owner id (default `$WEFT_OWNER`, else `weft-<host>/<pid>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// How long a lease lasts without renewal, in milliseconds.
    pub lease_ttl_ms: u64,
    /// How often leases are renewed, in milliseconds (keep it well under the ttl).
    pub lease_renew_ms: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        let d = weft_durable::DurableConfig::default();
        StoreConfig {
            url: weft_store::DEFAULT_SQLITE_PATH.to_string(),
            snapshot_every: weft_durable::DEFAULT_SNAPSHOT_EVERY,
            owner: None,
            lease_ttl_ms: u64::try_from(d.lease_ttl_ms).unwrap_or(30_000),
            lease_renew_ms: d.lease_renew_ms,
        }
    }
}

/// `[tools]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsSection {
    /// `http.request`.
    pub http: HttpConfig,
    /// `send_email`.
    pub email: EmailConfig,
    /// `process.run`.
    pub process: ProcessConfig,
    /// Tools users declare, each with its source (`weft-sources`).
    pub declared: Vec<ToolDef>,
    /// MCP servers whose tools join the registry as `<name>.<tool>` (`[[tools.mcp]]`,
    /// discovered when the node starts: [`crate::Builder::discover_mcp`]).
    pub mcp: Vec<McpServerDef>,
    /// The NATS server of the `worker` tools tenants declare through the API
    /// (`PUT /v1/tools/{name}`).
    pub worker_url: String,
    /// Most tools one tenant may declare through the API.
    pub api_max_tools: usize,
}

impl Default for ToolsSection {
    fn default() -> Self {
        ToolsSection {
            http: HttpConfig::default(),
            email: EmailConfig::default(),
            process: ProcessConfig::default(),
            declared: Vec::new(),
            mcp: Vec::new(),
            worker_url: weft_sources::worker::DEFAULT_URL.to_string(),
            api_max_tools: 1_000,
        }
    }
}

impl ToolsSection {
    /// The built-in tools' settings.
    pub fn builtin(&self) -> ToolsConfig {
        ToolsConfig {
            http: self.http.clone(),
            email: self.email.clone(),
            process: self.process.clone(),
        }
    }
}

/// `[bus]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusConfig {
    /// `inproc:` (the in-process bus); the scheme picks the backend from the openers table.
    pub url: String,
    /// Events buffered per slow subscriber before it misses some.
    pub capacity: usize,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            url: "inproc:".to_string(),
            capacity: 65_536,
        }
    }
}

/// `[llm]`: an OpenAI-compatible server. Unset `base_url`: no model (the LLM features say
/// what to set; `llm.complete` steps fail with that message).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// The server's base URL, e.g. `http://127.0.0.1:8081/v1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The model name sent with every request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Bearer key (a secret: `weft config` never prints it; prefer `WEFT_LLM_API_KEY`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Azure OpenAI's `api-version`, which also switches to Azure's URL and header style.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure_api_version: Option<String>,
    /// Whole-request timeout, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Retries of a failed request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Start the assistant's reply with the tool call (for small models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_tool_call: Option<bool>,
}

/// `[limits]`: what a plan or an analysis may cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest plan document, in bytes.
    pub max_plan_bytes: usize,
    /// Most steps a plan may have.
    pub max_steps: usize,
    /// Most events a plan may have.
    pub max_events: usize,
    /// Deepest JSON nesting in a plan.
    pub max_depth: usize,
    /// Longest event or step name, in characters.
    pub max_name_len: usize,
    /// Longest CEL expression, in bytes.
    pub max_expr_len: usize,
    /// Most reachable states `weft analyze` explores.
    pub max_states: usize,
    /// Deepest nesting of child plans (`plan.run`); deeper fails the step with `child_depth`.
    pub max_child_depth: usize,
    /// Operations one CEL evaluation may do inside comprehensions (its budget).
    pub cel_max_cost: u64,
    /// Size units (characters, bytes, elements, entries) one CEL evaluation may build inside
    /// comprehensions.
    pub cel_max_size: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let l = weft_core::Limits::default();
        LimitsConfig {
            max_plan_bytes: l.max_bytes,
            max_steps: l.max_steps,
            max_events: l.max_events,
            max_depth: l.max_depth,
            max_name_len: l.max_name_len,
            max_expr_len: l.max_expr_len,
            max_states: 1_000_000,
            max_child_depth: l.max_child_depth,
            cel_max_cost: l.cel_budget.max_cost,
            cel_max_size: l.cel_budget.max_size,
        }
    }
}

impl LimitsConfig {
    /// The plan loading limits.
    pub fn plan_limits(&self) -> weft_core::Limits {
        weft_core::Limits {
            max_bytes: self.max_plan_bytes,
            max_steps: self.max_steps,
            max_events: self.max_events,
            max_name_len: self.max_name_len,
            max_depth: self.max_depth,
            max_expr_len: self.max_expr_len,
            max_child_depth: self.max_child_depth,
            cel_budget: weft_core::cel_budget::Budget {
                max_cost: self.cel_max_cost,
                max_size: self.cel_max_size,
            },
        }
    }
}

/// `[server]`: `weft serve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    pub listen: String,
    /// API tokens: a JSON file `{"token": "tenant"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_file: Option<PathBuf>,
    /// API tokens inline, `tokA=tenant-a,tokB=tenant-b` (a secret; prefer the file or the
    /// environment). Neither set: one local tenant, loopback only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<String>,
    /// Largest request body, in bytes (plan documents have their own limit).
    pub body_limit: usize,
    /// Largest plan document body, in bytes.
    pub plan_body_limit: usize,
    /// Requests per second per tenant (0: unlimited).
    pub rate_limit: f64,
    /// Burst size per tenant.
    pub rate_burst: f64,
    /// Traces of finished instances kept in memory.
    pub trace_retention: usize,
    /// Milliseconds a client has to send a request's headers; also how long an idle
    /// keep-alive connection may wait for its next request.
    pub header_timeout_ms: u64,
    /// Milliseconds a client has to send a request's body.
    pub body_timeout_ms: u64,
    /// Most open connections; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Seconds a CloudEvent's (`source`, `id`) is remembered per tenant: a repeat within
    /// this window is answered as a duplicate and not applied again.
    pub event_dedup_secs: u64,
    /// Plan validations and analyses one tenant may run at once (more wait their turn).
    pub validate_concurrency: usize,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: "127.0.0.1:8080".to_string(),
            tokens_file: None,
            tokens: None,
            body_limit: 1 << 20,
            plan_body_limit: 8 << 20,
            rate_limit: 100_000.0,
            rate_burst: 200_000.0,
            trace_retention: 10_000,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            max_connections: 10_000,
            event_dedup_secs: 7 * 24 * 3600,
            validate_concurrency: 2,
        }
    }
}

/// `[telemetry]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OTLP/HTTP collector base URL for request and step spans (unset: the standard
    /// `OTEL_EXPORTER_OTLP_*` variables, else no export).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Log filter for stderr when `RUST_LOG` is unset (`warn`, `info`, `weft=debug`, …).
    pub log: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            log: "warn".to_string(),
        }
    }
}

/// `[planner]`: seed 004's ReAct planner served over NATS request/reply, the bus twin of
/// `POST /plan/react` (`planner_bus.rs`), run by `weft serve`. Unset `nats_url`: off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerConfig {
    /// The NATS server to serve on, e.g. `nats://127.0.0.1:4222` (unset: not served).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_url: Option<String>,
    /// The subject requests arrive on (no wildcards); answers go to each request's reply
    /// subject, or to `<subject>.reply.<trace_id>` for a request published without one.
    pub subject: String,
    /// The queue group: several weft nodes serving one subject share its requests.
    pub queue_group: String,
    /// The tenant the requests act as (the bus carries no token): its tools are called.
    pub tenant: String,
    /// Requests planned at once (at most 65536); one more is answered `busy` at once.
    pub max_concurrent: usize,
    /// Largest request payload, in bytes (larger: `payload_too_large`).
    pub max_request_bytes: usize,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            nats_url: None,
            subject: "weft.planner.react".to_string(),
            queue_group: "weft.planner".to_string(),
            tenant: "local".to_string(),
            max_concurrent: 16,
            max_request_bytes: 1 << 20,
        }
    }
}

/// Keys that have no default value (unset unless a file, the environment or a flag sets
/// them), with the kind of value they take. The keys with defaults come from
/// [`Config::default`] itself, so this list and the model cannot drift apart unnoticed: a
/// test deserializes a file setting every key.
pub(crate) const OPTIONAL_KEYS: &[(&str, Kind)] = &[
    ("store.owner", Kind::String),
    ("budget.instance.max_tool_calls", Kind::Integer),
    ("budget.instance.max_llm_calls", Kind::Integer),
    ("budget.instance.max_llm_tokens", Kind::Integer),
    ("budget.instance.max_cost", Kind::Float),
    ("budget.instance.max_wall_ms", Kind::Integer),
    ("budget.plan.max_tool_calls", Kind::Integer),
    ("budget.plan.max_llm_calls", Kind::Integer),
    ("budget.plan.max_llm_tokens", Kind::Integer),
    ("budget.plan.max_cost", Kind::Float),
    ("budget.tenant.max_tool_calls", Kind::Integer),
    ("budget.tenant.max_llm_calls", Kind::Integer),
    ("budget.tenant.max_llm_tokens", Kind::Integer),
    ("budget.tenant.max_cost", Kind::Float),
    ("budget.planner.max_llm_calls", Kind::Integer),
    ("budget.planner.max_llm_tokens", Kind::Integer),
    ("budget.planner.calls_per_minute", Kind::Integer),
    ("policy.tenants_dir", Kind::String),
    ("journal.hmac_key_file", Kind::String),
    ("journal.hmac_key", Kind::String),
    ("llm.base_url", Kind::String),
    ("llm.model", Kind::String),
    ("llm.api_key", Kind::String),
    ("llm.azure_api_version", Kind::String),
    ("llm.timeout_ms", Kind::Integer),
    ("llm.max_retries", Kind::Integer),
    ("llm.prefill_tool_call", Kind::Boolean),
    ("server.tokens_file", Kind::String),
    ("server.tokens", Kind::String),
    ("telemetry.otlp_endpoint", Kind::String),
    ("planner.nats_url", Kind::String),
    ("tools.process.cwd", Kind::String),
    ("tools.email.smtp.host", Kind::String),
    ("tools.email.smtp.port", Kind::Integer),
    ("tools.email.smtp.username", Kind::String),
    ("tools.email.smtp.password", Kind::String),
    ("tools.email.smtp.security", Kind::String),
    ("tools.email.smtp.timeout_ms", Kind::Integer),
];

/// Keys whose values are secrets: shown as `<secret>`, never printed.
pub(crate) const SECRET_KEYS: &[&str] = &[
    "llm.api_key",
    "server.tokens",
    "tools.email.smtp.password",
    "journal.hmac_key",
];

/// Keys whose value is a whole structure (a list of tables), checked by the model's own
/// types when the configuration is deserialized; no environment variable sets them.
pub(crate) const STRUCTURED_KEYS: &[&str] = &["tools.declared", "tools.mcp"];

/// The kind of value a key takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    String,
    Integer,
    Float,
    Boolean,
    /// A list of strings (in the environment: comma-separated).
    List,
    /// A list of tables ([`STRUCTURED_KEYS`]).
    Tables,
}

impl Kind {
    pub(crate) fn of(v: &toml::Value) -> Option<Kind> {
        match v {
            toml::Value::String(_) => Some(Kind::String),
            toml::Value::Integer(_) => Some(Kind::Integer),
            toml::Value::Float(_) => Some(Kind::Float),
            toml::Value::Boolean(_) => Some(Kind::Boolean),
            toml::Value::Array(_) => Some(Kind::List),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::String => "a string",
            Kind::Integer => "an integer",
            Kind::Float => "a number",
            Kind::Boolean => "true or false",
            Kind::List => "a list of strings",
            Kind::Tables => "a list of tables",
        }
    }
}
