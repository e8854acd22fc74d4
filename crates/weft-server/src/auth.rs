//! Authentication and the per-tenant rate limit, as one middleware on every `/v1` and
//! `/plan` route: the bearer token (or `?access_token=` on GET, for `EventSource`) names
//! the tenant, which handlers receive as the [`Tenant`] extension.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// The caller's tenant.
#[derive(Debug, Clone)]
pub(crate) struct Tenant(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Tenant>()
            .cloned()
            .ok_or_else(|| ApiError::internal("tenant middleware missing on this route"))
    }
}

fn bearer(req: &Request) -> Option<String> {
    if let Some(v) = req.headers().get(header::AUTHORIZATION) {
        let s = v.to_str().ok()?;
        let (scheme, tok) = s.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| tok.trim().to_string());
    }
    if req.method() == Method::GET {
        let q = req.uri().query()?;
        for pair in q.split('&') {
            if let Some(v) = pair.strip_prefix("access_token=") {
                return Some(percent_decode(v));
            }
        }
    }
    None
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Middleware: 401 without a known token, 429 when the tenant's bucket is empty.
pub(crate) async fn layer(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let token = bearer(&req);
    let Some(tenant) = state.tenant_for(token.as_deref()) else {
        let detail = if token.is_some() {
            "the API token is not valid"
        } else {
            "this server requires an API token"
        };
        return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", detail)
            .hint("send `Authorization: Bearer <token>` (GET requests may use `?access_token=<token>`)")
            .into_response();
    };
    tracing::Span::current().record("tenant", tenant.as_str());
    if let Err(wait) = state.inner.limiter.take(&tenant) {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("tenant `{tenant}` is over its request rate"),
        )
        .hint(format!("retry after {wait} s"));
        e.retry_after = Some(wait);
        return e.into_response();
    }
    req.extensions_mut().insert(Tenant(tenant));
    next.run(req).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(super::percent_decode("a%2Fb+c%zz%4"), "a/b c%zz%4");
    }
}
