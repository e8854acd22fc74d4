//! `GET /v1/quotas`: the calling tenant's quotas in the current period — `[budget]`'s
//! `tenant` and `plan` quotas and `[budget.planner]` — with what was used of each (the web
//! UI's Quotas page shows it). On a durable node the counts are every process's on the store
//! (this process's are added to the store first); see `weft_node::QuotaReport`.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult, Problems};
use crate::state::AppState;

/// `GET /v1/quotas`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Quotas {
    /// The quotas' period (`[budget] period_secs`).
    pub period_secs: u64,
    /// When the current period ends (epoch ms); its counts then start again at zero.
    pub period_ends_ms: i64,
    /// `true`: the counts of every process on the store; `false`: this process's alone.
    pub shared: bool,
    /// `[budget] tenant`: `{limits, used}`, or null when unset.
    #[schema(value_type = Option<Object>)]
    pub tenant: Value,
    /// `[budget] plan`: `{limits, used}` for each plan counted in this period, by name.
    #[schema(value_type = Object)]
    pub plans: Value,
    /// `[budget] plan`'s limits, which every plan gets (counted yet or not), or null when
    /// unset.
    #[schema(value_type = Option<Object>)]
    pub plan_limits: Value,
    /// `[budget.planner]`: `{limits, used}`, or null when unset.
    #[schema(value_type = Option<Object>)]
    pub planner: Value,
}

/// The tenant's quotas and what was used of them in the current period.
#[utoipa::path(get, path = "/v1/quotas", operation_id = "quotas_get", tag = "quotas",
    responses((status = 200, body = Quotas), Problems),
    security(("bearer" = [])))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> ApiResult<Json<Quotas>> {
    let r = state.node().quotas(&tenant).await.map_err(|e| match e {
        weft_node::Error::Durable(d) => ApiError::from(d),
        other => ApiError::internal(other),
    })?;
    Ok(Json(Quotas {
        period_secs: r.period_secs,
        period_ends_ms: r.period_ends_ms,
        shared: r.shared,
        tenant: to_json(&r.tenant),
        plans: to_json(&r.plans),
        plan_limits: to_json(&r.plan_limits),
        planner: to_json(&r.planner),
    }))
}

fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}
