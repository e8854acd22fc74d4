//! The `http` source against a real HTTP server: an axum app on 127.0.0.1:0 in the test
//! process that records every request (method, path, headers, body) and answers per path.
//! Each test starts its own server, so tests do not see each other's requests.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use weft_sources::{DeclaredTool, ToolDef, declare};
use weft_tools::{NoServices, Tool, ToolContext, ToolError};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

#[derive(Default)]
struct Peer {
    seen: Mutex<Vec<Seen>>,
    flaky: AtomicU32,
    /// Bytes `/huge-stream` has produced.
    streamed: AtomicU64,
}

impl Peer {
    fn seen(&self, path: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }
}

const CHUNK: usize = 64 * 1024;

async fn handle(
    State(peer): State<Arc<Peer>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    peer.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: path.clone(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    });
    let header = |k: &str| {
        headers
            .get(k)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    match path.as_str() {
        "/echo" => {
            let got: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            axum::Json(json!({"got": got})).into_response()
        }
        "/empty" => StatusCode::NO_CONTENT.into_response(),
        "/flaky" => {
            if peer.flaky.fetch_add(1, Ordering::SeqCst) == 0 {
                (StatusCode::INTERNAL_SERVER_ERROR, "temporarily broken").into_response()
            } else {
                axum::Json(json!({"ok": true})).into_response()
            }
        }
        "/missing" => (
            StatusCode::NOT_FOUND,
            format!("no such route; {}", "x".repeat(3000)),
        )
            .into_response(),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            axum::Json(json!({"late": true})).into_response()
        }
        "/malformed" => (
            [(CONTENT_TYPE, "application/json")],
            "{\"facts\": [1, 2,  <oops",
        )
            .into_response(),
        // Declares 50 MiB, sends one chunk, then never finishes: only a client that trusts
        // the Content-Length fails at once.
        "/huge-declared" => {
            let first = futures::stream::once(async {
                Ok::<_, std::io::Error>(Bytes::from(vec![b' '; CHUNK]))
            });
            let stream = futures::StreamExt::chain(first, futures::stream::pending());
            Response::builder()
                .header(CONTENT_TYPE, "application/json")
                .header(CONTENT_LENGTH, 50 * 1024 * 1024)
                .body(Body::from_stream(stream))
                .unwrap()
        }
        // An endless chunked body (up to 4 GiB), counting what it produced.
        "/huge-stream" => {
            let counter = Arc::clone(&peer);
            let stream = futures::stream::unfold(0u64, move |n| {
                let counter = Arc::clone(&counter);
                async move {
                    if n >= 4 << 30 {
                        return None;
                    }
                    counter.streamed.fetch_add(CHUNK as u64, Ordering::SeqCst);
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from(vec![b'1'; CHUNK])),
                        n + CHUNK as u64,
                    ))
                }
            });
            Response::builder()
                .header(CONTENT_TYPE, "application/json")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        // A careless server that echoes the credentials it refuses.
        "/denied" => (
            StatusCode::UNAUTHORIZED,
            format!(
                "bad credentials: x-api-key={} authorization={}",
                header("x-api-key"),
                header("authorization")
            ),
        )
            .into_response(),
        p if p.starts_with("/status/") => {
            let code: u16 = p["/status/".len()..].parse().unwrap();
            (StatusCode::from_u16(code).unwrap(), "status as asked").into_response()
        }
        _ => (StatusCode::IM_A_TEAPOT, "unknown test path").into_response(),
    }
}

/// Starts a server; its base URL and what it records.
async fn serve() -> (String, Arc<Peer>) {
    let peer = Arc::new(Peer::default());
    let app = Router::new().fallback(handle).with_state(Arc::clone(&peer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), peer)
}

/// A definition of tool `fetch` whose source is `source` (an `http` source), with `extra`
/// top-level fields.
fn def(source: Value, extra: Value) -> ToolDef {
    let mut src = json!({"kind": "http"});
    for (k, v) in source.as_object().unwrap() {
        src[k] = v.clone();
    }
    let mut d = json!({"name": "fetch", "effect": "read", "idempotent": true,
        "timeout_ms": 10_000, "source": src});
    for (k, v) in extra.as_object().unwrap() {
        d[k] = v.clone();
    }
    serde_json::from_value(d).unwrap()
}

