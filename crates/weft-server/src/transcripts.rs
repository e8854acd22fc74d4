//! `GET /v1/instances/{id}/transcripts`: the language-model exchanges an instance's steps made
//! (`llm.complete`, `agent.react`, repairs), oldest first, as the store keeps them
//! (`weft_llm::list_transcripts`). They are written by a background task as they happen, so
//! the last one may appear a moment after the step that made it finished.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::body::ApiPath;
use crate::error::{ApiError, ApiResult, Problem, Problems};
use crate::instances::owned;
use crate::state::AppState;

/// `GET /v1/instances/{id}/transcripts`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TranscriptList {
    /// The exchanges, oldest first: `{seq, correlation, purpose, provider, request, response,
    /// error, usage, latency_ms, …}`.
    #[schema(value_type = Vec<Object>)]
    pub exchanges: Vec<Value>,
    /// Prompt and completion tokens over all of them.
    #[schema(value_type = Object)]
    pub usage: Value,
}

/// Read an instance's model exchanges.
#[utoipa::path(get, path = "/v1/instances/{id}/transcripts", operation_id = "instances_transcripts", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = TranscriptList),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<TranscriptList>> {
    owned(&state, &tenant, &id).await?;
    let scope = weft_llm::TranscriptScope::Instance(id);
    let exchanges = weft_llm::list_transcripts(state.store().as_ref(), &tenant, &scope)
        .await
        .map_err(ApiError::internal)?;
    let (prompt, completion) = weft_llm::token_totals(&exchanges);
    Ok(Json(TranscriptList {
        exchanges: exchanges
            .iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect(),
        usage: serde_json::json!({"prompt_tokens": prompt, "completion_tokens": completion}),
    }))
}
