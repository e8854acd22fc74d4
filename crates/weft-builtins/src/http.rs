//! `http.request`: calls an allowlisted HTTP(S) endpoint and returns `{status, headers, body}`.
//!
//! Plans are written by LLMs, so this tool is the main way a plan could reach something it
//! should not: every host (including each redirect target, literal IPs too) is checked
//! against the configured allowlist before any connection; loopback, private, link-local
//! (cloud metadata) and carrier-grade NAT addresses need an exact entry, also when a name
//! resolves to them (see `http_guard`); proxies are ignored, and the response body is capped.
//! Failures map to stable codes the retry policy understands: `http_status` (retryable for
//! 5xx and 429), `timeout` and `connect` (retryable), `denied`, `body_too_large` and
//! `args_invalid` (fatal).

use std::collections::BTreeMap;
use std::sync::Arc;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Method, Url, redirect};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::builtin::builtin_spec;
use crate::config::HttpConfig;
use crate::http_guard::{Allowlist, Denied, GuardedResolver};
use crate::support::{budget, invalid, parse_args, snippet};
use crate::{BoxFuture, Tool, ToolContext, ToolError, ToolSpec};

const NAME: &str = "http.request";

/// The `http.request` tool.
pub struct HttpTool {
    spec: ToolSpec,
    inner: Arc<Inner>,
}

struct Inner {
    cfg: HttpConfig,
    allow: Arc<Allowlist>,
    /// Built once (connection pool); a build failure is reported on each call.
    client: Result<Client, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

impl HttpTool {
    /// The tool with `cfg`'s allowlist and limits.
    pub fn new(cfg: &HttpConfig) -> Self {
        let allow = Arc::new(Allowlist::new(&cfg.allow_hosts));
        let client = build_client(cfg, &allow);
        HttpTool {
            spec: builtin_spec(NAME),
            inner: Arc::new(Inner {
                cfg: cfg.clone(),
                allow,
                client,
            }),
        }
    }
}

fn build_client(cfg: &HttpConfig, allow: &Arc<Allowlist>) -> Result<Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let max_redirects = cfg.max_redirects;
    let redirect_allow = Arc::clone(allow);
    let policy = redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > max_redirects {
            return attempt.error(Denied(format!(
                "more than {max_redirects} redirects (http.max_redirects)"
            )));
        }
        let check = match attempt.url().host_str() {
            Some(h) => redirect_allow.check(h),
            None => Err(Denied("redirect to a URL without a host".into())),
        };
        match check {
            Ok(()) => attempt.follow(),
            Err(d) => attempt.error(Denied(format!("redirect refused: {d}"))),
        }
    });
    Client::builder()
        .tls_backend_preconfigured(tls)
        .no_proxy()
        .redirect(policy)
        .dns_resolver(Arc::new(GuardedResolver::new(Arc::clone(allow))))
        .build()
        .map_err(|e| format!("HTTP client setup failed: {e}"))
}

impl Tool for HttpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        crate::profile::needs(
            NAME,
            &crate::ToolsConfig {
                http: self.inner.cfg.clone(),
                ..crate::ToolsConfig::default()
            },
        )
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.call(ctx, args).await })
    }
}

impl Inner {
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        let args: Args = parse_args(NAME, args)?;
        let url = Url::parse(&args.url).map_err(|e| invalid(NAME, format!("url: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(NAME, "url: only http and https are supported"));
        }
        let host = url
            .host_str()
            .ok_or_else(|| invalid(NAME, "url: no host"))?;
        self.allow
            .check(host)
            .map_err(|d| ToolError::fatal("denied", d.0))?;
        let method = parse_method(args.method.as_deref())?;
        let headers = request_headers(&args.headers, &ctx)?;
        let client = self
            .client
            .as_ref()
            .map_err(|e| ToolError::fatal("unavailable", e.clone()))?;

        let mut req = client.request(method.clone(), url.clone()).headers(headers);
        match args.body {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !args
                    .headers
                    .keys()
                    .any(|k| k.eq_ignore_ascii_case("content-type"))
                {
                    req = req.header(CONTENT_TYPE, "text/plain; charset=utf-8");
                }
                req = req.body(s);
            }
            Some(v) => {
                let bytes = serde_json::to_vec(&v).map_err(|e| invalid(NAME, e))?;
                if !args
                    .headers
                    .keys()
                    .any(|k| k.eq_ignore_ascii_case("content-type"))
                {
                    req = req.header(CONTENT_TYPE, "application/json");
                }
                req = req.body(bytes);
            }
        }

        let limit = budget(&ctx, args.timeout_ms, self.cfg.default_timeout_ms);
        let what = format!("{method} {url}");
        match tokio::time::timeout(limit, self.exchange(req, &what)).await {
            Ok(r) => r,
            Err(_) => Err(ToolError::retryable(
                "timeout",
                format!(
                    "{what}: no complete response within {} ms",
                    limit.as_millis()
                ),
            )),
        }
    }