fn tool(source: Value, extra: Value) -> DeclaredTool {
    declare(&def(source, extra)).unwrap()
}

fn ctx() -> ToolContext {
    ToolContext {
        tenant: Arc::from("acme"),
        instance: Arc::from("inst-42"),
        plan: Arc::from("facts"),
        step: Arc::from("extract"),
        idempotency_key: Arc::from("inst-42/extract/7"),
        attempt: 2,
        deadline: None,
        inputs: Arc::new(Vec::new()),
        services: Arc::new(NoServices),
    }
}

async fn fails(t: &DeclaredTool, args: Value) -> ToolError {
    t.call(ctx(), args).await.unwrap_err()
}

#[tokio::test]
async fn a_call_sends_the_args_as_json_and_returns_the_json_answer() {
    let (base, peer) = serve().await;
    let t = tool(json!({"url": format!("{base}/echo")}), json!({}));
    assert_eq!(t.source(), format!("http POST {base}/echo"));
    let args = json!({"text": "Ada Lovelace wrote the first program", "n": [1, 2]});
    let r = t.call(ctx(), args.clone()).await.unwrap();
    assert_eq!(r, json!({"got": args}));

    let seen = peer.seen("/echo");
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(s.method, "POST");
    assert_eq!(serde_json::from_slice::<Value>(&s.body).unwrap(), args);
    assert_eq!(s.headers["content-type"], "application/json");
    assert_eq!(s.headers["idempotency-key"], "inst-42/extract/7");
    assert_eq!(s.headers["x-weft-instance"], "inst-42");
    assert_eq!(s.headers["x-weft-step"], "extract");
    assert_eq!(s.headers["x-weft-attempt"], "2");

    // Another method, and a plain configured header.
    let put = tool(
        json!({"url": format!("{base}/echo?v=2"), "method": "put",
            "headers": {"X-Team": "search"}}),
        json!({}),
    );
    assert_eq!(put.source(), format!("http PUT {base}/echo?…"));
    put.call(ctx(), json!({"a": 1})).await.unwrap();
    let s = &peer.seen("/echo")[1];
    assert_eq!(s.method, "PUT");
    assert_eq!(s.headers["x-team"], "search");
}

#[tokio::test]
async fn an_empty_answer_is_null() {
    let (base, peer) = serve().await;
    let t = tool(json!({"url": format!("{base}/empty")}), json!({}));
    assert_eq!(t.call(ctx(), json!({})).await.unwrap(), Value::Null);
    assert_eq!(peer.seen("/empty").len(), 1);
}

#[tokio::test]
async fn a_server_error_is_retried_with_the_same_idempotency_key() {
    let (base, peer) = serve().await;
    let t = tool(
        json!({"url": format!("{base}/flaky")}),
        json!({"retry": {"max": 2, "backoff_ms": 10}}),
    );
    assert_eq!(
        t.call(ctx(), json!({"x": 1})).await.unwrap(),
        json!({"ok": true})
    );
    let seen = peer.seen("/flaky");
    assert_eq!(seen.len(), 2, "one 500, then the retry: {seen:?}");
    let keys: Vec<&str> = seen
        .iter()
        .map(|s| s.headers["idempotency-key"].as_str())
        .collect();
    assert_eq!(keys, ["inst-42/extract/7", "inst-42/extract/7"]);
    assert_eq!(seen[0].body, seen[1].body);

    // Without retries the 500 is the answer: retryable, with the status and the body.
    let (base, _peer) = serve().await;
    let once = tool(json!({"url": format!("{base}/flaky")}), json!({}));
    let e = fails(&once, json!({})).await;
    assert_eq!(e.code, "http_status");
    assert!(e.retryable);
    assert!(e.message.contains("500"), "{e}");
    assert!(e.message.contains("temporarily broken"), "{e}");
}

#[tokio::test]
async fn statuses_are_retryable_only_when_retrying_can_help() {
    let (base, peer) = serve().await;
    for (code, retryable) in [
        (408, true),
        (429, true),
        (502, true),
        (503, true),
        (400, false),
        (401, false),
        (409, false),
        (422, false),
        (302, false),
    ] {
        let t = tool(json!({"url": format!("{base}/status/{code}")}), json!({}));
        let e = fails(&t, json!({})).await;
        assert_eq!(e.code, "http_status", "{code}: {e}");
        assert_eq!(e.retryable, retryable, "{code}: {e}");
        assert!(e.message.contains(&code.to_string()), "{e}");
    }
    assert_eq!(peer.seen("/status/302").len(), 1);
}

