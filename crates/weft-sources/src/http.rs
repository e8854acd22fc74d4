//! The `http` source: each call sends the tool's args as a JSON body to a configured endpoint
//! and the JSON response body is the result.
//!
//! ```toml
//! [[tools.declared]]
//! name = "extract_facts"
//! description = "Extract facts from a text"
//! effect = "read"
//! idempotent = true
//! timeout_ms = 10000                 # the whole call, retries included
//! retry = { max = 2, backoff_ms = 200 }
//! input_schema = { type = "object", required = ["text"], properties = { text = { type = "string" } } }
//! [tools.declared.source]
//! kind = "http"
//! url = "https://facts.internal/v1/extract"
//! method = "POST"                    # the default; GET, PUT, PATCH and DELETE too
//! headers = { "X-Api-Key" = "env:FACTS_API_KEY", "X-Team" = "search" }
//! bearer_env = "FACTS_TOKEN"         # Authorization: Bearer <$FACTS_TOKEN>
//! max_body_bytes = 1048576           # default 10 MiB
//! connect_timeout_ms = 2000          # default 5000
//! ```
//!
//! **Secrets.** A header value `env:NAME` and `bearer_env` are read from weft's environment
//! when the tool is built (a missing variable is a build error naming the variable, never a
//! call that goes out without it). Their values appear nowhere else: not in `describe()`, not
//! in the configuration `weft config` prints (it shows `env:NAME`), not in plans or journals,
//! and any error message — a server's error body included — has them replaced by
//! `[redacted]`. The URL must not carry credentials (`user:pass@`); its query string is left
//! out of descriptions and error messages.
//!
//! **Every request** carries `Content-Type: application/json` (unless a header configures
//! another), `Idempotency-Key` (the call's key, the same on every retry of the call),
//! `X-Weft-Instance`, `X-Weft-Step` and `X-Weft-Attempt` (the engine's attempt of the step;
//! the retries the `retry` setting makes inside one attempt repeat it, with the same key).
//! Redirects are not followed (a 3xx is an `http_status` failure) and proxy variables are
//! ignored, so a call goes exactly where the definition says.
//!
//! **The address guard** (`weft_tools::http_guard`, shared with `http.request`). The URL's
//! host is the operator's explicit choice: an IP literal there is called as written, even a
//! loopback or private one. A *name* is not a statement about where it points, so its DNS
//! answers are screened: loopback, private, link-local (the cloud metadata service
//! 169.254.169.254), carrier-grade NAT and unspecified addresses, IPv4-mapped forms
//! included, are dropped unless the source lists the name exactly in its own
//! `allow_hosts = ["facts.internal"]` (a name with nothing else left is refused, `denied`).
//! A redirect to such an address is `denied` too (other 3xx stay `http_status`).
//!
//! **Answers.** A 2xx body is parsed as JSON and is the result; an empty body (a 204) is
//! `null`. Failures have stable codes:
//!
//! | code | when | retried |
//! |---|---|---|
//! | `http_status` | any other status; the message has the status and ≤ 512 characters of the body | 408, 429, 5xx |
//! | `http_connect` | the connection could not be made (refused, DNS, TLS, connect timeout) | yes |
//! | `http_io` | the connection broke during the exchange | yes |
//! | `http_not_json` | a 2xx body that is not one JSON value (with an excerpt) | no |
//! | `http_too_large` | a body over `max_body_bytes`: refused from its `Content-Length` before reading, or cut while streaming | no |
//! | `denied` | the name resolves only to special addresses, or a redirect points at one (see above) | no |
//!
//! The call's time limit is the tool's `timeout_ms` (the [`DeclaredTool`] wrapper); the
//! connection also has its own `connect_timeout_ms`.
//!
//! [`DeclaredTool`]: crate::DeclaredTool

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use std::net::SocketAddr;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Method, StatusCode, Url, redirect};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_tools::http_guard::{self, Allowlist, Denied};
use weft_tools::{BoxFuture, ToolContext, ToolError};

use crate::Error;
use crate::declared::Source;

