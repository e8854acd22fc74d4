//! `X-Request-Id`: echoed when the request carries a sane one, generated (UUID v4)
//! otherwise, put on every response, kept in a task-local so problem bodies can name it, and
//! recorded on the request's `tracing` span.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

/// The header.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being handled (inside the middleware's scope).
pub fn current_request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// A client-given id is kept if it is 1–128 visible ASCII characters.
fn acceptable(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    (!s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| s.to_string())
}

/// Middleware: resolves the id, runs the request in its scope and span, sets the header.
pub async fn layer(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(acceptable)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let span = tracing::info_span!(
        "http.request",
        request_id = %id,
        method = %req.method(),
        path = %req.uri().path(),
        tenant = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    let fut = REQUEST_ID.scope(id.clone(), next.run(req));
    let mut res = fut.instrument(span.clone()).await;
    span.record("status", res.status().as_u16());
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(X_REQUEST_ID.clone(), v);
    }
    res
}
