//! Request bodies: JSON only (by `Content-Type`), capped in size before anything is read
//! (a declared `Content-Length` over the cap is refused at once; a chunked body is cut off
//! at the cap) and in time (`server.body_timeout_ms`, then `408`), parsed with the error
//! position in the problem. Also the path and query
//! extractors whose rejections are problems.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

/// Which cap applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cap {
    /// `ServerConfig::body_limit`.
    Default,
    /// `ServerConfig::plan_body_limit`.
    Plan,
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body is larger than this route's limit of {limit} bytes"),
    )
    .hint(
        "send a smaller body; the limits are set with `weft serve --body-limit/--plan-body-limit`",
    )
}

/// The `Content-Type` essence (lower case, without parameters).
pub(crate) fn content_type(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
}

/// `application/json` or any `application/…+json`.
pub(crate) fn is_json(ct: &str) -> bool {
    ct == "application/json" || (ct.starts_with("application/") && ct.ends_with("+json"))
}

/// Reads the body of `req` up to the cap.
pub(crate) async fn read_capped(
    req: Request,
    state: &AppState,
    cap: Cap,
) -> Result<Bytes, ApiError> {
    let limit = match cap {
        Cap::Default => state.config().body_limit,
        Cap::Plan => state.config().plan_body_limit,
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let timeout = state.config().body_timeout;
    let read = tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), limit));
    let Ok(read) = read.await else {
        return Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body did not arrive within {} ms",
                timeout.as_millis()
            ),
        )
        .hint("send the whole body at once; the limit is `server.body_timeout_ms`"));
    };
    read.map_err(|e| {
        let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = src {
            if s.is::<http_body_util::LengthLimitError>() {
                return too_large(limit);
            }
            src = s.source();
        }
        ApiError::bad_request(format!("cannot read the request body: {e}"))
    })
}

/// Parses JSON with a problem naming line and column.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let code = if e.is_data() {
            "invalid_request"
        } else {
            "invalid_json"
        };
        ApiError::new(
            StatusCode::BAD_REQUEST,
            code,
            format!(
                "the request body is not {}: {}",
                if e.is_data() {
                    "the expected JSON object"
                } else {
                    "valid JSON"
                },
                weft_core::plain::message(&e.to_string())
            ),
        )
    })
}

/// `415 unsupported_media_type` unless the request says JSON.
pub(crate) fn require_json(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    match content_type(headers) {
        Some(ct) if is_json(&ct) => Ok(()),
        other => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "expected Content-Type application/json, got {}",
                other.map_or_else(|| "none".to_string(), |c| format!("`{c}`"))
            ),
        )
        .hint("send the body as JSON with `Content-Type: application/json`")),
    }
}

/// A JSON body under the default cap.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        require_json(req.headers())?;
        let bytes = read_capped(req, state, Cap::Default).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A JSON body under the plan cap (plan documents).
#[derive(Debug)]
pub(crate) struct PlanBody<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<AppState> for PlanBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        require_json(req.headers())?;
        let bytes = read_capped(req, state, Cap::Plan).await?;
        parse_json(&bytes).map(PlanBody)
    }
}

/// Path parameters with a problem on failure.
#[derive(Debug)]
pub(crate) struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| {
                ApiError::bad_request(format!(
                    "bad path parameter: {}",
                    weft_core::plain::message(&e.to_string())
                ))
            })
    }
}

/// Query parameters with a problem on failure.
#[derive(Debug)]
pub(crate) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiQuery(p.0))
            .map_err(|e| {
                ApiError::bad_request(format!(
                    "bad query parameter: {}",
                    weft_core::plain::message(&e.to_string())
                ))
            })
    }
}

/// A JSON body under the default cap that may be absent (empty body → `T::default()`).
#[derive(Debug)]
pub(crate) struct MaybeJson<T>(pub T);

impl<T: DeserializeOwned + Default + Send> FromRequest<AppState> for MaybeJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let has_type = req.headers().contains_key(header::CONTENT_TYPE);
        let headers = req.headers().clone();
        let bytes = read_capped(req, state, Cap::Default).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(MaybeJson(T::default()));
        }
        if has_type || !bytes.is_empty() {
            require_json(&headers)?;
        }
        parse_json(&bytes).map(MaybeJson)
    }
}