/// The `http` source's settings (`source = { kind = "http", … }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpDef {
    /// The endpoint, `http://` or `https://`, without credentials.
    pub url: String,
    /// The request method (default `POST`): `GET`, `POST`, `PUT`, `PATCH` or `DELETE`. The
    /// args are the JSON body whatever the method.
    #[serde(default = "default_method")]
    pub method: String,
    /// Headers sent with every call. A value `env:NAME` is the value of the environment
    /// variable `NAME`, read when the tool is built (use it for every secret).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// An environment variable whose value is sent as `Authorization: Bearer <value>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_env: Option<String>,
    /// Largest response body accepted, in bytes (default 10 MiB).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
    /// How long establishing a connection may take, in milliseconds (default 5000).
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Names that may resolve to loopback, private or link-local addresses (exact names, as
    /// the URL writes them); others' such DNS answers are refused (see the module docs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
}

fn default_method() -> String {
    "POST".into()
}
fn default_max_body_bytes() -> u64 {
    10 * 1024 * 1024
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}

impl HttpDef {
    /// The endpoint's host (a name, an IPv4 literal or a bracketed IPv6 literal), or why
    /// the URL has none.
    pub fn host(&self) -> Result<String, String> {
        let url = Url::parse(&self.url).map_err(|e| format!("source.url: {e}"))?;
        url.host_str()
            .map(str::to_string)
            .ok_or_else(|| format!("source.url `{}` has no host", self.url))
    }

    /// What its calls need: the URL's host (and port), in weft's process.
    pub fn needs(&self) -> weft_tools::Needs {
        let host = match Url::parse(&self.url) {
            Ok(u) => match (u.host_str(), u.port_or_known_default()) {
                (Some(h), Some(p)) => vec![format!("{h}:{p}")],
                (Some(h), None) => vec![h.to_string()],
                _ => Vec::new(),
            },
            Err(_) => Vec::new(),
        };
        weft_tools::Needs {
            network: host,
            ..weft_tools::Needs::nothing("http")
        }
    }

    /// Whether any value comes from the node's environment (`bearer_env`, an `env:` header).
    pub fn reads_environment(&self) -> bool {
        self.bearer_env.is_some() || self.headers.values().any(|v| v.starts_with("env:"))
    }
}

/// Headers weft sets on every call; a definition may not set them itself.
const RESERVED: &[&str] = &[
    "idempotency-key",
    "x-weft-instance",
    "x-weft-step",
    "x-weft-attempt",
    "content-length",
    "host",
];

/// How much of an error body is kept for the message (the message shows ≤ 512 characters).
const ERROR_BODY_BYTES: usize = 4096;
/// Length of the body excerpts in error messages, in characters.
const EXCERPT_CHARS: usize = 512;

/// The `http` source, built from an [`HttpDef`].
pub(crate) struct Http {
    client: Client,
    method: Method,
    url: Url,
    headers: HeaderMap,
    max_body: u64,
    /// `POST http://host/path`, without query or secrets.
    what: String,
    /// Secret values, replaced in every error message.
    secrets: Arc<Vec<String>>,
    /// The source's `allow_hosts`, for redirect targets.
    allow: Arc<Allowlist>,
}

impl Http {
    /// The source `def` describes for tool `name`; reads the `env:` secrets now.
    pub(crate) fn open(name: &str, def: &HttpDef) -> Result<Self, Error> {
        Http::open_with(name, def, Arc::new(SystemLookup))
    }

