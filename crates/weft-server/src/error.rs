//! Every failure the API returns: one [`ApiError`] rendered as RFC 9457
//! `application/problem+json` with a stable snake_case `code`, a hint where one helps, the
//! request id and, for plan problems, the findings.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::request_id::current_request_id;

/// The problem responses every authenticated route can give, for the OpenAPI document
/// (`responses(..., Problems)` in a handler's `utoipa::path`): never built, only described.
#[derive(utoipa::IntoResponses)]
pub enum Problems {
    /// The request is malformed (bad JSON, a bad parameter, a bad name).
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(Problem),
    /// No token, or an unknown one.
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// The tenant's rate limit (see `Retry-After`), or on the planner routes its planner
    /// budget (`[budget.planner]`): `planner_throttled` (retry later) or `planner_rejected`.
    #[response(status = 429, content_type = "application/problem+json")]
    TooManyRequests(Problem),
}

/// The problem document (RFC 9457) every error response carries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// `https://weft.dev/problems/<code>`.
    #[serde(rename = "type")]
    pub ty: String,
    /// Short summary of the kind of problem.
    pub title: String,
    /// HTTP status.
    pub status: u16,
    /// What went wrong in this request.
    pub detail: String,
    /// Stable snake_case code (`not_found`, `invalid_json`, …).
    pub code: String,
    /// How to fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The request's `X-Request-Id`.
    pub request_id: String,
    /// Validation or analysis findings (plan problems).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub findings: Option<Value>,
}

/// An API error (boxed: handlers return it in `Result`s).
#[derive(Debug, Clone)]
pub struct ApiError(Box<ApiErrorInner>);

impl std::ops::Deref for ApiError {
    type Target = ApiErrorInner;
    fn deref(&self) -> &ApiErrorInner {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut ApiErrorInner {
        &mut self.0
    }
}

/// What an [`ApiError`] holds: status, code, message, optional hint and findings.
#[derive(Debug, Clone)]
pub struct ApiErrorInner {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code.
    pub code: &'static str,
    /// What went wrong.
    pub detail: String,
    /// How to fix it.
    pub hint: Option<String>,
    /// Findings (plan problems).
    pub findings: Option<Value>,
    /// Seconds to wait (429).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        ApiError(Box::new(ApiErrorInner {
            status,
            code,
            detail: detail.into(),
            hint: None,
            findings: None,
            retry_after: None,
        }))
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Adds findings.
    pub fn findings(mut self, findings: Value) -> Self {
        self.findings = Some(findings);
        self
    }

    /// `404 not_found`.
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no {what}"))
    }

    /// `400 invalid_request`.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", detail)
    }

    /// `500 internal` (details are logged, not returned).
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server failed to handle the request; see its log for the request id",
        )
    }

    /// `503 llm_unavailable`.
    pub fn llm_unavailable() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "llm_unavailable",
            "no LLM provider is configured on this server",
        )
        .hint(
            "start `weft serve` with WEFT_LLM_BASE_URL (and WEFT_LLM_MODEL, WEFT_LLM_API_KEY) set",
        )
    }

    fn title(&self) -> &'static str {
        match self.code {
            "unauthorized" => "Unauthorized",
            "not_found" => "Not found",
            "invalid_json" => "Malformed JSON",
            "unsupported_media_type" => "Unsupported media type",
            "payload_too_large" => "Payload too large",
            "invalid_plan" => "Invalid plan",
            "invalid_cloudevent" => "Invalid CloudEvent",
            "rate_limited" => "Too many requests",
            "planner_throttled" => "Planner rate limit reached",
            "planner_rejected" => "Planner quota used up",
            "conflict" => "Conflict",
            "instance_terminal" => "Instance is terminal",
            "llm_unavailable" => "LLM unavailable",
            "invalid_name" => "Invalid name",
            "event_not_accepted" => "Event not accepted",
            "payload_invalid" => "Event payload does not match its schema",
            "input_invalid" => "Input does not match its schema",
            "method_not_allowed" => "Method not allowed",
            "unavailable" => "Service unavailable",
            "llm_failed" => "LLM call failed",
            "internal" => "Internal server error",
            _ => "Bad request",
        }
    }

    /// The problem document for this error under `request_id`.
    pub fn problem(&self, request_id: String) -> Problem {
        Problem {
            ty: format!("https://weft.dev/problems/{}", self.code),
            title: self.title().to_string(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            code: self.code.to_string(),
            hint: self.hint.clone(),
            request_id,
            findings: self.findings.clone(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.code, self.detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem(current_request_id().unwrap_or_default());
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut res = (self.status, body).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(s) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"weft\""),
            );
        }
        res
    }
}

impl From<weft_durable::DurableError> for ApiError {
    fn from(e: weft_durable::DurableError) -> Self {
        match e.code() {
            "not_found" => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            "unknown_instance" => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            "invalid_input" => ApiError::bad_request(e.to_string()),
            _ => ApiError::internal(e),
        }
    }
}

impl From<weft_store::Error> for ApiError {
    fn from(e: weft_store::Error) -> Self {
        match e.code() {
            "not_found" => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            "invalid_input" => ApiError::bad_request(e.to_string()),
            _ => ApiError::internal(e),
        }
    }
}

/// Handler result.
pub type ApiResult<T> = Result<T, ApiError>;