    /// Sends the request and reads the capped response.
    async fn exchange(&self, req: reqwest::RequestBuilder, what: &str) -> Result<Value, ToolError> {
        let mut resp = req.send().await.map_err(|e| map_error(&e, what))?;
        let status = resp.status();
        let headers = response_headers(resp.headers());
        let is_json = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(is_json_type);
        let max = self.cfg.max_body_bytes;
        let too_large = || {
            ToolError::fatal(
                "body_too_large",
                format!("{what}: response body exceeds {max} bytes (http.max_body_bytes)"),
            )
        };
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_large());
        }
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| map_error(&e, what))? {
            if buf.len() + chunk.len() > max {
                return Err(too_large());
            }
            buf.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&buf);

        if !status.is_success() {
            let code = status.as_u16();
            let msg = format!("{what} answered {status}: {}", snippet(&text, 500));
            return Err(if status.is_server_error() || code == 429 {
                ToolError::retryable("http_status", msg)
            } else {
                ToolError::fatal("http_status", msg)
            });
        }

        let body = if buf.is_empty() {
            Value::Null
        } else if is_json {
            serde_json::from_slice(&buf).unwrap_or_else(|_| Value::String(text.into_owned()))
        } else {
            Value::String(text.into_owned())
        };
        Ok(serde_json::json!({
            "status": status.as_u16(),
            "headers": headers,
            "body": body,
        }))
    }
}

fn parse_method(m: Option<&str>) -> Result<Method, ToolError> {
    Ok(match m.unwrap_or("GET") {
        "GET" => Method::GET,
        "HEAD" => Method::HEAD,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "PATCH" => Method::PATCH,
        "DELETE" => Method::DELETE,
        other => {
            return Err(invalid(
                NAME,
                format!(
                    "method `{}` is not one of GET, HEAD, POST, PUT, PATCH, DELETE",
                    snippet(other, 40)
                ),
            ));
        }
    })
}

/// The caller's headers plus `Idempotency-Key` (unless the caller set one).
fn request_headers(
    given: &BTreeMap<String, String>,
    ctx: &ToolContext,
) -> Result<HeaderMap, ToolError> {
    let mut map = HeaderMap::new();
    for (k, v) in given {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| invalid(NAME, format!("header name `{}` is invalid", snippet(k, 60))))?;
        let value = HeaderValue::from_str(v)
            .map_err(|_| invalid(NAME, format!("header `{name}` has an invalid value")))?;
        map.append(name, value);
    }
    if !map.contains_key("idempotency-key")
        && let Ok(v) = HeaderValue::from_str(&ctx.idempotency_key)
    {
        map.insert(HeaderName::from_static("idempotency-key"), v);
    }
    Ok(map)
}

/// Response headers as a JSON object; repeated headers are joined with ", ".
fn response_headers(h: &HeaderMap) -> Value {
    let mut out = Map::new();
    for (name, value) in h {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match out.get_mut(name.as_str()) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&v);
            }
            _ => {
                out.insert(name.as_str().to_string(), Value::String(v));
            }
        }
    }
    Value::Object(out)
}

fn is_json_type(ct: &str) -> bool {
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// Maps a transport error to a stable code; a [`Denied`] anywhere in the chain wins.
fn map_error(e: &reqwest::Error, what: &str) -> ToolError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(d) = s.downcast_ref::<Denied>() {
            return ToolError::fatal("denied", format!("{what}: {d}"));
        }
        src = s.source();
    }
    let detail = error_chain(e);
    if e.is_timeout() {
        ToolError::retryable("timeout", format!("{what}: {detail}"))
    } else if e.is_connect() {
        ToolError::retryable("connect", format!("{what}: {detail}"))
    } else if e.is_builder() {
        ToolError::fatal("args_invalid", format!("{NAME}: {detail}"))
    } else {
        ToolError::retryable("http_error", format!("{what}: {detail}"))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