    /// [`Http::open`] resolving names through `lookup` (tests give fixed answers).
    fn open_with(name: &str, def: &HttpDef, lookup: Arc<dyn Lookup>) -> Result<Self, Error> {
        let invalid = |message: String| Error::Invalid {
            name: name.to_string(),
            message,
        };
        let url = Url::parse(&def.url).map_err(|e| invalid(format!("source.url: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(
                "source.url: only http and https are supported".into(),
            ));
        }
        if url.host_str().is_none() {
            return Err(invalid("source.url: no host".into()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "source.url must not carry credentials; put them in `headers` as \
                 `env:NAME` or use `bearer_env`"
                    .into(),
            ));
        }
        let method = match def.method.to_ascii_uppercase().as_str() {
            "GET" => Method::GET,
            "POST" => Method::POST,
            "PUT" => Method::PUT,
            "PATCH" => Method::PATCH,
            "DELETE" => Method::DELETE,
            _ => {
                return Err(invalid(format!(
                    "source.method `{}` is not one of GET, POST, PUT, PATCH, DELETE",
                    excerpt(&def.method, 40)
                )));
            }
        };
        if def.max_body_bytes == 0 {
            return Err(invalid("source.max_body_bytes must be at least 1".into()));
        }
        if def.connect_timeout_ms == 0 {
            return Err(invalid(
                "source.connect_timeout_ms must be at least 1".into(),
            ));
        }

        let mut secrets = Vec::new();
        let mut headers = HeaderMap::new();
        for (k, v) in &def.headers {
            let hname = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                invalid(format!(
                    "source.headers: `{}` is not a header name",
                    excerpt(k, 60)
                ))
            })?;
            if RESERVED.contains(&hname.as_str()) {
                return Err(invalid(format!(
                    "source.headers: `{hname}` is set by weft on every call"
                )));
            }
            if hname == AUTHORIZATION && def.bearer_env.is_some() {
                return Err(invalid(
                    "source.headers: `authorization` and `bearer_env` both set it".into(),
                ));
            }
            let value = match v.strip_prefix("env:") {
                Some(var) => {
                    let s = read_env(var, &format!("source.headers.{k}")).map_err(invalid)?;
                    let hv = HeaderValue::from_str(&s).map_err(|_| {
                        invalid(format!(
                            "source.headers.{k}: environment variable `{var}` holds a value \
                             that is not a valid header value"
                        ))
                    })?;
                    secrets.push(s);
                    hv
                }
                None => HeaderValue::from_str(v).map_err(|_| {
                    invalid(format!("source.headers.{k}: not a valid header value"))
                })?,
            };
            headers.append(hname, sensitive(value));
        }
        if let Some(var) = &def.bearer_env {
            let token = read_env(var, "source.bearer_env").map_err(invalid)?;
            let hv = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                invalid(format!(
                    "source.bearer_env: environment variable `{var}` holds a value that is not \
                     a valid header value"
                ))
            })?;
            secrets.push(token);
            headers.insert(AUTHORIZATION, sensitive(hv));
        }
        if !headers.contains_key(CONTENT_TYPE) {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        // Very short secrets would redact ordinary words of messages; they are still secrets,
        // but replacing "a" everywhere helps nobody.
        secrets.retain(|s| s.len() >= 4);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));

        let allow = Arc::new(Allowlist::for_source(name, &def.allow_hosts));
        let resolver = GuardedResolver {
            allow: Arc::clone(&allow),
            lookup,
        };
        let client = build_client(
            Duration::from_millis(def.connect_timeout_ms),
            Some(Arc::new(resolver)),
        )
        .map_err(|e| invalid(format!("HTTP client setup failed: {e}")))?;
        let what = format!("{method} {}", shown_url(&url));
        Ok(Http {
            client,
            method,
            url,
            headers,
            max_body: def.max_body_bytes,
            what,
            secrets: Arc::new(secrets),
            allow,
        })
    }
}

/// The value of environment variable `var` for `key`; the error names the variable only.
fn read_env(var: &str, key: &str) -> Result<String, String> {
    if var.is_empty() {
        return Err(format!("{key}: `env:` needs a variable name"));
    }
    std::env::var(var).map_err(|e| match e {
        std::env::VarError::NotPresent => {
            format!("{key}: environment variable `{var}` is not set")
        }
        std::env::VarError::NotUnicode(_) => {
            format!("{key}: environment variable `{var}` is not valid UTF-8")
        }
    })
}

fn sensitive(mut v: HeaderValue) -> HeaderValue {
    v.set_sensitive(true);
    v
}

/// The URL as descriptions and messages show it: no query, no fragment.
fn shown_url(url: &Url) -> String {
    let mut u = url.clone();
    let had_query = u.query().is_some();
    u.set_query(None);
    u.set_fragment(None);
    if had_query {
        format!("{u}?…")
    } else {
        u.to_string()
    }
}

/// How names are resolved: the system's resolver, or fixed answers in tests.
trait Lookup: Send + Sync {
    /// Every address `host` resolves to.
    fn lookup(&self, host: String) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>>;
}

/// The system's resolver (getaddrinfo on a blocking thread, as reqwest's default does).
struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: String) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.collect()) })
    }
}

