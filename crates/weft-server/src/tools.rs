//! Tool routes: every tool a tenant's plans may call (`GET /v1/tools`), and the tools a
//! tenant declares for itself (`PUT/GET/DELETE /v1/tools/{name}`), stored with versions like
//! plans and compiled into that tenant's plans only (`weft_node::tenant_tools`).
//!
//! A change is visible at once to this process's next validation and start (its cached
//! compilations of the tenant's plans are dropped; running instances keep the tools they
//! started with), and to other processes over the same store at their next compilation.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use weft_store::now_ms;

use crate::auth::Tenant;
use crate::body::{ApiPath, JsonBody};
use crate::error::{ApiError, ApiResult, Problem, Problems};
use crate::names::check_name;
use crate::state::{AppState, lock};

/// One tool, as `GET /v1/tools` and `GET /v1/tools/{name}` show it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ToolInfo {
    /// The action name plans use.
    pub name: String,
    /// What it does.
    pub description: String,
    /// `pure`, `read` or `write`.
    pub effect: String,
    /// Whether a repeated call with the same idempotency key is safe.
    pub idempotent: bool,
    /// JSON Schema of its args.
    #[schema(value_type = Object)]
    pub input_schema: Value,
    /// `node` (built in or configured in weft.toml, shared by every tenant) or `api`
    /// (declared by this tenant).
    pub source: String,
    /// The stored version (`api` tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// When that version was stored, epoch ms (`api` tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<i64>,
    /// The definition as declared, header values redacted (`api` tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub definition: Option<Value>,
}

/// `GET /v1/tools`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ToolList {
    /// The node's tools, then the tenant's own, each in registration or name order.
    pub tools: Vec<ToolInfo>,
}

fn node_info(spec: &weft_core::ToolSpec) -> ToolInfo {
    ToolInfo {
        name: spec.name.clone(),
        description: spec.description.clone(),
        effect: effect_name(spec.effect),
        idempotent: spec.idempotent,
        input_schema: spec.args_schema.clone(),
        source: "node".into(),
        version: None,
        created_at_ms: None,
        definition: None,
    }
}

fn effect_name(e: weft_core::Effect) -> String {
    serde_json::to_value(e)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn api_info(r: &weft_store::ToolRecord, spec: &weft_core::ToolSpec) -> ToolInfo {
    ToolInfo {
        source: "api".into(),
        version: Some(r.version),
        created_at_ms: Some(r.created_at_ms),
        definition: r.definition.clone().map(weft_node::tenant_tools::redacted),
        ..node_info(spec)
    }
}

/// The tenant's own tools, as last refreshed: each live version with the spec of the tool
/// built from it.
fn own_tools(state: &AppState, tenant: &str) -> ApiResult<Vec<ToolInfo>> {
    use weft_tools::TenantTools as _;
    let toolbox = toolbox(state)?;
    let Some(registry) = toolbox.tools(tenant) else {
        return Ok(Vec::new());
    };
    Ok(toolbox
        .records(tenant)
        .iter()
        .filter_map(|r| Some(api_info(r, registry.get(&r.name)?.spec())))
        .collect())
}

/// The toolbox, or `501` for a server without one (never: the server is durable).
fn toolbox(state: &AppState) -> ApiResult<&std::sync::Arc<weft_node::tenant_tools::Toolbox>> {
    state.inner.node.toolbox().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_durable",
            "this server keeps no tenant tools",
        )
    })
}

/// Catches up with the store (another process may have changed the tenant's tools).
pub(crate) async fn refresh(state: &AppState, tenant: &str) -> ApiResult<()> {
    toolbox(state)?
        .refresh(state.store().as_ref(), Some(tenant))
        .await?;
    Ok(())
}

