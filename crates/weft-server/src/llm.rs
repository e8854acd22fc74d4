//! Routes that use a language model (weft-llm): generate a plan through the critic loop,
//! explain a plan (the template explanation works without a model), repair a failed
//! instance, and `POST /plan/react` (seed 004's contract, request and response types from
//! `weft_llm::react`). Without a configured provider they answer `503 llm_unavailable`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;
use weft_core::ToolSpec;
use weft_llm::{Correlation, Llm, PlanOptions};

use crate::auth::Tenant;
use crate::body::{ApiPath, JsonBody, PlanBody};
use crate::error::{ApiError, ApiResult, Problem, Problems};
use crate::names::check_name;
use crate::state::AppState;

/// The planners' model (`[budget.planner]`'s ledger in front of it).
fn llm(state: &AppState) -> ApiResult<Llm> {
    state
        .inner
        .node
        .planner_llm()
        .ok_or_else(ApiError::llm_unavailable)
}

/// The tools `tenant`'s plans may call (the node's and its own), for the planner's prompt.
async fn tools(state: &AppState, tenant: &str) -> ApiResult<Vec<ToolSpec>> {
    crate::tools::refresh(state, tenant).await?;
    Ok(state
        .inner
        .node
        .registry_for(tenant)
        .iter()
        .map(|t| t.spec().clone())
        .collect())
}

fn llm_error(e: weft_llm::Error) -> ApiError {
    match e {
        weft_llm::Error::InvalidInput(m) => ApiError::bad_request(m),
        e @ weft_llm::Error::PlanningFailed { .. } => {
            let findings = match &e {
                weft_llm::Error::PlanningFailed { findings, .. } => {
                    serde_json::to_value(findings).unwrap_or(Value::Null)
                }
                _ => Value::Null,
            };
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_plan",
                e.to_string(),
            )
            .findings(findings)
        }
        weft_llm::Error::Config(m) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "llm_unavailable", m)
        }
        e @ weft_llm::Error::BudgetExceeded { .. } => {
            refusal(weft_llm::react::Refusal::from_error(e))
        }
        e => ApiError::new(StatusCode::BAD_GATEWAY, "llm_failed", e.to_string()).hint(
            "the model or its server failed; try again or check the server's LLM configuration",
        ),
    }
}

/// `POST /v1/generate` body.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct GenerateRequest {
    /// What the plan should do.
    pub instruction: String,
    /// Candidates to ask for (default 3).
    #[serde(default)]
    pub max_attempts: Option<u32>,
}

/// `POST /v1/generate` result.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Generated {
    /// The accepted plan.
    #[schema(value_type = Object)]
    pub plan: Value,
    /// Rejected candidates: `{round, findings, feedback}`.
    #[schema(value_type = Vec<Object>)]
    pub rounds: Vec<Value>,
    /// Non-error findings on the accepted plan.
    #[schema(value_type = Vec<Object>)]
    pub findings: Vec<Value>,
    /// Candidates asked for.
    pub attempts: u32,
}

/// Generate a plan from an instruction (LLM planner with the critic loop).
#[utoipa::path(post, path = "/v1/generate", operation_id = "llm_generate", tag = "llm",
    request_body(content = GenerateRequest, content_type = "application/json"),
    responses(
        (status = 200, body = Generated),
        Problems,
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 502, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn generate(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    JsonBody(req): JsonBody<GenerateRequest>,
) -> ApiResult<Json<Generated>> {
    let llm = llm(&state)?;
    let tools = tools(&state, &tenant).await?;
    let mut opts = PlanOptions {
        correlation: Correlation::new(tenant.clone()),
        max_attempts: req.max_attempts.unwrap_or(3).clamp(1, 10),
        ..PlanOptions::default()
    };
    // The candidates pass the checks a stored plan does: the critic hands refusals back.
    opts.analysis.governance = Some(state.inner.node.governance(&tenant));
    let o = weft_llm::plan(&llm, &req.instruction, &tools, &opts)
        .await
        .map_err(llm_error)?;
    state
        .inner
        .metrics
        .llm_usage(o.usage.prompt_tokens, o.usage.completion_tokens);
    Ok(Json(Generated {
        plan: serde_json::to_value(&o.plan).map_err(ApiError::internal)?,
        rounds: o
            .rounds
            .iter()
            .map(|r| json!({"round": r.attempt, "findings": r.findings, "feedback": r.feedback}))
            .collect(),
        findings: o
            .findings
            .iter()
            .map(|f| serde_json::to_value(f).unwrap_or(Value::Null))
            .collect(),
        attempts: o.attempts,
    }))
}

/// `POST /v1/explain` body: a plan document, or the name of a stored plan.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ExplainRequest {
    /// A plan document.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub plan: Option<Value>,
    /// A stored plan's name.
    #[serde(default)]
    pub name: Option<String>,
    /// Stored version (latest when absent).
    #[serde(default)]
    pub version: Option<u32>,
    /// Use the model (default: when one is configured).
    #[serde(default)]
    pub llm: Option<bool>,
}