/// The source's resolver: every answer screened by the address guard.
struct GuardedResolver {
    allow: Arc<Allowlist>,
    lookup: Arc<dyn Lookup>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let allow = Arc::clone(&self.allow);
        let answers = self.lookup.lookup(host.clone());
        Box::pin(async move {
            let addrs = http_guard::screen(&allow, &host, answers.await?)
                .map_err(|d| Box::new(d) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// One client per tool (its connection pool), on the workspace's one TLS stack: rustls with
/// the ring provider and the webpki roots, as `http.request` builds it; no proxy, no
/// redirects; names resolved through `resolver` when given. The MCP source's
/// streamable-HTTP client is built here too.
pub(crate) fn build_client(
    connect_timeout: Duration,
    resolver: Option<Arc<dyn Resolve>>,
) -> Result<Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut builder = Client::builder()
        .tls_backend_preconfigured(tls)
        .no_proxy()
        .redirect(redirect::Policy::none())
        .connect_timeout(connect_timeout);
    if let Some(r) = resolver {
        builder = builder.dns_resolver(r);
    }
    builder.build().map_err(|e| e.to_string())
}

impl Source for Http {
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let secrets = Arc::clone(&self.secrets);
        let prepared = self.request(&ctx, &args);
        let max = self.max_body;
        let what = self.what.clone();
        let allow = Arc::clone(&self.allow);
        Box::pin(async move {
            let result = match prepared {
                Ok(req) => exchange(req, max, &what, &allow).await,
                Err(e) => Err(e),
            };
            result.map_err(|mut e| {
                e.message = redact(&e.message, &secrets);
                e
            })
        })
    }

    fn describe(&self) -> String {
        format!("http {}", self.what)
    }
}

impl Http {
    fn request(
        &self,
        ctx: &ToolContext,
        args: &Value,
    ) -> Result<reqwest::RequestBuilder, ToolError> {
        let body = serde_json::to_vec(args)
            .map_err(|e| ToolError::fatal("args_invalid", format!("{}: {e}", self.what)))?;
        let mut headers = self.headers.clone();
        let mut put = |name: &'static str, value: &str| -> Result<(), ToolError> {
            let v = HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
                ToolError::fatal(
                    "args_invalid",
                    format!(
                        "{}: `{name}` cannot carry {:?}",
                        self.what,
                        excerpt(value, 80)
                    ),
                )
            })?;
            headers.insert(HeaderName::from_static(name), v);
            Ok(())
        };
        put("idempotency-key", &ctx.idempotency_key)?;
        put("x-weft-instance", &ctx.instance)?;
        put("x-weft-step", &ctx.step)?;
        put("x-weft-attempt", &ctx.attempt.to_string())?;
        Ok(self
            .client
            .request(self.method.clone(), self.url.clone())
            .headers(headers)
            .body(body))
    }
}

/// Sends the request and reads the capped answer.
async fn exchange(
    req: reqwest::RequestBuilder,
    max: u64,
    what: &str,
    allow: &Allowlist,
) -> Result<Value, ToolError> {
    let mut resp = req.send().await.map_err(|e| transport(e, what))?;
    let status = resp.status();
    if status.is_redirection()
        && let Some(target) = redirect_target(&resp)
        && let Err(d) = allow.check_special(&target)
    {
        return Err(ToolError::fatal(
            "denied",
            format!("{what} answered {status}, a redirect to a refused address: {d}"),
        ));
    }
    if !status.is_success() {
        let body = read_capped(&mut resp, ERROR_BODY_BYTES as u64, what)
            .await
            .map(|(b, _)| b)
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        let msg = format!(
            "{what} answered {status}: {}",
            excerpt(text.trim(), EXCERPT_CHARS)
        );
        let retry = status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS;
        return Err(if retry {
            ToolError::retryable("http_status", msg)
        } else {
            ToolError::fatal("http_status", msg)
        });
    }
    let too_large = || {
        ToolError::fatal(
            "http_too_large",
            format!("{what}: the response body exceeds {max} bytes (source.max_body_bytes)"),
        )
    };
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let (body, over) = read_capped(&mut resp, max, what).await?;
    if over {
        return Err(too_large());
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&body).map_err(|e| {
        let text = String::from_utf8_lossy(&body);
        ToolError::fatal(
            "http_not_json",
            format!(
                "{what}: the response is not JSON ({e}): {}",
                excerpt(text.trim(), EXCERPT_CHARS)
            ),
        )
    })
}