#[tokio::test]
async fn a_client_error_is_fatal_with_a_short_excerpt() {
    let (base, peer) = serve().await;
    let t = tool(
        json!({"url": format!("{base}/missing")}),
        json!({"retry": {"max": 3, "backoff_ms": 1}}),
    );
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "http_status");
    assert!(!e.retryable);
    assert!(e.message.contains("404"), "{e}");
    assert!(e.message.contains("no such route; xxx"), "{e}");
    let excerpt = e.message.split("404 Not Found: ").nth(1).unwrap();
    assert!(
        excerpt.chars().count() <= 512,
        "{} characters",
        excerpt.chars().count()
    );
    assert!(excerpt.ends_with('…'), "{excerpt}");
    assert_eq!(
        peer.seen("/missing").len(),
        1,
        "a fatal failure is not retried"
    );
}

#[tokio::test]
async fn a_slow_answer_fails_at_the_tool_timeout() {
    let (base, peer) = serve().await;
    let t = tool(
        json!({"url": format!("{base}/slow")}),
        json!({"timeout_ms": 300}),
    );
    let start = Instant::now();
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "timeout", "{e}");
    assert!(e.retryable);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(peer.seen("/slow").len(), 1);
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_fatal() {
    let (base, peer) = serve().await;
    let t = tool(
        json!({"url": format!("{base}/malformed")}),
        json!({"retry": {"max": 3, "backoff_ms": 1}}),
    );
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "http_not_json");
    assert!(!e.retryable);
    assert!(e.message.contains("<oops"), "the excerpt: {e}");
    assert_eq!(peer.seen("/malformed").len(), 1);
}

#[tokio::test]
async fn a_body_over_the_cap_fails_fast_without_being_read() {
    let (base, peer) = serve().await;
    // Its Content-Length says 50 MiB (more than the default 10 MiB cap): refused at once,
    // although the body never finishes.
    let t = tool(json!({"url": format!("{base}/huge-declared")}), json!({}));
    let start = Instant::now();
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "http_too_large", "{e}");
    assert!(!e.retryable);
    assert!(e.message.contains("10485760"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );

    // No Content-Length, an endless body: cut at the cap, long before the tool's timeout,
    // having pulled only about the cap from the server (memory stays bounded).
    let t = tool(
        json!({"url": format!("{base}/huge-stream"), "max_body_bytes": 256 * 1024}),
        json!({"timeout_ms": 30_000}),
    );
    let start = Instant::now();
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "http_too_large", "{e}");
    assert!(e.message.contains("262144"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    // Give the server a moment to notice the closed connection, then check it stopped.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = peer.streamed.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = peer.streamed.load(Ordering::SeqCst);
    assert!(sent < 32 << 20, "the server produced {sent} bytes");
    assert_eq!(
        sent, later,
        "the connection was dropped, the stream stopped"
    );
}

#[tokio::test]
async fn a_refused_connection_is_retryable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let t = tool(json!({"url": format!("http://{addr}/gone")}), json!({}));
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "http_connect", "{e}");
    assert!(e.retryable);
    assert!(e.message.contains(&addr.to_string()), "{e}");
}

const SECRET_KEY: &str = "k3y-0f-the-kingdom-5150";
const SECRET_TOKEN: &str = "t0ken-of-the-realm-8086";

