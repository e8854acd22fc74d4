//! The router ([`app`]): routes, the auth layer on `/v1` and `/plan`, one outer layer for
//! request ids, the request span and response counting, problem fallbacks, and the OpenAPI document generated from the
//! handlers' `#[utoipa::path]` annotations ([`openapi_doc`]).

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::error::ApiError;
use crate::state::AppState;
use crate::{
    approvals, auth, events, instances, llm, ops, plans, quotas, request_id, tools, transcripts,
};

/// The HTTP application over `state` (STYLE §11: tested in-process with `oneshot`).
pub fn app(state: AppState) -> Router {
    let api = Router::new()
        .route("/v1/plans", post(plans::create).get(plans::list))
        .route("/v1/plans/{name}", get(plans::get_latest))
        .route(
            "/v1/plans/{name}/versions/{version}",
            get(plans::get_version),
        )
        .route("/v1/plans/{name}/net", get(plans::net))
        .route("/v1/validate", post(plans::validate))
        .route("/v1/analyze", post(plans::analyze))
        .route("/v1/generate", post(llm::generate))
        .route("/v1/explain", post(llm::explain))
        .route("/v1/instances", post(instances::start).get(instances::list))
        .route("/v1/instances/{id}", get(instances::get))
        .route("/v1/instances/{id}/trace", get(instances::trace))
        .route("/v1/instances/{id}/journal", get(instances::journal))
        .route("/v1/instances/{id}/inspect", get(instances::inspect))
        .route("/v1/instances/{id}/stop", post(instances::stop))
        .route("/v1/instances/{id}/resume", post(instances::resume))
        .route("/v1/instances/{id}/checkpoint", post(instances::checkpoint))
        .route("/v1/instances/{id}/repair", post(llm::repair))
        .route("/v1/instances/{id}/approvals", get(approvals::list))
        .route("/v1/instances/{id}/transcripts", get(transcripts::list))
        .route(
            "/v1/instances/{id}/approvals/{step}",
            post(approvals::decide),
        )
        .route("/v1/quotas", get(quotas::get))
        .route("/v1/tools", get(tools::list))
        .route(
            "/v1/tools/{name}",
            get(tools::get).put(tools::put).delete(tools::delete),
        )
        .route("/v1/events", post(events::ingest))
        .route("/v1/events/stream", get(events::stream))
        .route("/plan/react", post(llm::react))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::layer));
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(ops::openapi))
        .route("/", get(ops::ui_index))
        .route("/ui", get(ops::ui_root))
        .route("/ui/", get(ops::ui_root))
        .route("/ui/{*path}", get(ops::ui_asset))
        .merge(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            request_id::layer,
        ))
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

/// The Content-Security-Policy of every response: the UI loads its own scripts, styles and
/// images only (no inline script or style attribute), talks only to this server, and no
/// other site may frame it.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// `Content-Security-Policy` ([`CSP`]) and `X-Content-Type-Options: nosniff` on every
/// response, problems and fallbacks included.
async fn security_headers(req: Request, next: middleware::Next) -> Response {
    use axum::http::{HeaderValue, header};
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    res
}

async fn not_found(req: Request) -> Response {
    ApiError::not_found(format!("route {} {}", req.method(), req.uri().path()))
        .hint("see /openapi.json for the routes")
        .into_response()
}

async fn method_not_allowed(req: Request) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
    .hint("see /openapi.json for the routes")
    .into_response()
}

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "weft",
        description = "weft's HTTP API: plans (colored Petri nets) validated, analysed and stored per tenant; durable instances; CloudEvents in; lifecycle events out as Server-Sent Events; the seed-004 ReAct planner. Errors are application/problem+json with a stable `code`; every response carries X-Request-Id."
    ),
    paths(
        ops::healthz, ops::readyz, ops::metrics, ops::openapi, ops::ui_index, ops::ui_asset,
        plans::create, plans::list, plans::get_latest, plans::get_version, plans::net,
        plans::validate, plans::analyze,
        llm::generate, llm::explain, llm::repair, llm::react,
        instances::start, instances::list, instances::get, instances::trace,
        instances::journal, instances::inspect, instances::stop, instances::resume,
        instances::checkpoint, approvals::list, approvals::decide, transcripts::list,
        events::ingest, events::stream,
        tools::list, tools::get, tools::put, tools::delete, quotas::get,
    ),
    components(schemas(crate::error::Problem)),
    modifiers(&Security),
    tags(
        (name = "plans", description = "Plan templates: validate, analyse, store, draw"),
        (name = "instances", description = "Durable plan instances"),
        (name = "events", description = "CloudEvents in, lifecycle events out (SSE)"),
        (name = "tools", description = "The tools plans call: the node's, and each tenant's own"),
        (name = "llm", description = "Routes that use a language model"),
        (name = "quotas", description = "The operator's quotas of the calling tenant"),
        (name = "ops", description = "Health, readiness, metrics, this document"),
        (name = "ui", description = "The web UI"),
    )
)]
struct ApiDoc;

/// The OpenAPI 3.1 document: the handlers' annotations, plus the plan format's JSON Schema
/// (generated by weft-core from the plan types) as `PlanDocument` (its definitions as
/// `plan.*`), which is the request body of `POST /v1/plans`. (`/v1/validate` and
/// `/v1/analyze` keep `object`: they answer 200 with findings for any JSON.)
pub fn openapi_doc() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let mut plan = weft_core::Plan::json_schema();
    fn rewrite(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::String(r)) = m.get_mut("$ref")
                    && let Some(name) = r.strip_prefix("#/$defs/")
                {
                    *r = format!("#/components/schemas/plan.{name}");
                }
                m.values_mut().for_each(rewrite);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(rewrite),
            _ => {}
        }
    }
    rewrite(&mut plan);
    let Some(obj) = plan.as_object_mut() else {
        return doc;
    };
    let defs = obj.remove("$defs");
    obj.remove("$schema");
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return doc;
    };
    if let Some(serde_json::Value::Object(defs)) = defs {
        for (k, v) in defs {
            schemas.insert(format!("plan.{k}"), v);
        }
    }
    schemas.insert("PlanDocument".into(), plan);
    if let Some(body) =
        doc.pointer_mut("/paths/~1v1~1plans/post/requestBody/content/application~1json")
    {
        *body = serde_json::json!({"schema": {"$ref": "#/components/schemas/PlanDocument"}});
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::openapi_doc;

    /// OpenAPI requires every operationId to be unique (generated clients name their methods
    /// after them): each operation has one, `<tag>_<verb>` in snake case, none twice.
    #[test]
    fn operation_ids_are_unique_and_named_after_their_tag() {
        let doc = openapi_doc();
        let paths = doc["paths"].as_object().expect("paths");
        let mut seen = std::collections::BTreeMap::new();
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("path item") {
                let where_ = format!("{method} {path}");
                let id = op["operationId"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{where_} has no operationId"));
                let tag = op["tags"][0].as_str().unwrap_or_default();
                assert!(
                    id.starts_with(&format!("{tag}_"))
                        && id.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                    "{where_}: operationId {id:?} is not `{tag}_<verb>` in snake case"
                );
                if let Some(other) = seen.insert(id.to_string(), where_.clone()) {
                    panic!("operationId {id:?} is used by both {other} and {where_}");
                }
            }
        }
        assert!(seen.len() >= 30, "{} operations", seen.len());
    }
}