/// Reads the body chunk by chunk, at most `max` bytes; `true` when there was more (the rest
/// is not read: the connection is dropped).
async fn read_capped(
    resp: &mut reqwest::Response,
    max: u64,
    what: &str,
) -> Result<(Vec<u8>, bool), ToolError> {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(e, what))? {
        if buf.len().saturating_add(chunk.len()) > max {
            let room = max - buf.len();
            buf.extend_from_slice(&chunk[..room]);
            return Ok((buf, true));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((buf, false))
}

/// The host a redirect's `Location` points at (relative locations stay on the same host:
/// `None`).
fn redirect_target(resp: &reqwest::Response) -> Option<String> {
    let location = resp
        .headers()
        .get(reqwest::header::LOCATION)?
        .to_str()
        .ok()?;
    let url = resp.url().join(location).ok()?;
    let host = url.host_str()?;
    (url.host_str() != resp.url().host_str()).then(|| host.to_string())
}

/// A transport failure: `http_connect` when no connection was made, `http_io` otherwise
/// (both retryable: the same request may well succeed again); `denied` when the address
/// guard refused the name's DNS answers.
fn transport(e: reqwest::Error, what: &str) -> ToolError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(c) = src {
        if let Some(d) = c.downcast_ref::<Denied>() {
            return ToolError::fatal("denied", format!("{what}: {d}"));
        }
        src = c.source();
    }
    let connect = e.is_connect();
    let detail = chain(&e.without_url());
    if connect {
        ToolError::retryable("http_connect", format!("{what}: cannot connect: {detail}"))
    } else {
        ToolError::retryable("http_io", format!("{what}: {detail}"))
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        src = c.source();
    }
    s
}

/// `message` with every secret replaced by `[redacted]`.
fn redact(message: &str, secrets: &[String]) -> String {
    let mut m = message.to_string();
    for s in secrets {
        if m.contains(s.as_str()) {
            m = m.replace(s.as_str(), "[redacted]");
        }
    }
    m
}

/// At most `max` characters of `s`: the first `max - 1` and `…` when it is longer.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::IpAddr;

    use super::*;

    /// Answers every name with one address, whatever DNS would say.
    struct Fixed(IpAddr);

    impl Lookup for Fixed {
        fn lookup(&self, _host: String) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
            let ip = self.0;
            Box::pin(async move { Ok(vec![SocketAddr::new(ip, 0)]) })
        }
    }

    /// A server on 127.0.0.1 answering every request `{"ok": true}`; its port.
    async fn server() -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let _ = sock.read(&mut buf).await;
                    let body = "{\"ok\": true}";
                    let out = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(out.as_bytes()).await;
                });
            }
        });
        port
    }

    fn source(url: String, allow: &[&str], ip: &str) -> Http {
        let def = HttpDef {
            url,
            method: default_method(),
            headers: BTreeMap::new(),
            bearer_env: None,
            max_body_bytes: default_max_body_bytes(),
            connect_timeout_ms: 2_000,
            allow_hosts: allow.iter().map(|s| s.to_string()).collect(),
        };
        Http::open_with("facts", &def, Arc::new(Fixed(ip.parse().unwrap()))).unwrap()
    }

    #[tokio::test]
    async fn a_name_resolving_to_the_metadata_address_is_denied() {
        let port = server().await;
        for ip in ["169.254.169.254", "::ffff:169.254.169.254", "127.0.0.1"] {
            let http = source(format!("http://metadata.test:{port}/x"), &[], ip);
            let e = http
                .call(ToolContext::detached("s"), serde_json::json!({}))
                .await
                .unwrap_err();
            assert_eq!(e.code, "denied", "{ip}: {e}");
            assert!(!e.retryable);
            assert!(
                e.message.contains("`metadata.test`")
                    && e.message.contains("allow_hosts = [\"metadata.test\"]"),
                "{ip}: {e}"
            );
        }
        // Named exactly in the source's allow_hosts, the name may resolve there (to the
        // local server here), and a literal address in the URL is the operator's choice.
        let http = source(
            format!("http://metadata.test:{port}/x"),
            &["metadata.test"],
            "127.0.0.1",
        );
        let r = http.call(ToolContext::detached("s"), serde_json::json!({}));
        assert_eq!(r.await.unwrap(), serde_json::json!({"ok": true}));
        let http = source(format!("http://127.0.0.1:{port}/x"), &[], "169.254.169.254");
        let r = http.call(ToolContext::detached("s"), serde_json::json!({}));
        assert_eq!(r.await.unwrap(), serde_json::json!({"ok": true}));
    }
}