/// Runs in a child process of this test binary that has the secrets in its environment
/// (the test cannot set variables in its own process).
#[tokio::test]
async fn secrets_come_from_the_environment_and_never_show() {
    if std::env::var_os("WEFT_TEST_API_KEY").is_none() {
        let out = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "secrets_come_from_the_environment_and_never_show",
                "--exact",
                "--nocapture",
            ])
            .env("WEFT_TEST_API_KEY", SECRET_KEY)
            .env("WEFT_TEST_TOKEN", SECRET_TOKEN)
            .output()
            .await
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
        return;
    }

    let (base, peer) = serve().await;
    let source = |path: &str| {
        json!({"url": format!("{base}{path}"),
            "headers": {"X-Api-Key": "env:WEFT_TEST_API_KEY"},
            "bearer_env": "WEFT_TEST_TOKEN"})
    };
    let d = def(source("/echo"), json!({}));
    let t = declare(&d).unwrap();
    t.call(ctx(), json!({"q": 1})).await.unwrap();
    let s = &peer.seen("/echo")[0];
    assert_eq!(s.headers["x-api-key"], SECRET_KEY);
    assert_eq!(s.headers["authorization"], format!("Bearer {SECRET_TOKEN}"));

    // Not in what people and plans see of the tool, nor in its definition as printed.
    let shown = [
        t.source(),
        format!("{t:?}"),
        format!("{d:?}"),
        serde_json::to_string(&d).unwrap(),
        serde_json::to_string(t.spec()).unwrap(),
    ];
    for s in &shown {
        assert!(
            !s.contains(SECRET_KEY) && !s.contains(SECRET_TOKEN),
            "a secret in {s}"
        );
    }

    // Not in errors, even when the server echoes them back.
    let denied = declare(&def(source("/denied"), json!({}))).unwrap();
    let e = fails(&denied, json!({})).await;
    assert_eq!(e.code, "http_status");
    assert!(
        !e.message.contains(SECRET_KEY) && !e.message.contains(SECRET_TOKEN),
        "{e}"
    );
    assert!(
        e.message
            .contains("x-api-key=[redacted] authorization=Bearer [redacted]"),
        "{e}"
    );
    assert_eq!(
        peer.seen("/denied")[0].headers["x-api-key"],
        SECRET_KEY,
        "the server did get it"
    );

    // A variable that is not set fails the build, naming the variable (not a value).
    let mut missing = source("/echo");
    missing["headers"]["X-Other"] = json!("env:WEFT_TEST_SURELY_UNSET_VARIABLE");
    let e = declare(&def(missing, json!({}))).unwrap_err().to_string();
    assert!(e.contains("WEFT_TEST_SURELY_UNSET_VARIABLE"), "{e}");
    assert!(e.contains("not set"), "{e}");
    let mut missing = source("/echo");
    missing["bearer_env"] = json!("WEFT_TEST_SURELY_UNSET_TOKEN");
    let e = declare(&def(missing, json!({}))).unwrap_err().to_string();
    assert!(e.contains("WEFT_TEST_SURELY_UNSET_TOKEN"), "{e}");
}

#[test]
fn bad_definitions_do_not_build() {
    let build = |source: Value| {
        declare(&def(source, json!({})))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = build(json!({"url": "http://user:pw@127.0.0.1:1/x"}));
    assert!(e.contains("credentials") && !e.contains("pw@"), "{e}");
    let e = build(json!({"url": "ftp://127.0.0.1/x"}));
    assert!(e.contains("http and https"), "{e}");
    let e = build(json!({"url": "not a url"}));
    assert!(e.contains("source.url"), "{e}");
    let e = build(json!({"url": "http://127.0.0.1:1/x", "method": "TRACE"}));
    assert!(e.contains("TRACE"), "{e}");
    let e = build(json!({"url": "http://127.0.0.1:1/x", "headers": {"Idempotency-Key": "mine"}}));
    assert!(e.contains("set by weft"), "{e}");
    let e = build(json!({"url": "http://127.0.0.1:1/x", "max_body_bytes": 0}));
    assert!(e.contains("max_body_bytes"), "{e}");

    // Unknown fields of the source are refused; the defaults are as documented.
    let unknown: Result<ToolDef, _> = serde_json::from_value(json!({"name": "x",
        "source": {"kind": "http", "url": "http://h/", "verb": "POST"}}));
    assert!(unknown.unwrap_err().to_string().contains("verb"));
    let d = def(json!({"url": "http://h/"}), json!({}));
    let weft_sources::SourceDef::Http(h) = &d.source else {
        panic!("{d:?}")
    };
    assert_eq!(d.source.kind(), "http");
    assert_eq!(h.method, "POST");
    assert_eq!(h.max_body_bytes, 10 * 1024 * 1024);
    assert_eq!(h.connect_timeout_ms, 5_000);
}
