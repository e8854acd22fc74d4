//! Human approvals over HTTP: `GET /v1/instances/{id}/approvals` lists the approvals of an
//! instance's firings in flight, `POST /v1/instances/{id}/approvals/{step}` grants or denies
//! the oldest pending one of a step. The engine journals the decision and wakes the waiting
//! call (`weft_runtime`'s approvals); the answer comes once the decision is durable.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::body::{ApiPath, JsonBody};
use crate::error::{ApiError, ApiResult, Problem, Problems};
use crate::instances::owned;
use crate::names::check_name;
use crate::state::AppState;

/// Longest principal or comment kept with a decision, in characters.
const MAX_TEXT: usize = 1024;

/// `GET /v1/instances/{id}/approvals`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ApprovalList {
    /// The approvals of firings in flight, oldest first: `{key, step, firing, reasons,
    /// requested_ms, deadline_ms, default, decision}`.
    #[schema(value_type = Vec<Object>)]
    pub approvals: Vec<Value>,
}

/// List an instance's approvals.
#[utoipa::path(get, path = "/v1/instances/{id}/approvals", operation_id = "instances_approvals", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = ApprovalList),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ApprovalList>> {
    let o = owned(&state, &tenant, &id).await?;
    let approvals = match &o.live {
        Some(_) => state
            .inner
            .durable
            .engine()
            .approvals(&id)
            .unwrap_or_default()
            .iter()
            .filter_map(|a| serde_json::to_value(a).ok())
            .collect(),
        None => Vec::new(),
    };
    Ok(Json(ApprovalList { approvals }))
}

/// `POST /v1/instances/{id}/approvals/{step}` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecideRequest {
    /// `grant` or `deny`.
    pub decision: String,
    /// Who decides (recorded with the decision; the bearer token authenticates the tenant,
    /// not the person). Default: `tenant:<tenant>`.
    #[serde(default)]
    pub principal: Option<String>,
    /// Why.
    #[serde(default)]
    pub comment: Option<String>,
    /// Which firing of the step (default: the oldest one waiting).
    #[serde(default)]
    pub firing: Option<u64>,
}

/// Grant or deny a step's pending approval.
#[utoipa::path(post, path = "/v1/instances/{id}/approvals/{step}", operation_id = "instances_decide", tag = "instances",
    params(
        ("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"),
        ("step" = String, Path, description = "The step whose firing waits"),
    ),
    request_body(content = DecideRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The decided approval", body = Object),
        Problems,
        (status = 503, description = "`store_unavailable` (with `Retry-After`): the store refuses writes", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn decide(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath((id, step)): ApiPath<(String, String)>,
    JsonBody(req): JsonBody<DecideRequest>,
) -> ApiResult<Json<Value>> {
    let o = owned(&state, &tenant, &id).await?;
    check_name("step", &step)?;
    let granted = match req.decision.as_str() {
        "grant" => true,
        "deny" => false,
        other => {
            return Err(ApiError::bad_request(format!(
                "`decision` is `{}`; it must be `grant` or `deny`",
                other.chars().take(64).collect::<String>()
            )));
        }
    };
    let text = |what: &str, v: Option<String>| -> ApiResult<Option<String>> {
        match v {
            Some(s) if s.chars().count() > MAX_TEXT => Err(ApiError::bad_request(format!(
                "`{what}` is longer than {MAX_TEXT} characters"
            ))),
            Some(s) if s.chars().any(|c| c.is_control() && c != '\n') => Err(
                ApiError::bad_request(format!("`{what}` contains control characters")),
            ),
            other => Ok(other),
        }
    };
    let principal = text("principal", req.principal)?.unwrap_or_else(|| format!("tenant:{tenant}"));
    let comment = text("comment", req.comment)?;
    if o.live.is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_approval",
            format!("instance `{id}` is not running here, so nothing of it waits for an approval"),
        ));
    }
    crate::written::check(&state)?;
    let engine = state.inner.durable.engine();
    let view = engine
        .decide_approval(&id, &step, req.firing, granted, &principal, comment)
        .map_err(|e| match e.code() {
            "already_decided" => {
                ApiError::new(StatusCode::CONFLICT, "already_decided", e.to_string())
            }
            "no_approval" => ApiError::new(StatusCode::NOT_FOUND, "no_approval", e.to_string())
                .hint(format!("GET /v1/instances/{id}/approvals lists what waits")),
            _ => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
        })?;
    // The decision is durable before the answer says so.
    crate::written::durable(&state, &id, || {
        (
            format!("the store refuses writes right now; the decision on `{step}` was taken and is written when it recovers"),
            format!("do not decide again (it would be 409 already_decided): GET /v1/instances/{id}/approvals shows it once the store takes writes"),
        )
    })
    .await?;
    Ok(Json(serde_json::to_value(view).unwrap_or_default()))
}
