//! `X-Request-Id`: echoed when the request carries a sane one, generated (UUID v4)
//! otherwise, put on every response, kept in a task-local so problem bodies and journal
//! records can name it, and recorded on the request's `tracing` span (`http.request`). The
//! same middleware counts responses by status (one layer instead of three: request id,
//! tower-http's `TraceLayer` and a counter each cost a boxed future per request). When spans
//! are exported, a W3C `traceparent` (and `tracestate`) on the request makes its span a child
//! of the caller's, so weft's spans continue the caller's trace.

use std::cell::Cell;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

use crate::state::AppState;

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
fn acceptable(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty() && b.len() <= 128 && b.iter().all(u8::is_ascii_graphic)
}

thread_local! {
    /// SplitMix64 state, seeded once per thread from the OS (through `Uuid::new_v4`).
    static RNG: Cell<u64> = Cell::new(uuid::Uuid::new_v4().as_u64_pair().0);
}

fn next_u64() -> u64 {
    RNG.with(|s| {
        let x = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        s.set(x);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// A random UUID v4 without a system call per request (ids need to be unique, not secret).
fn generate() -> (String, HeaderValue) {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&next_u64().to_le_bytes());
    bytes[8..].copy_from_slice(&next_u64().to_le_bytes());
    let id = uuid::Builder::from_random_bytes(bytes).into_uuid();
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let s = id.hyphenated().encode_lower(&mut buf);
    let v = HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("-"));
    (s.to_string(), v)
}

/// Middleware: resolves the id, runs the request in its scope and span, sets the header,
/// counts the response.
pub async fn layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (id, header) = match req.headers().get(&X_REQUEST_ID).filter(|v| acceptable(v)) {
        // Visible ASCII: valid UTF-8.
        Some(v) => (
            String::from_utf8_lossy(v.as_bytes()).into_owned(),
            v.clone(),
        ),
        None => generate(),
    };
    let span = tracing::info_span!(
        "http.request",
        request_id = %id,
        method = %req.method(),
        path = %req.uri().path(),
        tenant = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    if !span.is_disabled() && req.headers().contains_key("traceparent") {
        use opentelemetry::propagation::TextMapPropagator as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .extract(&Headers(req.headers()));
        // A malformed `traceparent` extracts an empty context: the span starts a new trace.
        let _ = span.set_parent(parent);
    }
    let mut res = if span.is_disabled() {
        REQUEST_ID.scope(id, next.run(req)).await
    } else {
        let res = REQUEST_ID
            .scope(id, next.run(req))
            .instrument(span.clone())
            .await;
        span.record("status", res.status().as_u16());
        res
    };
    res.headers_mut().insert(X_REQUEST_ID.clone(), header);
    state.inner.metrics.response(res.status());
    res
}

/// The request headers as the propagator reads them (W3C names are lowercase).
struct Headers<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_ids_are_distinct_v4_uuids() {
        let (a, ha) = super::generate();
        let (b, _) = super::generate();
        assert_ne!(a, b);
        let u = uuid::Uuid::parse_str(&a).expect("a UUID");
        assert_eq!(u.get_version_num(), 4);
        assert_eq!(ha.to_str().unwrap(), a);
    }
}
