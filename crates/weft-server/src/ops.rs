//! Unauthenticated operational routes: liveness, readiness (the store answers), Prometheus
//! metrics, the OpenAPI document and the web UI's assets (crate `weft-ui`).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::body::ApiPath;
use crate::error::{ApiError, ApiResult, Problem};
use crate::state::AppState;

/// `{"status": …}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok` / `ready`.
    pub status: String,
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", operation_id = "ops_healthz", tag = "ops", responses((status = 200, body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the store answers within 2 s.
#[utoipa::path(get, path = "/readyz", operation_id = "ops_readyz", tag = "ops", responses(
    (status = 200, body = Health),
    (status = 503, body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Health>> {
    if state.inner.durable.journal().store_refusing() {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the store refuses journal writes (the last one failed; they are retried)",
        );
        e.retry_after = Some(1);
        return Err(e);
    }
    let probe = state.store().head("weft.ids");
    match tokio::time::timeout(Duration::from_secs(2), probe).await {
        Ok(Ok(_)) => Ok(Json(Health {
            status: "ready".into(),
        })),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the store failed: {e}"),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the store did not answer within 2 s",
        )),
    }
}

/// Prometheus metrics: OpenMetrics 1.0 text to a client whose `Accept` names
/// `application/openmetrics-text` (Prometheus asks for it first), else the Prometheus text
/// format 0.0.4.
#[utoipa::path(get, path = "/metrics", operation_id = "ops_metrics", tag = "ops", responses(
    (status = 200, description = "The metrics, in the format the `Accept` header asks for",
     content((String = "application/openmetrics-text"), (String = "text/plain")))
))]
pub(crate) async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let d = &state.inner.durable;
    let text = state.inner.metrics.render(d.engine(), d.journal());
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let (body, ct) = if openmetrics {
        (
            text,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
    } else {
        (
            crate::metrics::prometheus_text(&text),
            "text/plain; version=0.0.4; charset=utf-8",
        )
    };
    let mut res = body.into_response();
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    res
}

/// The OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", operation_id = "ops_openapi", tag = "ops", responses(
    (status = 200, body = Object, description = "This document")
))]
pub(crate) async fn openapi() -> Response {
    Json(crate::app::openapi_doc()).into_response()
}

fn asset(path: &str) -> Response {
    match weft_ui::asset(path) {
        Some(a) => {
            let mut res = a.bytes.into_response();
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(a.content_type),
            );
            res.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            res
        }
        None => ApiError::not_found(format!(
            "UI asset `{}`",
            path.chars().take(80).collect::<String>()
        ))
        .into_response(),
    }
}

/// The web UI's index page.
#[utoipa::path(get, path = "/", operation_id = "ui_index", tag = "ui", responses(
    (status = 200, body = String, content_type = "text/html")
))]
pub(crate) async fn ui_index() -> Response {
    asset("")
}

/// A web UI asset.
#[utoipa::path(get, path = "/ui/{path}", operation_id = "ui_asset", tag = "ui",
    params(("path" = String, Path, description = "Asset path")),
    responses(
        (status = 200, body = String, description = "The asset"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn ui_asset(ApiPath(path): ApiPath<String>) -> Response {
    asset(&path)
}

/// `/ui` and `/ui/` → the index.
pub(crate) async fn ui_root() -> Response {
    asset("")
}