/// `POST /v1/explain` result.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Explained {
    /// The explanation.
    pub text: String,
    /// `template` or `llm`.
    #[schema(value_type = String)]
    pub source: Value,
    /// Problems with the model's text.
    pub warnings: Vec<String>,
}

/// Explain a plan in plain language.
#[utoipa::path(post, path = "/v1/explain", operation_id = "llm_explain", tag = "llm",
    request_body(content = ExplainRequest, content_type = "application/json"),
    responses(
        (status = 200, body = Explained),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 502, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn explain(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    PlanBody(req): PlanBody<ExplainRequest>,
) -> ApiResult<Json<Explained>> {
    let doc = match (req.plan, &req.name) {
        (Some(d), _) => d,
        (None, Some(name)) => {
            check_name("plan", name)?;
            state
                .store()
                .get_plan(&tenant, name, req.version)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("plan `{name}`")))?
                .document
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "give `plan` (a plan document) or `name` (a stored plan)",
            ));
        }
    };
    let bytes = Bytes::from(serde_json::to_vec(&doc).map_err(ApiError::internal)?);
    let plan = weft_core::parse_plan(&bytes, &weft_core::Limits::default()).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_plan",
            format!("the plan does not load: {e}"),
        )
    })?;
    let model = match req.llm {
        Some(true) => Some(llm(&state)?),
        Some(false) => None,
        None => state.inner.node.planner_llm(),
    };
    let e = weft_llm::explain(model.as_ref(), &Correlation::new(tenant), &plan)
        .await
        .map_err(llm_error)?;
    Ok(Json(Explained {
        text: e.text,
        source: serde_json::to_value(e.source).unwrap_or(Value::Null),
        warnings: e.warnings,
    }))
}

/// `POST /v1/instances/{id}/repair` result.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Repaired {
    /// The revised plan.
    #[schema(value_type = Object)]
    pub plan: Value,
    /// The marking mapped onto it: `{"event": [payload, …]}`.
    #[schema(value_type = Object)]
    pub marking: Value,
    /// Candidates asked for.
    pub attempts: u32,
    /// Non-error findings on the revised plan.
    #[schema(value_type = Vec<Object>)]
    pub findings: Vec<Value>,
}

/// Ask the model for a revised plan for a failed or paused instance.
#[utoipa::path(post, path = "/v1/instances/{id}/repair", operation_id = "llm_repair", tag = "llm",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = Repaired),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 502, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn repair(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Repaired>> {
    let (plan, failure, marking) = crate::instances::repair_inputs(&state, &tenant, &id).await?;
    let llm = llm(&state)?;
    let p = (*plan.plan).clone();
    let req = weft_llm::RepairRequest {
        instruction: p
            .description
            .clone()
            .unwrap_or_else(|| format!("plan {}", p.plan_name)),
        plan: p,
        failure,
        marking,
        journal_excerpt: String::new(),
        tools: tools(&state, &tenant).await?,
    };
    let opts = PlanOptions {
        correlation: Correlation::new(tenant),
        ..PlanOptions::default()
    };
    let o = weft_llm::repair(&llm, &req, &opts)
        .await
        .map_err(llm_error)?;
    state
        .inner
        .metrics
        .llm_usage(o.usage.prompt_tokens, o.usage.completion_tokens);
    Ok(Json(Repaired {
        plan: serde_json::to_value(&o.plan).map_err(ApiError::internal)?,
        marking: serde_json::to_value(&o.marking).map_err(ApiError::internal)?,
        attempts: o.attempts,
        findings: o
            .findings
            .iter()
            .map(|f| serde_json::to_value(f).unwrap_or(Value::Null))
            .collect(),
    }))
}

/// The seed-004 ReAct planner.
#[utoipa::path(post, path = "/plan/react", operation_id = "llm_react", tag = "llm",
    request_body(content = Object, description = "A seed-004 PlannerRequest", content_type = "application/json"),
    responses(
        (status = 200, body = Object, description = "A seed-004 PlannerResponse"),
        Problems,
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 502, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn react(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    JsonBody(req): JsonBody<weft_llm::PlannerRequest>,
) -> ApiResult<Json<weft_llm::PlannerResponse>> {
    // The request → response logic is shared with the NATS planner subject (weft-node).
    // The node's tools and the tenant's own.
    crate::tools::refresh(&state, &tenant).await?;
    let tools = state.inner.node.outside_registry_for(&tenant);
    let r = weft_llm::react::answer(
        state.inner.node.planner_llm().as_ref(),
        &tools,
        &Correlation::new(tenant),
        &req,
    )
    .await
    .map_err(refusal)?;
    if let Some(u) = &r.usage {
        state
            .inner
            .metrics
            .llm_usage(u.prompt_tokens, u.completion_tokens);
    }
    Ok(Json(r))
}

/// A refusal of the shared ReAct service as a problem response (same code, status, hint).
fn refusal(r: weft_llm::react::Refusal) -> ApiError {
    let status = StatusCode::from_u16(r.kind.status()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut e = ApiError::new(status, r.code, r.message);
    if r.code == "planner_throttled" {
        // The ledger's rate window is a minute.
        e.retry_after = Some(60);
    }
    match r.hint {
        Some(h) => e.hint(h),
        None => e,
    }
}