/// List the tools the tenant's plans may call.
#[utoipa::path(get, path = "/v1/tools", operation_id = "tools_list", tag = "tools",
    responses(
        (status = 200, body = ToolList),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 429, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> ApiResult<Json<ToolList>> {
    refresh(&state, &tenant).await?;
    let mut tools: Vec<ToolInfo> = state
        .inner
        .node
        .registry()
        .iter()
        .map(|t| node_info(t.spec()))
        .collect();
    tools.extend(own_tools(&state, &tenant)?);
    Ok(Json(ToolList { tools }))
}

/// Get a tool the tenant's plans may call.
#[utoipa::path(get, path = "/v1/tools/{name}", operation_id = "tools_get", tag = "tools",
    params(("name" = String, Path, description = "Tool name", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = ToolInfo),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<ToolInfo>> {
    check_name("tool name", &name)?;
    if let Some(t) = state.inner.node.registry().get(&name) {
        return Ok(Json(node_info(t.spec())));
    }
    refresh(&state, &tenant).await?;
    own_tools(&state, &tenant)?
        .into_iter()
        .find(|t| t.name == name)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("tool `{name}`")))
}

/// Declare (or change) one of the tenant's own tools: a new version unless the definition
/// equals the latest one. `command` tools, hosts outside `tools.http.allow_hosts` and
/// values read from the node's environment are refused.
#[utoipa::path(put, path = "/v1/tools/{name}", operation_id = "tools_put", tag = "tools",
    params(("name" = String, Path, description = "Tool name", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    request_body(content = Object, description = "A tool definition, as in weft.toml's [[tools.declared]] (source kind `http`, `worker` or `fixed`)", content_type = "application/json"),
    responses(
        (status = 200, description = "Unchanged: the definition equals the latest version", body = ToolInfo),
        (status = 201, description = "Stored as a new version", body = ToolInfo),
        Problems,
        (status = 409, description = "The name is one of the node's tools", body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The definition is invalid or not allowed, or the tenant has too many tools", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn put(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<(StatusCode, Json<ToolInfo>)> {
    check_name("tool name", &name)?;
    let toolbox = toolbox(&state)?;
    let def = toolbox
        .admit(&name, body, state.inner.node.registry())
        .map_err(|r| {
            let status = if r.code == "tool_exists" {
                StatusCode::CONFLICT
            } else {
                StatusCode::UNPROCESSABLE_ENTITY
            };
            ApiError::new(status, r.code, r.message).hint(r.hint)
        })?;
    let def = serde_json::to_value(&def).map_err(ApiError::internal)?;
    refresh(&state, &tenant).await?;
    let records = toolbox.records(&tenant);
    let latest = records.iter().find(|r| r.name == name);
    if latest.is_none() && records.len() >= toolbox.max_tools() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many_tools",
            format!(
                "the tenant already has {} tools, the most tools.api_max_tools allows",
                records.len()
            ),
        )
        .hint("delete tools it no longer uses, or ask the operator to raise tools.api_max_tools"));
    }
    let status = match latest {
        Some(r) if r.definition.as_ref() == Some(&def) => StatusCode::OK,
        _ => {
            state
                .store()
                .put_tool(&tenant, &name, Some(def), now_ms())
                .await?;
            changed(&state, &tenant).await?;
            StatusCode::CREATED
        }
    };
    let info = own_tools(&state, &tenant)?
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(|| ApiError::internal(format!("tool `{name}` was stored but is not listed")))?;
    Ok((status, Json(info)))
}

/// Delete one of the tenant's own tools (a new version marks it deleted; instances running
/// keep calling the version they started with).
#[utoipa::path(delete, path = "/v1/tools/{name}", operation_id = "tools_delete", tag = "tools",
    params(("name" = String, Path, description = "Tool name", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 204, description = "Deleted"),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The name is one of the node's tools", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    check_name("tool name", &name)?;
    if state.inner.node.registry().get(&name).is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "tool_exists",
            format!("`{name}` is one of the node's own tools"),
        )
        .hint("the node's tools are configured in weft.toml, not through the API"));
    }
    refresh(&state, &tenant).await?;
    if !toolbox(&state)?
        .records(&tenant)
        .iter()
        .any(|r| r.name == name)
    {
        return Err(ApiError::not_found(format!("tool `{name}`")));
    }
    state
        .store()
        .put_tool(&tenant, &name, None, now_ms())
        .await?;
    changed(&state, &tenant).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// After a change of `tenant`'s tools: read them again and forget the compilations and
/// checks of its plans, which were made against the old set.
async fn changed(state: &AppState, tenant: &str) -> ApiResult<()> {
    refresh(state, tenant).await?;
    lock(&state.inner.plans).retain(|(t, _, _), _| t != tenant);
    lock(&state.inner.analyses).retain(|(t, _, _), _| t != tenant);
    Ok(())
}
