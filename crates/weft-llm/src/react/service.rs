//! The ReAct planner as a service: one `PlannerRequest` → one `PlannerResponse` or a
//! [`Refusal`], the logic shared by every front end that serves seed 004's planner (`POST
//! /plan/react` in weft-server, the NATS request/reply subject in weft-node), so both check
//! the toolset, pick the model, call tools as the caller's tenant and classify failures the
//! same way. A front end only decodes its request and encodes the answer or the refusal
//! (HTTP status and problem JSON; a JSON error object on the bus).

use std::sync::Arc;

use weft_tools::{Registry, ToolContext};

use super::executor::RegistryExecutor;
use super::types::{PlannerRequest, PlannerResponse};
use crate::error::Error;
use crate::ids::Correlation;
use crate::session::Llm;

/// Why a request got no [`PlannerResponse`]: a stable `code` (the same on every front end),
/// the message, an optional hint, and the [`RefusalKind`] a front end maps to its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of failure (for an HTTP status).
    pub kind: RefusalKind,
    /// Stable code: `invalid_request`, `unknown_tool`, `llm_unavailable`, `llm_failed`, …
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<&'static str>,
}

/// The class of a [`Refusal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The request itself is wrong (HTTP 400).
    Invalid,
    /// The request is well formed but cannot be served as asked (HTTP 422).
    Unprocessable,
    /// No model is configured (HTTP 503).
    Unavailable,
    /// The model or its server failed before any progress (HTTP 502).
    Upstream,
    /// A planner budget refused the model call (HTTP 429).
    OverBudget,
}

impl RefusalKind {
    /// The HTTP status of this kind.
    pub fn status(self) -> u16 {
        match self {
            RefusalKind::Invalid => 400,
            RefusalKind::Unprocessable => 422,
            RefusalKind::Unavailable => 503,
            RefusalKind::Upstream => 502,
            RefusalKind::OverBudget => 429,
        }
    }
}

impl Refusal {
    fn new(kind: RefusalKind, code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            kind,
            code,
            message: message.into(),
            hint: None,
        }
    }

    fn hint(mut self, hint: &'static str) -> Self {
        self.hint = Some(hint);
        self
    }

    /// The refusal for an error of the loop (before it made progress: after some, the loop
    /// returns the partial trace with an `error` field instead).
    pub fn from_error(e: Error) -> Self {
        match e {
            Error::InvalidInput(m) => Refusal::new(RefusalKind::Invalid, "invalid_request", m),
            e @ Error::PlanningFailed { .. } => {
                Refusal::new(RefusalKind::Unprocessable, "invalid_plan", e.to_string())
            }
            Error::Config(m) => Refusal::new(RefusalKind::Unavailable, "llm_unavailable", m),
            e @ Error::BudgetExceeded { throttled, .. } => {
                let (code, hint) = if throttled {
                    ("planner_throttled", "retry in a minute")
                } else {
                    (
                        "planner_rejected",
                        "the tenant's planner quota is used up until the period ends ([budget.planner] in weft.toml)",
                    )
                };
                Refusal::new(RefusalKind::OverBudget, code, e.to_string()).hint(hint)
            }
            e => Refusal::new(RefusalKind::Upstream, "llm_failed", e.to_string()).hint(
                "the model or its server failed; try again or check the server's LLM configuration",
            ),
        }
    }

    /// No model configured.
    pub fn llm_unavailable() -> Self {
        Refusal::new(
            RefusalKind::Unavailable,
            "llm_unavailable",
            "no LLM provider is configured on this server",
        )
        .hint(
            "start `weft serve` with WEFT_LLM_BASE_URL (and WEFT_LLM_MODEL, WEFT_LLM_API_KEY) set",
        )
    }

    /// The request could not be decoded (a front end's own check, same code everywhere).
    pub fn invalid(message: impl Into<String>) -> Self {
        Refusal::new(RefusalKind::Invalid, "invalid_request", message)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.code, self.message)
    }
}

/// Serves one planner request: every toolset entry must name a tool of `tools` (built-in or
/// declared; else `unknown_tool`), a model must be configured (else `llm_unavailable`), then
/// the loop runs with `tools` called as `corr.tenant` (a worker tool's subject names it).
/// An LLM error before any progress is a refusal; after some, the response carries the
/// partial trace and an `error` field.
pub async fn answer(
    llm: Option<&Llm>,
    tools: &Arc<Registry>,
    corr: &Correlation,
    req: &PlannerRequest,
) -> Result<PlannerResponse, Refusal> {
    let missing: Vec<&str> = req
        .toolset
        .iter()
        .map(|d| d.tool_id.as_str())
        .filter(|id| tools.get(id).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(Refusal::new(
            RefusalKind::Unprocessable,
            "unknown_tool",
            format!(
                "the toolset names tools this server does not have: {}",
                missing
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .hint("declare them in weft.toml ([[tools.declared]]) or pick tools `weft tools` lists"));
    }
    let llm = llm.ok_or_else(Refusal::llm_unavailable)?;
    let exec = RegistryExecutor::new(
        Arc::clone(tools),
        ToolContext {
            // The tools act for the caller's tenant (a worker tool's subject names it).
            tenant: Arc::from(corr.tenant.as_str()),
            ..ToolContext::detached("react")
        },
    );
    super::run_react(llm, corr, req, &exec)
        .await
        .map_err(Refusal::from_error)
}
